"""Run inside one framework's environment: a few training steps of a batch-norm network, then evaluation.

    python tests/backends/batch_norm_probe.py {jax|torch} WEIGHTS.npz OUT.npz

The first framework to run writes the shared initial weights file (the contract's, seed 0) and the second
checks it against its own parameter list, as the backends do. Both then take STEPS SGD steps in training
mode on the same tiny batches of synthetic CIFAR-10 and write, in PyTorch's names: the losses, the
parameters, batch norm's running statistics, and the logits of evaluation mode on other inputs.
"""

from __future__ import annotations

import sys

import numpy as np

from bench_contract.data.loading import synthetic_dataset
from bench_contract.models.weights import load_or_create

MODEL, VARIANT = "resnet18", "tiny"
# A batch of 2 leaves 2 x 4 x 4 = 32 values per channel in the last stage: there PyTorch's unbiased running
# variance is 32/31 of a biased one, a difference of 0.1 x 1/31 = 3e-3 of the running variance per step.
BATCH, STEPS, LEARNING_RATE = 2, 3, 0.1


def jax_probe(weights_path, x, y, x_eval):
    import jax
    import optax
    from flax import traverse_util

    from jax_backend import layout, models, steps

    jax.config.update("jax_default_matmul_precision", "highest")
    shape = x.shape[2:]
    weights, _ = load_or_create(weights_path, models.param_specs(MODEL, x.shape[2:], 10, VARIANT), seed=0)
    module, variables = models.build_with_variables(MODEL, weights, shape, 10, VARIANT)
    optimizer = optax.sgd(LEARNING_RATE)
    step = jax.jit(steps.plain_step(module, optimizer))
    params, stats, opt_state, k = variables["params"], variables["batch_stats"], optimizer.init(variables["params"]), 0
    losses = []
    for i in range(STEPS):
        params, stats, opt_state, k, loss = step(params, stats, opt_state, k, models.to_model_layout(MODEL, x[i]), y[i])
        losses.append(float(loss))
    logits = steps.eval_forward(module, params, stats, models.to_model_layout(MODEL, x_eval))
    flat = traverse_util.flatten_dict({"params": params, "batch_stats": stats})
    state = {layout.torch_name(key): layout.to_torch_layout(key[-1], np.asarray(v)) for key, v in flat.items()}
    return losses, state, np.asarray(logits)


def torch_probe(weights_path, x, y, x_eval):
    import torch
    import torch.nn.functional as F

    from torch_backend import models

    torch.set_float32_matmul_precision("highest")
    model = models.build(MODEL, x.shape[2:], 10, VARIANT)
    weights, _ = load_or_create(weights_path, models.param_specs(model), seed=0)
    models.load_shared_weights(model, weights)
    model.train()
    optimizer = torch.optim.SGD(model.parameters(), lr=LEARNING_RATE)
    losses = []
    for i in range(STEPS):
        optimizer.zero_grad()
        loss = F.cross_entropy(model(torch.from_numpy(x[i])), torch.from_numpy(y[i]).long())
        loss.backward()
        optimizer.step()
        losses.append(float(loss))
    model.eval()
    with torch.no_grad():
        logits = model(torch.from_numpy(x_eval)).numpy()
    state = {n: t.numpy().copy() for n, t in model.state_dict().items() if not n.endswith("num_batches_tracked")}
    return losses, state, logits


def main() -> None:
    framework, weights_path, out = sys.argv[1:4]
    data = synthetic_dataset("cifar10", 64)
    x = data.x_train[: BATCH * STEPS].reshape(STEPS, BATCH, *data.sample_shape)
    y = data.y_train[: BATCH * STEPS].reshape(STEPS, BATCH)
    probe = jax_probe if framework == "jax" else torch_probe
    losses, state, logits = probe(weights_path, x, y, data.x_val[:4])
    np.savez(out, losses=np.array(losses), logits=logits, **{f"state/{n}": v for n, v in state.items()})


if __name__ == "__main__":
    main()
