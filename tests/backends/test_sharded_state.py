"""`--parallelism fsdp`: JAX's train step of the language model with its parameters and optimizer state
sharded over a mesh of two devices takes the steps of the replicated state, holds half the state per device, and
evaluates alike; both frameworks' steps communicate as FSDP does, each parameter all-gathered once and each
gradient reduce-scattered once. tests/backends/sharded_state_probe.py runs JAX's two layouts in one
process with two CPU devices (the compiled path of two processes on two nodes), fsdp_collectives_probe.py
PyTorch's step on rank 0 of a fake world of two; the two-node runs of both frameworks are in
tests/integration/test_language_model_on_slurm.py."""

import json
from collections import Counter

import pytest
from helpers import REPO_ROOT, run_in_env

# float32: the two layouts partition the step's matmuls differently, so each gradient (a sum over 8 x 32 = 256
# token positions, and over widths up to 128) is summed in another order: at most K * 6e-8 = 1.5e-5 of its terms'
# magnitude for K = 256, relative to the largest entry of a tensor after three momentum steps that move it by
# about a tenth. 1e-4 is 6x that bound; a parameter left unsharded but updated by one device's half of the batch,
# or a shard updated twice, moves by the update itself (~1e-2 of the largest entry). Measured: 3.2e-7 (Intel Xeon).
PARAMETER_RTOL = 1e-4
DEVICES = 2  # the probe's mesh


@pytest.fixture(scope="module")
def found():
    proc = run_in_env("jax", str(REPO_ROOT / "tests" / "backends" / "sharded_state_probe.py"), "3")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.splitlines()[-1])


def test_sharded_state_takes_the_replicated_steps_with_half_the_state_per_device(found):
    assert found["sharded_losses"] == pytest.approx(found["replicated_losses"], rel=1e-5)
    assert found["parameter_difference"] < PARAMETER_RTOL, found
    assert found["sharded_split"] and not found["replicated_split"]
    # Every array of the tiny GPT (and its momentum) has an axis two devices divide: exactly half per device.
    assert found["sharded_bytes"] * 2 == found["replicated_bytes"], found
    assert found["same_predictions"]


def test_the_sharded_step_gathers_the_weights_and_reduce_scatters_the_gradients_as_fsdp_does(found):
    """FSDP's data flow, read from the collectives of the compiled sharded step: every parameter all-gathered whole
    along the axis it is split on, once; every gradient reduce-scattered to that parameter's shard, once; nothing
    else gathered (no activation) and nothing all-reduced but a scalar (the loss's mean over the devices), so no
    gradient is all-reduced whole and no layer's computation is split across the devices."""
    step = found["sharded_step"]
    parameters = Counter((tuple(shape), axis) for shape, axis in step["sharded_parameters"])
    by_kind = {}
    for collective in step["collectives"]:
        by_kind.setdefault(collective["kind"], []).extend(
            (tuple(shape), collective["dimension"]) for shape in collective["shapes"])
    assert set(by_kind) <= {"all-gather", "reduce-scatter", "all-reduce"}, by_kind.keys()
    # An all-gather's result is the whole array; a reduce-scatter's is one device's shard of it.
    assert Counter(by_kind.get("all-gather", [])) == parameters, by_kind.get("all-gather")
    whole = [(tuple(size * DEVICES if d == dim else size for d, size in enumerate(shape)), dim)
             for shape, dim in by_kind.get("reduce-scatter", [])]
    assert Counter(whole) == parameters, by_kind.get("reduce-scatter")
    assert all(shape == () for shape, _ in by_kind.get("all-reduce", [])), by_kind.get("all-reduce")


def test_pytorch_gathers_each_fsdp_unit_once_a_step_and_reduce_scatters_its_gradients():
    """The same data flow in PyTorch's FSDP2 step: one all-gather of each unit's parameters (each block, the root),
    none again for the backward pass, one reduce-scatter of each unit's gradients, no other collective. The sizes
    are exact: FSDP2 pads a parameter to a multiple of the world's size along its first axis, and every first axis
    of the tiny GPT is even."""
    proc = run_in_env("torch", str(REPO_ROOT / "tests" / "backends" / "fsdp_collectives_probe.py"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    step = json.loads(proc.stdout.splitlines()[-1])
    by_name = {}
    for name, elements in step["collectives"]:
        by_name.setdefault(name, []).append(elements)
    assert set(by_name) == {"_allgather_base_", "_reduce_scatter_base_"}, step["collectives"]
    assert sorted(by_name["_allgather_base_"]) == sorted(step["units"]), step
    assert sorted(by_name["_reduce_scatter_base_"]) == sorted(step["units"]), step
