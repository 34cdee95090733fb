"""tests/helpers.run_in_env forks a framework's calls from a server that imported the framework once
(tests/zygote.py). The frameworks read some variables when they are imported, so a call whose environment is not the
server's must start afresh, or a test that sets one would run with the server's."""

import json

import pytest
from helpers import SERVERS, run_in_env

SHOW = "import json, os, jax; print(json.dumps([os.getppid(), jax.config.jax_enable_x64]))"


@pytest.fixture
def started():
    """The server started in the test's setup, when pytest's PYTEST_CURRENT_TEST names another phase than the call's."""
    assert run_in_env("jax", "-c", "pass").returncode == 0


def test_a_call_in_the_servers_environment_is_forked_from_it_and_any_other_starts_afresh(started):
    forked = run_in_env("jax", "-c", SHOW)
    assert forked.returncode == 0, forked.stderr
    parent, x64 = json.loads(forked.stdout)
    assert parent == SERVERS["jax"].proc.pid and x64 is False
    # JAX reads JAX_ENABLE_X64 when it is imported: the server's JAX was imported without it.
    fresh = run_in_env("jax", "-c", SHOW, env={"JAX_ENABLE_X64": "1"})
    assert fresh.returncode == 0, fresh.stderr
    parent, x64 = json.loads(fresh.stdout)
    assert parent != SERVERS["jax"].proc.pid and x64 is True
