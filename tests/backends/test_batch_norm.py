"""Batch norm in training mode: JAX (jax_backend.vision.BatchNorm) and PyTorch (train()) take the same steps,
update the running statistics alike (PyTorch's momentum and unbiased running variance), and evaluation uses
the running statistics in both. Run by tests/backends/batch_norm_probe.py in each framework's environment."""


import numpy as np
import pytest
from helpers import probe_arrays

FRAMEWORKS = ("jax", "torch")  # jax first: it writes the shared weights file, torch checks it


@pytest.fixture(scope="module")
def batch_norm_probes(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("bn")
    out = {framework: probe_arrays(framework, "batch_norm_probe.py", tmp / f"{framework}.npz", framework,
                                   str(tmp / "init.npz"), str(tmp / f"{framework}.npz")) for framework in FRAMEWORKS}
    with np.load(tmp / "init.npz") as f:
        out["initial"] = {f"state/{k}": f[k] for k in f.files}
    return out


def state(probe, suffix):
    return {k.split("/", 1)[1]: v for k, v in probe.items() if k.startswith("state/") and k.endswith(suffix)}


def test_training_steps_agree(batch_norm_probes):
    np.testing.assert_allclose(batch_norm_probes["jax"]["losses"], batch_norm_probes["torch"]["losses"], rtol=1e-5)
    assert batch_norm_probes["jax"]["state/fc.weight"].shape == batch_norm_probes["torch"]["state/fc.weight"].shape
    for name, value in batch_norm_probes["torch"].items():
        if name.startswith("state/") and not name.endswith(("running_mean", "running_var")):
            np.testing.assert_allclose(batch_norm_probes["jax"][name], value, rtol=1e-4, atol=1e-6, err_msg=name)


@pytest.mark.parametrize("stat", ["running_mean", "running_var"])
def test_running_statistics_agree(batch_norm_probes, stat):
    """The change of each statistic over the steps, compared. With Flax's biased running-variance update
    instead of PyTorch's unbiased one, the last stage's changes differ by up to 1% (measured; the probe's
    batch leaves 32 values per channel there), ten times rtol."""
    jax_stats, torch_stats = state(batch_norm_probes["jax"], stat), state(batch_norm_probes["torch"], stat)
    initial = state(batch_norm_probes["initial"], stat)
    assert jax_stats.keys() == torch_stats.keys() == initial.keys() and len(torch_stats) > 10
    for name, value in torch_stats.items():
        assert not np.allclose(value, initial[name]), f"{name}: the steps did not update it"
        np.testing.assert_allclose(jax_stats[name] - initial[name], value - initial[name], rtol=1e-3, atol=1e-7,
                                   err_msg=name)


def test_evaluation_uses_the_running_statistics_in_both(batch_norm_probes):
    jax_logits, torch_logits = batch_norm_probes["jax"]["logits"], batch_norm_probes["torch"]["logits"]
    scale = np.abs(torch_logits).max()
    assert np.abs(jax_logits - torch_logits).max() / scale < 1e-4
