"""Run inside one framework's environment: per-sample gradients and one DP-SGD update, saved in PyTorch layout.

    python tests/backends/per_sample_probe.py {jax|torch} OUT.npz CLIP_NORM LEARNING_RATE BATCH

Both frameworks start from the same initial weights (the contract's, seed 0) and the first digits batch of
epoch 0, so the files they write can be compared value by value. Noise is off (sigma = 0).
"""

from __future__ import annotations

import sys

import numpy as np
from per_sample_reference import jax_per_sample_grads_loop, torch_per_sample_grads_loop

from bench_contract.data.datasets import epoch_batches, load_digits
from bench_contract.models.mlp import param_specs
from bench_contract.models.weights import make_initial_weights


def jax_probe(weights, x, y, clip_norm, lr):
    import jax
    import optax

    from jax_backend import models, steps

    jax.config.update("jax_default_matmul_precision", "highest")
    module, variables = models.build_with_variables("mlp", weights, (64,), 10)
    params = variables["params"]

    def torch_layout(tree):
        # A kernel is (in, out), or (batch, in, out) per sample; PyTorch's weight is (out, in).
        out = {}
        for layer, leaves in tree.items():
            out[f"{layer}.weight"] = np.swapaxes(np.asarray(leaves["kernel"]), -1, -2)
            out[f"{layer}.bias"] = np.asarray(leaves["bias"])
        return out

    _, vmapped = steps.per_sample_grads(module, params, x, y)
    looped = jax_per_sample_grads_loop(module, params, x, y)
    step = jax.jit(steps.dp_sgd_step(module, optax.sgd(lr), clip_norm, 0.0, seed=0))
    opt = optax.sgd(lr)
    updated, _, _, _, loss = step(params, {}, opt.init(params), np.uint32(0), x, y)
    return torch_layout(vmapped), torch_layout(looped), torch_layout(updated), float(loss)


def torch_probe(weights, x, y, clip_norm, lr):
    import torch

    from torch_backend import models, per_sample

    torch.set_float32_matmul_precision("highest")
    model = models.build("mlp", (64,), 10)
    model.load_state_dict({n: torch.from_numpy(w) for n, w in weights.items()}, strict=True)
    xt, yt = torch.from_numpy(x), torch.from_numpy(y).long()
    params = per_sample.detached_params(model)
    vmapped, _ = per_sample.per_sample_grads(model, params, xt, yt)
    looped = torch_per_sample_grads_loop(model, params, xt, yt)
    update = per_sample.DPSGDUpdate(model, torch.optim.SGD(model.parameters(), lr=lr), torch.device("cpu"),
                                    clip_norm=clip_norm, noise_multiplier=0.0, seed=0, world_size=1)
    loss = float(update(xt, yt))

    def numpy(tree):
        return {n: t.detach().numpy().copy() for n, t in tree.items()}

    return numpy(vmapped), numpy(looped), numpy(dict(model.named_parameters())), loss


def main() -> None:
    framework, out, clip_norm, lr, batch = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5])
    data = load_digits()
    weights = make_initial_weights(param_specs("mlp", data.sample_shape, data.num_classes), seed=0)
    idx = epoch_batches(len(data.x_train), batch, seed=0, epoch=0)[0]
    x, y = data.x_train[idx], data.y_train[idx]
    probe = jax_probe if framework == "jax" else torch_probe
    vmapped, looped, updated, loss = probe(weights, x, y, clip_norm, lr)
    arrays = {f"vmap/{n}": v for n, v in vmapped.items()}
    arrays |= {f"loop/{n}": v for n, v in looped.items()}
    arrays |= {f"updated/{n}": v for n, v in updated.items()}
    arrays |= {f"initial/{n}": v for n, v in weights.items()}
    np.savez(out, loss=np.float64(loss), **arrays)


if __name__ == "__main__":
    main()
