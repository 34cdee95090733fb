"""tests/helpers.run_in_env forks a framework's calls from a server that imported the framework once
(tests/zygote.py). The frameworks read some variables when they are imported, so a call whose environment differs
from a server's must get another server, or a test that sets one would run with the server's settings; a call that
differs only in a variable no framework reads must not, or the suite would start its framework servers over and
over."""

import json

import pytest
from helpers import FRAMEWORK_SERVERS, FrameworkServers, run_in_env

SHOW = "import json, os, jax; print(json.dumps([os.getppid(), jax.config.jax_enable_x64]))"


@pytest.fixture
def servers(monkeypatch):
    """JAX's servers of this test's own, the first started in the test's setup (when PYTEST_CURRENT_TEST names
    another phase than the call's)."""
    own = FrameworkServers("jax")
    monkeypatch.setitem(FRAMEWORK_SERVERS, "jax", own)
    assert run_in_env("jax", "-c", "pass").returncode == 0
    yield own
    for server in own.servers.values():
        server.close()


def parent_and_x64(proc) -> tuple[int, bool]:
    assert proc.returncode == 0, proc.stderr
    return tuple(json.loads(proc.stdout))


def test_each_environment_as_jax_reads_it_has_its_server_and_the_two_used_last_are_kept(servers):
    (first,) = servers.servers.values()
    assert parent_and_x64(run_in_env("jax", "-c", SHOW)) == (first.proc.pid, False)
    # The cluster's configuration, which no framework reads.
    assert parent_and_x64(run_in_env("jax", "-c", SHOW, env={"SLURM_CONF": "/elsewhere"})) == (first.proc.pid, False)
    # JAX reads JAX_ENABLE_X64 when it is imported: the first server's JAX was imported without it.
    parent, x64 = parent_and_x64(run_in_env("jax", "-c", SHOW, env={"JAX_ENABLE_X64": "1"}))
    assert parent != first.proc.pid and x64 is True
    (x64_server,) = [server for server in servers.servers.values() if server is not first]
    x64_process = x64_server.proc
    assert parent == x64_process.pid and len(servers.servers) == 2
    # The first again, then a third environment: the server used least lately (JAX_ENABLE_X64's) ends.
    assert parent_and_x64(run_in_env("jax", "-c", SHOW)) == (first.proc.pid, False)
    assert parent_and_x64(run_in_env("jax", "-c", SHOW, env={"JAX_ENABLE_X64": "0"}))[1] is False
    assert len(servers.servers) == 2 and x64_process.poll() is not None and first.proc.poll() is None
