"""Run inside one framework's environment: per-sample gradients of a model, by vmap and by a per-example
loop, saved in PyTorch names and layout (vmap/<name>, loop/<name>, each with a leading batch axis).

    python tests/backends/model_per_sample_probe.py {jax|torch} BENCHMARK MODEL OUT.npz BATCH

Synthetic data, tiny variant, the contract's initial weights (seed 0) and the first batch of epoch 0, so
the files the two frameworks write can be compared value by value.

Both frameworks compute in float64. A ReLU is not differentiable at 0, and the vmapped and the per-example
computation sum in different orders: in float32 an input within ~1e-6 of the kink can change sign between them,
which stops or passes one unit's gradient and moves every earlier parameter's gradient of that example by percents.
The tiny ResNets hold ~1e5 ReLU inputs per example, so in float32 such a unit is likely (seen on an AMD EPYC:
resnet50_gn's example 1 had one at -7e-8 one way and +5e-7 the other, 24% of conv1.weight off by up to 1.2%).
In float64 the gap is ~1e-15 and a unit inside it improbable (~1e5 x 1e-15), so what is compared is vmap's
arithmetic, not which side of a kink rounding fell on.
"""

from __future__ import annotations

import sys

import numpy as np
from per_sample_reference import jax_per_sample_grads_loop, torch_per_sample_grads_loop

from bench_contract.data.datasets import epoch_batches
from bench_contract.data.loading import load_dataset
from bench_contract.models.weights import make_initial_weights


def float64(x: np.ndarray) -> np.ndarray:
    """Pixels and features in float64; token ids and node indices stay integers."""
    return x.astype(np.float64) if np.issubdtype(x.dtype, np.floating) else x


def jax_probe(benchmark, model, data, idx):
    import jax
    from flax import traverse_util

    from jax_backend import layout, models, steps

    jax.config.update("jax_default_matmul_precision", "highest")
    jax.config.update("jax_enable_x64", True)
    specs = models.param_specs(model, data.sample_shape, data.num_classes, "tiny", data.graph)
    weights = make_initial_weights(specs, seed=0)
    module, variables = models.build_with_variables(model, weights, data.sample_shape, data.num_classes, "tiny",
                                                    data.graph)
    x, y = float64(models.to_model_layout(model, data.x_train[idx])), data.y_train[idx]  # vision: channel-last
    params = jax.tree.map(lambda p: jax.numpy.asarray(p, jax.numpy.float64), variables["params"])

    def torch_layout(tree):
        out = {}
        for key, value in traverse_util.flatten_dict({"params": tree}).items():
            # each example's gradient in PyTorch's layout (dense and convolution kernels alike), then stacked
            out[layout.torch_name(key)] = np.stack([layout.to_torch_layout(key[-1], g) for g in np.asarray(value)])
        return out

    # Jitted, as the training step runs it: one XLA program instead of one per operation (eagerly, resnet18_gn's
    # probe took 36 s of CPU here, jitted 16 s; the gradients the same to 1.3e-15 of each tensor's largest entry).
    _, vmapped = jax.jit(lambda p, x, y: steps.per_sample_grads(module, p, x, y))(params, x, y)
    looped = jax_per_sample_grads_loop(module, params, x, y)
    return torch_layout(vmapped), torch_layout(looped)


def torch_probe(benchmark, model, data, idx):
    import torch

    from torch_backend import models, per_sample

    net = models.build(model, data.sample_shape, data.num_classes, "tiny", data.graph)
    models.load_shared_weights(net, make_initial_weights(models.param_specs(net), seed=0))
    net.double()
    x, y = torch.from_numpy(float64(data.x_train[idx])), torch.from_numpy(data.y_train[idx]).long()
    params = per_sample.detached_params(net)
    vmapped, _ = per_sample.per_sample_grads(net, params, x, y)
    looped = torch_per_sample_grads_loop(net, params, x, y)
    return ({k: v.numpy() for k, v in vmapped.items()}, {k: v.numpy() for k, v in looped.items()})


def main() -> None:
    framework, benchmark, model, out, batch = sys.argv[1:6]
    data = load_dataset(benchmark, "synthetic", synthetic_samples=160, variant="tiny")
    idx = epoch_batches(len(data.x_train), int(batch), seed=0, epoch=0)[0]
    vmapped, looped = (jax_probe if framework == "jax" else torch_probe)(benchmark, model, data, idx)
    np.savez(out, **{f"vmap/{k}": v for k, v in vmapped.items()}, **{f"loop/{k}": v for k, v in looped.items()})


if __name__ == "__main__":
    main()
