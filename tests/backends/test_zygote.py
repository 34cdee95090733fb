"""tests/helpers.run_in_env forks a framework's calls from a server that imported the framework once
(tests/zygote.py). The frameworks read some variables when they are imported, so a call whose environment is not the
server's must start afresh, or a test that sets one would run with the server's; a call that differs only in a
variable no framework reads must not, or the suite would start most of its framework processes afresh."""

import json

import pytest
from helpers import SERVERS, Zygote, env_python, run_in_env

SHOW = "import json, os, jax; print(json.dumps([os.getppid(), jax.config.jax_enable_x64]))"


@pytest.fixture
def server(monkeypatch):
    """A server of this test's own, started in the test's setup (when PYTEST_CURRENT_TEST names another phase)."""
    zygote = Zygote("jax", env_python("jax"), fixed_env=True)
    monkeypatch.setitem(SERVERS, "jax", zygote)
    assert run_in_env("jax", "-c", "pass").returncode == 0
    yield zygote
    zygote.proc.stdin.close()
    zygote.proc.wait()


def parent_and_x64(proc) -> tuple[int, bool]:
    assert proc.returncode == 0, proc.stderr
    return tuple(json.loads(proc.stdout))


def test_a_call_in_the_servers_environment_is_forked_from_it_and_any_other_starts_afresh(server):
    assert parent_and_x64(run_in_env("jax", "-c", SHOW)) == (server.proc.pid, False)
    # The local cluster's configuration, which the integration tests set for the rest of a worker's run.
    assert parent_and_x64(run_in_env("jax", "-c", SHOW, env={"SLURM_CONF": "/elsewhere"})) == (server.proc.pid, False)
    # JAX reads JAX_ENABLE_X64 when it is imported: the server's JAX was imported without it.
    parent, x64 = parent_and_x64(run_in_env("jax", "-c", SHOW, env={"JAX_ENABLE_X64": "1"}))
    assert parent != server.proc.pid and x64 is True
