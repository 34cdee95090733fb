"""Label smoothing (--label-smoothing eps): JAX and PyTorch compute the same loss, the cross-entropy against the
one-hot target smoothed towards the uniform distribution, (1 - eps) one-hot + eps / K. Run by
tests/backends/loss_probe.py in each framework's environment through each backend's own loss, on the same float32
logits and labels, and compared with each other and with the formula in float64.

Tolerance, from float32 arithmetic (unit roundoff u = 2^-24 = 6e-8): a log-softmax term is z_k - logsumexp(z).
The log of a sum of K exponentials is off by at most about K * u (each term's rounding, relative, then the log
turns relative into absolute), and the subtraction by u * |z_k|; the smoothed loss is a weighted mean of such terms
(weights summing to 1), and the batch's a mean of those, so each loss is off by at most (K + max|z|) * u, about
1.3e-6 here (K 10, |z| up to 12). Two frameworks may err in opposite directions: ATOL is twice that, doubled again
for the libraries' own orders of summation (4 * (K + max|z|) * u, 5e-6). Smoothing by 0.1 moves each loss by 0.1
times the gap between the mean of -log p over the classes and -log p of the label, here 0.2 or more: far above it.
"""

import numpy as np
import pytest
from helpers import probe_arrays
from loss_probe import CLASSES, LABEL_SMOOTHING, SHAPES

FRAMEWORKS = ("jax", "torch")
U = 2.0**-24  # float32's unit roundoff


@pytest.fixture(scope="module")
def loss_probes(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("loss")
    return {framework: probe_arrays(framework, "loss_probe.py", tmp / f"{framework}.npz", framework,
                                    str(tmp / f"{framework}.npz")) for framework in FRAMEWORKS}


def reference(logits: np.ndarray, labels: np.ndarray, eps: float) -> np.ndarray:
    """Each label's loss in float64: -sum_k ((1 - eps) [k = y] + eps / K) log p_k."""
    z = logits.astype(np.float64)
    shifted = z - z.max(axis=-1, keepdims=True)
    log_p = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
    own = np.take_along_axis(log_p, labels[..., None], axis=-1)[..., 0]
    return -(1 - eps) * own - eps * log_p.mean(axis=-1)


def atol(logits: np.ndarray) -> float:
    return 4 * (CLASSES + np.abs(logits).max()) * U


@pytest.mark.parametrize("shape", SHAPES)
def test_both_frameworks_compute_the_same_smoothed_loss(loss_probes, shape):
    jax, torch = loss_probes["jax"], loss_probes["torch"]
    logits, labels = torch[f"{shape}/logits"], torch[f"{shape}/labels"]
    assert np.array_equal(jax[f"{shape}/logits"], logits) and np.array_equal(jax[f"{shape}/labels"], labels)
    tolerance = atol(logits)
    assert tolerance < 1e-5
    for eps in (0.0, LABEL_SMOOTHING):
        each = reference(logits, labels, eps)
        expected = {"mean": each.mean(), "each": each.reshape(len(each), -1).mean(axis=1)}
        for kind, value in expected.items():
            np.testing.assert_allclose(jax[f"{shape}/{eps}/{kind}"], torch[f"{shape}/{eps}/{kind}"], rtol=0,
                                       atol=tolerance, err_msg=f"{kind}, eps {eps}")
            for framework in FRAMEWORKS:
                np.testing.assert_allclose(loss_probes[framework][f"{shape}/{eps}/{kind}"], value, rtol=0,
                                           atol=tolerance, err_msg=f"{framework} {kind}, eps {eps}")


@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize("shape", SHAPES)
def test_smoothing_changes_the_loss(loss_probes, framework, shape):
    found, tolerance = loss_probes[framework], atol(loss_probes[framework][f"{shape}/logits"])
    plain, smoothed = found[f"{shape}/0.0/each"], found[f"{shape}/{LABEL_SMOOTHING}/each"]
    assert np.all(np.abs(smoothed - plain) > 1000 * tolerance)
