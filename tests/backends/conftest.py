import pytest


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "tests/backends/" in str(item.fspath):
            item.add_marker(pytest.mark.backends)


@pytest.fixture(scope="session", autouse=True)
def backends_run_in_the_framework_environments(framework_envs):
    """Every test here runs a framework: the environments must exist (tests/conftest.py)."""
