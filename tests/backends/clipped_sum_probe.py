"""Run inside one framework's environment: the two functions `vectorization_speedup` times, each the sum of
the clipped per-example gradients, and the per-example gradients of a plain loop, saved in PyTorch names and
layout:

    vectorized/<name>   the backend's per-sample ops, clipped_sum_vectorized (what is timed as "vectorized")
    loop/<name>         the backend's per-sample ops, clipped_sum_loop (what is timed as "loop")
    per_example/<name>  per-example gradients, one example at a time (tests/backends/per_sample_reference.py),
                        with a leading batch axis, unclipped: the test clips and sums them itself

    python tests/backends/clipped_sum_probe.py {jax|torch} BENCHMARK MODEL OUT.npz BATCH CLIP_NORM

Synthetic data, tiny variant, the contract's initial weights (seed 0) and the first batch of epoch 0, so the
files the two frameworks write can be compared value by value. The per-sample ops are built as each backend's
per_sample_ops builds them, from the model a training cell would train.
"""

from __future__ import annotations

import sys

import numpy as np
from per_sample_reference import jax_per_sample_grads_loop, torch_per_sample_grads_loop

from bench_contract.data.datasets import epoch_batches
from bench_contract.data.loading import load_dataset
from bench_contract.models.weights import make_initial_weights


def jax_probe(model, data, x, y, clip_norm):
    import jax
    from flax import traverse_util

    from jax_backend import layout, models
    from jax_backend.per_sample import JaxPerSampleOps

    jax.config.update("jax_default_matmul_precision", "highest")  # as the backend's fp32 policy
    specs = models.param_specs(model, data.sample_shape, data.num_classes, "tiny", data.graph)
    weights = make_initial_weights(specs, seed=0)
    module, variables = models.build_with_variables(model, weights, data.sample_shape, data.num_classes, "tiny",
                                                    data.graph)
    params = variables["params"]
    ops = JaxPerSampleOps(model, module, params, clip_norm, jax.devices()[0])
    batch = ops.local_batch(x, y)

    def torch_layout(tree, batched=False):
        out = {}
        for key, value in traverse_util.flatten_dict({"params": tree}).items():
            value = np.asarray(value)
            convert = lambda v: layout.to_torch_layout(key[-1], v)  # noqa: E731
            out[layout.torch_name(key)] = np.stack([convert(v) for v in value]) if batched else convert(value)
        return out

    per_example = jax_per_sample_grads_loop(module, params, models.to_model_layout(model, x), y)
    return (torch_layout(ops.clipped_sum_vectorized(batch)), torch_layout(ops.clipped_sum_loop(batch)),
            torch_layout(per_example, batched=True))


def torch_probe(model, data, x, y, clip_norm):
    import torch

    from torch_backend import models, per_sample
    from torch_backend.per_sample import TorchPerSampleOps

    torch.set_float32_matmul_precision("highest")  # as the backend's fp32 policy
    net = models.build(model, data.sample_shape, data.num_classes, "tiny", data.graph)
    models.load_shared_weights(net, make_initial_weights(models.param_specs(net), seed=0))
    net.train()  # as training_ops leaves it for per_sample_ops
    ops = TorchPerSampleOps(net, clip_norm, torch.device("cpu"))
    batch = ops.local_batch(x, y)
    per_example = torch_per_sample_grads_loop(net, per_sample.detached_params(net), *batch)

    def numpy(tree):
        return {name: t.detach().numpy().copy() for name, t in tree.items()}

    return numpy(ops.clipped_sum_vectorized(batch)), numpy(ops.clipped_sum_loop(batch)), numpy(per_example)


def main() -> None:
    framework, benchmark, model, out, batch, clip_norm = sys.argv[1:7]
    data = load_dataset(benchmark, "synthetic", synthetic_samples=160, variant="tiny")
    idx = epoch_batches(len(data.x_train), int(batch), seed=0, epoch=0)[0]
    x, y = data.x_train[idx], data.y_train[idx]
    vectorized, loop, per_example = (jax_probe if framework == "jax" else torch_probe)(model, data, x, y,
                                                                                      float(clip_norm))
    arrays = {f"vectorized/{k}": v for k, v in vectorized.items()}
    arrays |= {f"loop/{k}": v for k, v in loop.items()}
    arrays |= {f"per_example/{k}": v for k, v in per_example.items()}
    np.savez(out, **arrays)


if __name__ == "__main__":
    main()
