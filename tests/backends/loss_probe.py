"""Run inside one framework's environment: the training loss of a fixed batch of float32 logits and labels, as the
backend computes it, once without label smoothing and once with LABEL_SMOOTHING.

    python tests/backends/loss_probe.py {jax|torch} OUT.npz

The logits and labels come from one seeded numpy generator, the same in both environments: a classifier's batch
(N, K) and a language model's (N, L, K), whose loss is the mean over every position. OUT.npz holds, per shape and
smoothing, `<shape>/<eps>/mean`: the batch's loss (jax_backend.steps.cross_entropy, averaged; PyTorch's
torch_backend.run.mean_cross_entropy), and `<shape>/<eps>/each`: the loss of each example taken alone, a batch of
one, as DP-SGD's per-example loss is.
"""

from __future__ import annotations

import sys

import numpy as np

LABEL_SMOOTHING = 0.1
CLASSES = 10
SHAPES = {"classifier": (8,), "sequence": (2, 4)}  # the labels' shape; the logits have CLASSES more


def batch(shape: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(len(shape))
    logits = rng.normal(scale=3.0, size=(*shape, CLASSES)).astype(np.float32)
    return logits, rng.integers(0, CLASSES, size=shape)


def jax_loss():
    import jax.numpy as jnp

    from jax_backend import steps

    return lambda logits, y, eps: float(steps.cross_entropy(jnp.asarray(logits), jnp.asarray(y), eps).mean())


def torch_loss():
    import torch

    from torch_backend.run import mean_cross_entropy

    return lambda logits, y, eps: float(mean_cross_entropy(torch.from_numpy(logits), torch.from_numpy(y), eps))


def main(framework: str, out: str) -> None:
    loss = {"jax": jax_loss, "torch": torch_loss}[framework]()
    found = {}
    for name, shape in SHAPES.items():
        logits, y = batch(shape)
        found[f"{name}/logits"], found[f"{name}/labels"] = logits, y
        for eps in (0.0, LABEL_SMOOTHING):
            found[f"{name}/{eps}/mean"] = np.float64(loss(logits, y, eps))
            found[f"{name}/{eps}/each"] = np.array([loss(logits[i : i + 1], y[i : i + 1], eps)
                                                    for i in range(shape[0])])
    np.savez(out, **found)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
