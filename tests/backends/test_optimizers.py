"""Optimizers and schedules (#15): every optimizer and schedule takes the same 20 steps in JAX and PyTorch from
the same initial weights. Run by tests/backends/optimizer_probe.py in each framework's environment, through
each backend's own build_optimizer (jax_backend.optim, torch_backend.optim).

Tolerances, measured on this machine (float32 on the CPU; docs/measurement.md, "Optimizers and schedules"):
- the update formulas alone (the same given gradients, no training feedback): at most 2e-6 apart on values of
  size up to 6, for every case; atol 2e-5 leaves ten times that, while eps inside the root, coupled instead of
  decoupled weight decay or a schedule one step late move them by 1e-4 or more;
- the losses: sgd and momentum within 2.1e-7 relative (rtol 2e-6); adam and adamw within 1.9e-4 relative
  (rtol 2e-3): Adam divides by the root of the squared gradients, which turns the rounding of a near-zero
  gradient (a matmul's summation order) into a step of size lr, and the 20 steps carry it into the loss.
"""

import os
import subprocess

import numpy as np
import pytest
from helpers import REPO_ROOT, env_python
from optimizer_probe import CASES, STEPS

FRAMEWORKS = ("jax", "torch")  # jax first: it writes the shared weights file, torch reads it
LOSS_RTOL = {"sgd": 2e-6, "momentum": 2e-6, "adam": 2e-3, "adamw": 2e-3}
FIXED_ATOL = 2e-5


@pytest.fixture(scope="module")
def probes(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("optimizers")
    out = {}
    for framework in FRAMEWORKS:
        path = tmp / f"{framework}.npz"
        subprocess.run([str(env_python(framework)), str(REPO_ROOT / "tests" / "backends" / "optimizer_probe.py"),
                        framework, str(tmp / "init.npz"), str(path)],
                       check=True, cwd=REPO_ROOT, env={**os.environ, "PYTHONPATH": str(REPO_ROOT)}, timeout=600)
        with np.load(path) as f:
            out[framework] = {k: f[k] for k in f.files}
    return out


def test_every_optimizer_and_schedule_is_probed():
    assert {case["optimizer"] for case in CASES.values()} == set(LOSS_RTOL)
    assert {case.get("lr_schedule", "constant") for case in CASES.values()} == {"constant", "warmup_cosine"}


@pytest.mark.parametrize("case", CASES)
def test_the_update_formulas_agree(probes, case):
    jax_fixed, torch_fixed = probes["jax"][f"{case}/fixed"], probes["torch"][f"{case}/fixed"]
    np.testing.assert_allclose(jax_fixed, torch_fixed, rtol=0, atol=FIXED_ATOL)


@pytest.mark.parametrize("case", CASES)
def test_the_losses_of_20_steps_agree(probes, case):
    jax_losses, torch_losses = probes["jax"][f"{case}/losses"], probes["torch"][f"{case}/losses"]
    assert len(torch_losses) == STEPS == 20 and np.all(np.isfinite(torch_losses))
    np.testing.assert_allclose(jax_losses, torch_losses, rtol=LOSS_RTOL[CASES[case]["optimizer"]])


@pytest.mark.parametrize("case", [case for case, values in CASES.items() if values["optimizer"] in ("sgd", "momentum")])
def test_the_steps_moved_the_weights_alike(probes, case):
    """The weights after 20 steps, where the update does not normalise rounding (Adam's: see the docstring)."""
    names = [k for k in probes["torch"] if k.startswith(f"{case}/") and k.count("weight")]
    assert names
    for name in names:
        np.testing.assert_allclose(probes["jax"][name], probes["torch"][name], rtol=1e-4, atol=1e-6, err_msg=name)
