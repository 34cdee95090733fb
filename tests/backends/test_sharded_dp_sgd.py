"""JAX's DP-SGD step on a mesh of two devices takes the update of one device and of the per-example loop.

Use case 4 shards the batch over every device of every process. Left to XLA's partitioner, the vmapped per-example
gradients of convolutions came out wrong on two devices (the CNN's update off by 150% relative; the GroupNorm
ResNet's two-node run drifted from one process from its second step), while the MLP and the loss were right, so
the digits test on two nodes passed. tests/backends/sharded_dp_sgd_probe.py runs both placements in one process
with two CPU devices (the compiled path of two processes on two nodes) against each example's gradient alone.
"""

import json

import pytest
from helpers import REPO_ROOT, run_in_env

# Measured: 3.3e-6 (one device) and 6.6e-6 (two) on the CNN, float32 roundoff of an update of order 1e-2;
# the defect gave 0.36 to 1.5.
TOLERANCE = 1e-4


@pytest.mark.parametrize("model", ["cnn"])
def test_the_dp_sgd_step_on_two_devices_equals_one_device_and_the_per_example_loop(model):
    proc = run_in_env("jax", str(REPO_ROOT / "tests" / "backends" / "sharded_dp_sgd_probe.py"), model, "16")
    assert proc.returncode == 0, proc.stderr[-3000:]
    errors = json.loads(proc.stdout.splitlines()[-1])
    assert errors["one_device"] < TOLERANCE and errors["two_devices"] < TOLERANCE, errors
