"""Optimizers and schedules: every optimizer and schedule takes the same 20 steps in JAX and PyTorch from
the same initial weights. Run by tests/backends/optimizer_probe.py in each framework's environment, through
each backend's own build_optimizer (jax_backend.optim, torch_backend.optim).

The 20 training steps run in float64 in both frameworks; the update formulas alone in float32.
Why float64: the MLP's hidden units are ReLUs, and the two frameworks sum a layer's 784 or 512 products in
different orders. In float32 a pre-activation within ~1e-6 of zero can take different signs in the two sums,
which passes one unit's gradient in one framework and stops it in the other. On an AMD EPYC the sgd case met
one at its second step (|pre-activation| 5.6e-8): its losses jumped from 1e-7 to 2.7e-6 apart at the third step
and drifted to 3e-5, while the cases whose rate decays or whose steps differ happened to meet none (momentum's
closest was 4.9e-7, on the right side). Which case meets one depends on the CPU's kernels, not on the
optimizer. In float64 the gap is ~1e-15 and a unit inside it improbable.

Tolerances, from the arithmetic:
- the update formulas alone (the same given float32 gradients, no training feedback): each step rounds once per
  operation (u = 6e-8) on values of size up to 6, about 10 operations a step for Adam, 20 steps: independent
  roundings add up to about sqrt(20 * 10) * 6e-8 * 6 ~ 5e-6 (2e-6 seen); FIXED_ATOL 2e-5 is 4x that, while eps
  inside the root, coupled instead of decoupled weight decay or a schedule one step late move them by 1e-4 or
  more;
- the losses and weights after 20 float64 steps: a step's forward and backward sum at most K = 784 products,
  off by at most K * u = 784 * 1.1e-16 ~ 1e-13 relative, and 20 steps of feedback at these rates grow it by
  at most ~10x each (seen: 1e-15 for losses, 1e-12 for Adam's weights, whose division by the root of the
  squared gradients magnifies the rounding of near-zero gradients): STEPS_RTOL 1e-8 leaves room on both CPUs
  and is still 1e4 below the smallest defect above.
"""


import numpy as np
import pytest
from helpers import probe_arrays
from optimizer_probe import CASES, STEPS

FRAMEWORKS = ("jax", "torch")  # jax first: it writes the shared weights file, torch reads it
OPTIMIZERS = ("sgd", "momentum", "adam", "adamw")
FIXED_ATOL = 2e-5
STEPS_RTOL = 1e-8  # losses, and weights relative to each tensor's largest entry (float64: see the docstring)


@pytest.fixture(scope="module")
def optimizer_probes(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("optimizers")
    return {framework: probe_arrays(framework, "optimizer_probe.py", tmp / f"{framework}.npz", framework,
                                    str(tmp / "init.npz"), str(tmp / f"{framework}.npz")) for framework in FRAMEWORKS}


def test_every_optimizer_and_schedule_is_probed():
    assert {case["optimizer"] for case in CASES.values()} == set(OPTIMIZERS)
    assert {case.get("lr_schedule", "constant") for case in CASES.values()} == {"constant", "warmup_cosine"}


@pytest.mark.parametrize("case", CASES)
def test_the_update_formulas_agree(optimizer_probes, case):
    jax_fixed, torch_fixed = optimizer_probes["jax"][f"{case}/fixed"], optimizer_probes["torch"][f"{case}/fixed"]
    np.testing.assert_allclose(jax_fixed, torch_fixed, rtol=0, atol=FIXED_ATOL)


@pytest.mark.parametrize("case", CASES)
def test_the_losses_of_20_steps_agree(optimizer_probes, case):
    jax_losses, torch_losses = optimizer_probes["jax"][f"{case}/losses"], optimizer_probes["torch"][f"{case}/losses"]
    assert len(torch_losses) == STEPS == 20 and np.all(np.isfinite(torch_losses))
    assert jax_losses.dtype == torch_losses.dtype == np.float64
    np.testing.assert_allclose(jax_losses, torch_losses, rtol=STEPS_RTOL)


@pytest.mark.parametrize("case", CASES)
def test_the_steps_moved_the_weights_alike(optimizer_probes, case):
    """The weights after 20 steps, every optimizer (float64: Adam's magnified rounding stays far below 1e-8)."""
    names = [k for k in optimizer_probes["torch"] if k.startswith(f"{case}/") and k.count("weight")]
    assert names
    for name in names:
        torch_weights = optimizer_probes["torch"][name]
        np.testing.assert_allclose(optimizer_probes["jax"][name], torch_weights, rtol=0,
                                   atol=STEPS_RTOL * np.abs(torch_weights).max(), err_msg=name)
