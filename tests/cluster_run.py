"""One local Slurm cluster, and one JAX compilation cache, for a whole test run, however many pytest processes
share them (pytest-xdist workers, and the parallel and serial halves of `make test`).

A run is named by JAXTORCH_TEST_RUN: set by `make test` for both of its pytest calls, else by the first pytest
process (the xdist controller, before it starts its workers, which inherit it). The first process to find the
cluster down brings it up and records that this run started it; whoever owns the run takes it down at the end,
so that no daemon outlives a CI run while a developer's own running cluster is left alone. The run's compilation
cache goes with it:

    python tests/cluster_run.py end     # `make test`'s last step
"""

from __future__ import annotations

import fcntl
import os
import shutil
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


def _run_name() -> str:
    return os.environ.get(RUN_VARIABLE, f"pytest-{os.getpid()}")


def _marker() -> Path:
    return STATE_DIR / f"{_run_name()}.started"


def compilation_cache() -> Path:
    return STATE_DIR / f"{_run_name()}.jax-compilation-cache"


def compilation_cache_settings(cache: Path) -> dict[str, str]:
    """JAX's variables for a persistent compilation cache in `cache` that keeps every program (a minimum compile
    time would make what is cached depend on the machine's load)."""
    return {"JAX_COMPILATION_CACHE_DIR": str(cache), "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
            "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0"}


def share_compilations() -> None:
    """Point every JAX process of this run (backend tests' subprocesses and the cluster's tasks, which inherit
    the environment through sbatch) at one persistent compilation cache, unless the caller chose one. The suite
    compiles the same tiny programs in many processes: a cifar10 resnet18_gn DP-SGD cell took 35.0 s with a cold
    cache and 21.2 s with a warm one here. A program loaded from the cache still counts as a compilation
    (jax_backend/compiles.py); the test of compile time apart from the steps turns the cache off."""
    for name, value in compilation_cache_settings(compilation_cache()).items():
        os.environ.setdefault(name, value)


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


def end() -> str | None:
    """The run's last step: the cluster down if this run brought it up, and the run's compilation cache removed."""
    shutil.rmtree(compilation_cache(), ignore_errors=True)
    return take_down_if_started()


if __name__ == "__main__":
    if sys.argv[1:] != ["end"]:
        sys.exit("usage: python tests/cluster_run.py end")
    error = end()
    if error:
        sys.exit(error)
