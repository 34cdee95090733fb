import pytest
from helpers import missing_envs


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "tests/backends/" in str(item.fspath):
            item.add_marker(pytest.mark.backends)


@pytest.fixture(scope="session", autouse=True)
def framework_envs():
    missing = missing_envs()
    if missing:
        # Not a skip: `make test` builds the environments first, so their absence is a broken setup.
        pytest.fail(f"framework environments missing: {', '.join(missing)}; run `make setup`", pytrace=False)
