"""Run inside one framework's environment: fp16 training steps of the MLP under a loss scale that starts far
too high and grows every few steps, so that steps overflow, are skipped and the scale backs off and grows again.

    python tests/backends/loss_scaling_probe.py {jax|torch} WEIGHTS.npz OUT.npz

Both frameworks train the same initial weights (the first to run writes them) on the same batches with their
own mixed-precision code (jax_backend.mixed, torch_backend.mixed) and write the losses and the loss scale after
every step.
"""

from __future__ import annotations

import sys

import numpy as np

from bench_contract.models.weights import load_or_create
from bench_contract.run.precision import LossScaling

MODEL, SHAPE, CLASSES = "mlp", (1, 8, 8), 10
BATCH, STEPS, LEARNING_RATE = 8, 40, 0.05
# 2**40 overflows float16 gradients (largest finite 65504) until it has backed off far enough; growing after
# every 3 finite steps makes it overflow again, so both backoff and growth happen several times.
SCALING = LossScaling(initial_scale=2.0**40, growth_interval=3)


def batches():
    rng = np.random.default_rng(0)
    return (rng.standard_normal((STEPS, BATCH, *SHAPE)).astype(np.float32),
            rng.integers(0, CLASSES, (STEPS, BATCH)).astype(np.int64))


def jax_probe(weights_path, x, y):
    import jax
    import optax

    from jax_backend import mixed, models

    jax.config.update("jax_default_matmul_precision", "highest")
    weights, _ = load_or_create(weights_path, models.param_specs(MODEL, SHAPE, CLASSES), seed=0)
    module, variables = models.build_with_variables(MODEL, weights, SHAPE, CLASSES)
    optimizer = mixed.dynamic_loss_scaling(optax.sgd(LEARNING_RATE), SCALING)
    step = jax.jit(mixed.scaled_plain_step(mixed.with_precision(module, "fp16", on_gpu=False), optimizer))
    params, stats, state, k = variables["params"], {}, optimizer.init(variables["params"]), 0
    losses, scales = [], []
    for i in range(STEPS):
        params, stats, state, k, loss = step(params, stats, state, k, x[i], y[i].astype(np.int32))
        losses.append(float(loss))
        scales.append(mixed.loss_scale(state))
    return losses, scales


def torch_probe(weights_path, x, y):
    import torch

    from torch_backend import models
    from torch_backend.mixed import LossScaler, with_precision
    from torch_backend.run import TorchOps

    torch.set_float32_matmul_precision("highest")
    model = models.build(MODEL, SHAPE, CLASSES)
    weights, _ = load_or_create(weights_path, models.param_specs(model), seed=0)
    models.load_shared_weights(model, weights)
    device = torch.device("cpu")
    ops = TorchOps(with_precision(model, "fp16"), torch.optim.SGD(model.parameters(), lr=LEARNING_RATE), device,
                   scaler=LossScaler("fp16", device, SCALING))
    losses, scales = [], []
    for i in range(STEPS):
        losses.append(float(ops.train_step((torch.from_numpy(x[i]), torch.from_numpy(y[i])))))
        scales.append(ops.loss_scale())
    return losses, scales


if __name__ == "__main__":
    framework, weights_path, out = sys.argv[1:]
    probe = jax_probe if framework == "jax" else torch_probe
    losses, scales = probe(weights_path, *batches())
    np.savez(out, losses=np.array(losses), scales=np.array(scales))
