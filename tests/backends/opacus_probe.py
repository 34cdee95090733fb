"""Run inside the PyTorch environment: DP-SGD's two PyTorch engines on the same weights and batch, saved for
tests/backends/test_opacus_engine.py:

    torchfunc/<name>, opacus/<name>     each engine's sum of clipped per-example gradients (clipped_sum_and_loss)
    loss/torchfunc, loss/opacus         the mean loss of the batch, from each engine
    norms                               the per-example gradient norms (torch.func), so the test can see clipping
    step_torchfunc/<name>, step_opacus/<name>   the parameters after one whole update of each (noise on, same seed)
    loop/<name>, after_step_loop/<name>  the per-example loop's clipped sum after each update (equal weights)
    loop_left_grad_samples              per parameter, whether the loop left an Opacus grad_sample (hooks left on)

    python tests/backends/opacus_probe.py BENCHMARK MODEL OUT.npz BATCH CLIP_NORM

Synthetic data, tiny variant, the contract's initial weights (seed 0) and the first batch of epoch 0, in
float64: Opacus (expanded weights or hooks on the batched forward) and torch.func (vmap) sum in different
orders, and in float32 a ReLU input within ~1e-6 of zero can take different signs in the two, which passes one
unit's gradient in one engine and stops it in the other (seen on an AMD EPYC: resnet18_gn's clipped sums 1% of
their largest entry apart). In float64 the gap is ~1e-15 and such a unit improbable; what is compared is the
engines' arithmetic (tests/backends/model_per_sample_probe.py has the numbers).
"""

from __future__ import annotations

import copy
import sys

import numpy as np
import torch

from bench_contract.data.datasets import epoch_batches
from bench_contract.data.loading import load_dataset
from bench_contract.models.weights import make_initial_weights
from torch_backend import models
from torch_backend.opacus_engine import OpacusDPSGDUpdate, OpacusPerSampleOps, opacus_mode
from torch_backend.per_sample import DPSGDUpdate, TorchPerSampleOps, detached_params, per_sample_grads

NOISE_MULTIPLIER = 0.7
LEARNING_RATE = 0.1


def numpy(tree: dict) -> dict:
    return {name: t.detach().numpy().copy() for name, t in tree.items()}


def main() -> None:
    benchmark, model, out, batch, clip_norm = sys.argv[1:6]
    clip_norm = float(clip_norm)
    torch.set_float32_matmul_precision("highest")  # as the backend's fp32 policy
    data = load_dataset(benchmark, "synthetic", synthetic_samples=160, variant="tiny")
    idx = epoch_batches(len(data.x_train), int(batch), seed=0, epoch=0)[0]
    x, y = torch.from_numpy(data.x_train[idx]).double(), torch.from_numpy(data.y_train[idx]).long()
    net = models.build(model, data.sample_shape, data.num_classes, "tiny", data.graph)
    models.load_shared_weights(net, make_initial_weights(models.param_specs(net), seed=0))
    net.double()
    net.train()
    nets = {"torchfunc": net, "opacus": copy.deepcopy(net)}
    device = torch.device("cpu")
    kwargs = {"clip_norm": clip_norm, "noise_multiplier": NOISE_MULTIPLIER, "seed": 3, "world_size": 1}
    updates = {
        "torchfunc": DPSGDUpdate(nets["torchfunc"], torch.optim.SGD(nets["torchfunc"].parameters(), LEARNING_RATE),
                                 device, **kwargs),
        "opacus": OpacusDPSGDUpdate(nets["opacus"], torch.optim.SGD(nets["opacus"].parameters(), LEARNING_RATE),
                                    device, mode=opacus_mode(model), **kwargs),
    }
    arrays = {}
    grads, _ = per_sample_grads(net, detached_params(net), x, y)
    arrays["norms"] = torch.sqrt(sum(g.flatten(1).pow(2).sum(1) for g in grads.values())).numpy()
    for engine, update in updates.items():
        summed, loss_sum, count = update.clipped_sum_and_loss(x, y)
        arrays |= {f"{engine}/{k}": v for k, v in numpy(summed).items()}
        arrays[f"loss/{engine}"] = (loss_sum / count).detach().numpy()
        update(x, y)
        arrays |= {f"step_{engine}/{k}": v for k, v in numpy(dict(nets[engine].named_parameters())).items()}
    # The per-example loop of the vectorisation timing, on each engine's network after its update (equal weights):
    # Opacus's hooks must be off outside its own step, or they would run (and be timed) inside the loop.
    for p in nets["opacus"].parameters():
        p.grad_sample = None
    loops = {"torchfunc": TorchPerSampleOps(nets["torchfunc"], clip_norm, device),
             "opacus": OpacusPerSampleOps(updates["opacus"], clip_norm, device)}
    arrays |= {f"loop/{k}": v for k, v in numpy(loops["torchfunc"].clipped_sum_loop((x, y))).items()}
    arrays |= {f"after_step_loop/{k}": v for k, v in numpy(loops["opacus"].clipped_sum_loop((x, y))).items()}
    arrays["loop_left_grad_samples"] = np.array([getattr(p, "grad_sample", None) is not None
                                                 for p in nets["opacus"].parameters()])
    np.savez(out, **arrays)


if __name__ == "__main__":
    main()
