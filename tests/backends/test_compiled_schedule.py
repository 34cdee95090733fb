"""A learning-rate schedule under torch.compile: the rate changes every step without recompiling the
step, and the compiled steps follow the eager ones. Run by tests/backends/compiled_schedule_probe.py."""

import json

import numpy as np
import pytest
from helpers import REPO_ROOT, run_in_env

from bench_contract.spec import OPTIMIZERS


@pytest.fixture(scope="module")
def schedule_probe():
    proc = run_in_env("torch", str(REPO_ROOT / "tests" / "backends" / "compiled_schedule_probe.py"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("optimizer", OPTIMIZERS)
def test_a_changing_rate_compiles_no_new_graph_after_the_first_steps(schedule_probe, optimizer):
    """A Python float lr is a new constant each step: one or two more graphs per step while the rate changes
    (16 graphs after 8 steps for sgd, 11 for adam, measured); the tensor rate's are all there after step 2."""
    graphs = schedule_probe[optimizer]["graphs"]
    assert graphs[1] > 0 and graphs[-1] == graphs[1], graphs


@pytest.mark.parametrize("optimizer", OPTIMIZERS)
def test_compiled_steps_follow_the_eager_ones(schedule_probe, optimizer):
    # Measured: within 6e-7 of each other (float32 rounding of the fused kernels).
    np.testing.assert_allclose(schedule_probe[optimizer]["compiled"], schedule_probe[optimizer]["eager"], rtol=1e-5)
