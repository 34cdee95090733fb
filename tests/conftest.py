import functools
import os
import re
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

# The pytest workers share the machine's cores, and each framework process they start takes as many threads as
# there are CPUs. An OpenMP thread that waits spins by default, and on a machine so shared the spinning threads
# take the cores from the ones with work: next to a busy loop on one of two cores, a PyTorch digits cell here
# took 9.0 s (9.7 s of CPU), against 7.8 s (7.8 s of CPU) with waiting threads asleep (PASSIVE; one run each).
# The results are the same either way; only the waiting changes. Set before any test starts a process, so that
# every one inherits it.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

# Tests import the project's packages and tests/helpers.py from the repository, installed or not.
ROOT = Path(__file__).resolve().parents[1]
for path in (ROOT, ROOT / "tests"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

import cluster_run  # noqa: E402  (after the path above)
from helpers import leave_out_heavy_unless_asked  # noqa: E402
import pytest  # noqa: E402

OWNS_RUN = pytest.StashKey[bool]()

SECONDS_BY_DIRECTORY: dict[str, float] = defaultdict(float)
TESTS_BY_DIRECTORY: dict[str, set] = defaultdict(set)
STARTED = time.monotonic()


@pytest.fixture(autouse=True)
def no_real_cluster_outside_integration(request, monkeypatch):
    """Only the integration tests reach the local Slurm cluster. A worker that ran an integration file first has
    SLURM_CONF pointing at it (tests/integration/conftest.py), and a plan without --profile would then ask that
    cluster's sinfo for GPUs (orchestrator.plan.discovery) and plan otherwise than the same test run alone. A unit
    test that wants a Slurm command puts a fake one on PATH."""
    if "integration" not in request.node.path.parts:
        monkeypatch.delenv("SLURM_CONF", raising=False)


@pytest.fixture(scope="session")
def framework_envs():
    """The framework environments exist. A test that needs them fails without them, never skips: `make test`
    builds them first, so their absence is a broken setup."""
    from helpers import missing_envs

    missing = missing_envs()
    if missing:
        pytest.fail(f"framework environments missing: {', '.join(missing)}; run `make setup`", pytrace=False)


def is_xdist_worker(config) -> bool:
    return hasattr(config, "workerinput")


def pytest_configure(config):
    # The controller (or a lone pytest) names the run before any worker starts, so that all share one cluster.
    if not is_xdist_worker(config):
        config.stash[OWNS_RUN] = cluster_run.name_this_run()
        cluster_run.share_compilations()


# make test-fast: the unit tests that run in the test process alone, a loop for every edit. A file is in it when its
# source names none of the ways a test starts a process (the command line, a framework's interpreter, subprocess, the
# cluster, a faked command, which is there to be run) and it is not marked `process`; the tier's guard
# (refuse_processes) fails a test of it that starts one all the same.
STARTS_PROCESSES = re.compile(r"\b(run_cli|run_in_env|run_fresh|run_backend|subprocess|Popen|slurm_cluster|"
                              r"fake_slurm_site|fake_tools|fake_queue|dry_run|os\.system)\b")
FAST = "fast"


@functools.cache
def starts_processes(path: Path) -> bool:
    return bool(STARTS_PROCESSES.search(path.read_text()))


def mark_fast(items) -> None:
    for item in items:
        if item.path.parent.name == "unit" and not starts_processes(item.path) and not item.get_closest_marker("process"):
            item.add_marker(FAST)


@pytest.fixture(autouse=True)
def refuse_processes(request, monkeypatch):
    """In `make test-fast` (-m fast), a test that starts a process fails, naming the tier it belongs to."""
    if request.config.getoption("markexpr", "") != FAST:
        return

    def refused(*args, **kwargs):
        pytest.fail("this test starts a process, so it belongs to `make test`, not `make test-fast`: name how it "
                    "starts it in its file (tests/conftest.py, STARTS_PROCESSES)", pytrace=False)

    monkeypatch.setattr(subprocess.Popen, "__init__", refused)


def pytest_collection_modifyitems(config, items):
    leave_out_heavy_unless_asked(config, items)
    mark_fast(items)


def pytest_sessionfinish(session, exitstatus):
    config = session.config
    if not is_xdist_worker(config) and config.stash.get(OWNS_RUN, False):
        error = cluster_run.end()
        if error:
            sys.stderr.write(error + "\n")
            session.exitstatus = 1


def directory_of(nodeid: str) -> str:
    """The directory a test is counted under in the time summary: tests/unit, tests/backends, tests/integration."""
    return "/".join(Path(nodeid.split("::")[0]).parts[:2])


def pytest_runtest_logreport(report):
    # Setup, call and teardown of every test, in the process that prints the summary (the xdist controller too).
    directory = directory_of(report.nodeid)
    SECONDS_BY_DIRECTORY[directory] += report.duration
    TESTS_BY_DIRECTORY[directory].add(report.nodeid)


def pytest_terminal_summary(terminalreporter, config):
    """The suite's time per directory (summed over tests; with several workers the sum exceeds the wall time)."""
    if is_xdist_worker(config) or not SECONDS_BY_DIRECTORY:
        return
    terminalreporter.section("time per directory")
    for directory, seconds in sorted(SECONDS_BY_DIRECTORY.items(), key=lambda item: -item[1]):
        terminalreporter.write_line(f"{directory:<24} {len(TESTS_BY_DIRECTORY[directory]):>5} tests "
                                    f"{seconds / 60:7.1f} min")
    terminalreporter.write_line(f"{'wall time':<24} {'':>11} {(time.monotonic() - STARTED) / 60:7.1f} min")

