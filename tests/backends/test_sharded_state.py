"""JAX's `--parallelism fsdp` (issue 33): the language model's train step with its parameters and optimizer state
sharded over a mesh of two devices takes the steps of the replicated state, holds half the state per device, and
evaluates alike. tests/backends/sharded_state_probe.py runs both in one process with two CPU devices (the compiled
path of two processes on two nodes); the two-node runs of both frameworks are in
tests/integration/test_language_model_on_slurm.py."""

import json

import pytest
from helpers import REPO_ROOT, run_in_env

# float32: the two layouts partition the step's matmuls differently, so each gradient (a sum over 8 x 32 = 256
# token positions, and over widths up to 128) is summed in another order: at most K * 6e-8 = 1.5e-5 of its terms'
# magnitude for K = 256, relative to the largest entry of a tensor after three momentum steps that move it by
# about a tenth. 1e-4 is 6x that bound; a parameter left unsharded but updated by one device's half of the batch,
# or a shard updated twice, moves by the update itself (~1e-2 of the largest entry). Measured: 3.2e-7 (Intel Xeon).
PARAMETER_RTOL = 1e-4


def test_sharded_state_takes_the_replicated_steps_with_half_the_state_per_device():
    proc = run_in_env("jax", str(REPO_ROOT / "tests" / "backends" / "sharded_state_probe.py"), "3")
    assert proc.returncode == 0, proc.stderr[-3000:]
    found = json.loads(proc.stdout.splitlines()[-1])
    assert found["sharded_losses"] == pytest.approx(found["replicated_losses"], rel=1e-5)
    assert found["parameter_difference"] < PARAMETER_RTOL, found
    assert found["sharded_split"] and not found["replicated_split"]
    # Every array of the tiny GPT (and its momentum) has an axis two devices divide: exactly half per device.
    assert found["sharded_bytes"] * 2 == found["replicated_bytes"], found
    assert found["same_predictions"]
