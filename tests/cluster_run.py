"""One local Slurm cluster for a whole test run, however many pytest processes share it (pytest-xdist workers,
and the parallel and serial halves of `make test`).

A run is named by JAXTORCH_TEST_RUN: set by `make test` for both of its pytest calls, else by the first pytest
process (the xdist controller, before it starts its workers, which inherit it). The first process to find the
cluster down brings it up and records that this run started it; whoever owns the run takes it down at the end,
so that no daemon outlives a CI run while a developer's own running cluster is left alone:

    python tests/cluster_run.py down-if-started     # `make test`'s last step
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

RUN_VARIABLE = "JAXTORCH_TEST_RUN"
STATE_DIR = Path(os.environ.get("TMPDIR", "/tmp")) / "jaxtorch-test-runs"
LOCAL_SLURM = Path(__file__).resolve().parents[1] / "scripts" / "local_slurm.sh"
DOWN_TIMEOUT_S = 180


def name_this_run() -> bool:
    """Give this process's run a name unless it has one; True when this process named it (and so owns it)."""
    if os.environ.get(RUN_VARIABLE):
        return False
    os.environ[RUN_VARIABLE] = f"pytest-{os.getpid()}"
    return True


def _marker() -> Path:
    return STATE_DIR / f"{os.environ.get(RUN_VARIABLE, f'pytest-{os.getpid()}')}.started"


@contextmanager
def exclusive() -> Iterator[None]:
    """One process at a time between asking whether the cluster is up and bringing it up."""
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    with open(STATE_DIR / "cluster.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def record_started() -> None:
    _marker().write_text("")


def started() -> bool:
    return _marker().exists()


def take_down_if_started() -> str | None:
    """Take the cluster down if this run brought it up; the error, if `down` failed."""
    if not started():
        return None
    down = subprocess.run(["bash", str(LOCAL_SLURM), "down"], capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=DOWN_TIMEOUT_S, check=False)
    _marker().unlink()
    if down.returncode != 0:
        return f"scripts/local_slurm.sh down failed with exit code {down.returncode}; daemons may still run:\n{down.stderr}"
    return None


if __name__ == "__main__":
    if sys.argv[1:] != ["down-if-started"]:
        sys.exit("usage: python tests/cluster_run.py down-if-started")
    error = take_down_if_started()
    if error:
        sys.exit(error)
