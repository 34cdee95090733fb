"""`make bench` keeps working: every suite of `python -m bench` at its smallest (`--quick`: one repeat, small sizes,
the soak for a few seconds) on the local cluster, with the framework environments `make setup` built. Each suite
runs to its end, no row is failed or "not measured", and the soak's count holds (each cell ran once, merged once).
The suite that reads the last `make test`'s time is left out: this is that run."""

import re
import subprocess
import sys

import pytest

from helpers import REPO_ROOT

from bench.__main__ import SUITES

QUICK_SUITES = [name for name in SUITES if name != "suite"]


# Alone, after the rest: beside the other integration tests' jobs on the local cluster (test_load puts 160 tasks on
# the soak's load partition), 12 of the quick soak's cells never started within its settle rounds in a fresh
# clone's `make test` at 8a484f4; alone on the cluster, four quick soaks in a row beside two busy loops all met.
@pytest.mark.serial
def test_every_suite_runs_at_its_smallest(slurm_cluster):
    proc = subprocess.run([sys.executable, "-m", "bench", "--quick", "--repeats", "1", "--only",
                           ",".join(QUICK_SUITES)], capture_output=True, text=True, cwd=REPO_ROOT,
                          env=slurm_cluster.env, stdin=subprocess.DEVNULL, timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-4000:]
    assert "not measured" not in proc.stdout and "crashed" not in proc.stdout, proc.stdout
    for name in QUICK_SUITES:
        assert f"running {name} ..." in proc.stderr
    rows = {line.split("  ")[0]: line for line in proc.stdout.splitlines()}
    assert any(step.startswith("collect 200 task files from scratch") for step in rows)
    assert any(step.startswith("submit 10 cells: one array per framework") for step in rows)
    soak = next(line for step, line in rows.items() if step.startswith("soak: "))
    # The soak prints why cells were left without a result (settle's commands, the queue) to stderr.
    assert "0 ran twice, 0 never; 0 of" in soak and " met " in soak, soak + "\n" + proc.stderr[-6000:]
    cells, campaigns = map(int, re.search(r"(\d+) cells in (\d+) campaigns", soak).groups())
    assert cells >= 1 and campaigns >= 1, soak  # the soak launched something in its few seconds
    # inference: MLP and CNN at batch 1 and 128 in both frameworks; training: JAX, PyTorch eager and compiled
    assert sum("harness / bare - 1, median of" in step for step in rows) == 8 + 3
    assert sum("ours / hand-written speed-up - 1" in step for step in rows) == 2
