"""Fixtures for integration tests that run on a real Slurm cluster on this machine.

`slurm_cluster` brings up the two-node cluster of `scripts/local_slurm.sh` (nodes n1 and n2, partition
`debug`, real accounting) once per test session. Tests that use it are marked `slurm`, so
`pytest -m "not slurm"` leaves them out.

- Where the cluster cannot run (not root, no apt-get), the script exits 3 and the tests are skipped with
  the script's own sentence as the reason.
- A cluster that was already up before the session (a developer's) is used and left running; one that this
  test run brought up is taken down at its end (tests/cluster_run.py), so that no daemon outlives a CI run.
"""

from __future__ import annotations

import os
import shlex
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import cluster_run
import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
LOCAL_SLURM = REPO_ROOT / "scripts" / "local_slurm.sh"

# Exit code of local_slurm.sh meaning "this machine cannot run the cluster": skip, do not fail.
EXIT_CANNOT_RUN_HERE = 3
# A cold `up` installs Debian packages (about 20 s here, longer on a slow mirror) and starts six daemons.
UP_TIMEOUT_S = 900
DOWN_TIMEOUT_S = 180
STATUS_TIMEOUT_S = 60


@dataclass(frozen=True)
class SlurmCluster:
    """A running local cluster: where its config is, and an environment that points at it."""

    slurm_conf: Path
    env: dict[str, str] = field(repr=False)
    started_by_fixture: bool

    def __getitem__(self, key: str) -> Any:
        # Also readable as a mapping (cluster["env"]), for tests that prefer dict access.
        return getattr(self, key)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "slurm: needs the real local Slurm cluster (scripts/local_slurm.sh); skipped where it cannot run"
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # Mark every test that uses the cluster, so `-m "not slurm"` works without each test repeating the marker.
    for item in items:
        if "slurm_cluster" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.slurm)


def _run_script(action: str, timeout: float) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(
            ["bash", str(LOCAL_SLURM), action],
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(
            f"scripts/local_slurm.sh {action} did not finish within {timeout:.0f} s; "
            f"see the logs under ${{LOCAL_SLURM_DIR:-/var/tmp/jaxtorch-slurm}}/log.\nstderr so far:\n{exc.stderr}",
            pytrace=False,
        )


def _parse_slurm_conf(stdout: str) -> Path:
    """Read the path from the one line `export SLURM_CONF=...` that `up` prints on stdout."""
    for line in stdout.splitlines():
        words = shlex.split(line)
        if len(words) == 2 and words[0] == "export" and words[1].startswith("SLURM_CONF="):
            return Path(words[1].removeprefix("SLURM_CONF="))
    raise ValueError(f"no 'export SLURM_CONF=...' line in the output of local_slurm.sh up: {stdout!r}")


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else "(no message)"


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[SlurmCluster]:
    """Bring up (or reuse) the local two-node Slurm cluster and point SLURM_CONF at it for the session.

    Under pytest-xdist every worker asks for it: `status` and `up` run under one lock, the first worker's `up`
    starts the daemons and records that this test run started them, and the run's last step (cluster_run.py's
    `take_down_if_started`, called by the controller) takes them down after every worker has finished."""
    with cluster_run.exclusive():
        was_up = _run_script("status", STATUS_TIMEOUT_S).returncode == 0
        up = _run_script("up", UP_TIMEOUT_S)
        if up.returncode == EXIT_CANNOT_RUN_HERE:
            pytest.skip(f"local Slurm cluster cannot run here: {_last_line(up.stderr)}")
        if up.returncode != 0:
            pytest.fail(
                f"scripts/local_slurm.sh up failed with exit code {up.returncode}:\n{up.stderr}",
                pytrace=False,
            )
        if not was_up:
            cluster_run.record_started()
    slurm_conf = _parse_slurm_conf(up.stdout)
    old_slurm_conf = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = str(slurm_conf)
    try:
        yield SlurmCluster(slurm_conf=slurm_conf, env=dict(os.environ), started_by_fixture=cluster_run.started())
    finally:
        if old_slurm_conf is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = old_slurm_conf
