"""torch.func's vmap runs group norm as a normalisation without weight and bias followed by their multiply and add,
so under CPU autocast a bfloat16 input came out float32 (promoted by the float32 weight), where group norm returns
bfloat16 outside vmap and in JAX: DP-SGD with torch.func on a GroupNorm ResNet in bf16 ran its residual stream in
float32, and its rows were "not comparable: residual stream bfloat16 in JAX, float32 in PyTorch". The
DP-SGD step now runs a twin of the model whose group norms keep their dtype under vmap (per_sample.vmap_twin)."""

from helpers import probe_json

PROBE = """
import json
import torch
from torch import nn
from torch_backend import models
from torch_backend.census import step_census
from torch_backend.mixed import with_precision
from torch_backend.per_sample import DPSGDUpdate, detached_params, per_sample_grads

torch.manual_seed(0)
x, y = torch.randn(4, 3, 32, 32), torch.tensor([0, 1, 2, 3])
out = {}
for precision in ("fp32", "bf16"):
    model = with_precision(models.build("resnet18_gn", (3, 32, 32), 10, "tiny"), precision)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

    def training_step():
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()

    update = DPSGDUpdate(model, optimizer, torch.device("cpu"), clip_norm=1.0, noise_multiplier=0.0, seed=0,
                         world_size=1)
    censuses = {name: {k: sorted(v) for k, v in step_census(step, optimizer).items()}
                for name, step in [("training step", training_step), ("dp-sgd step", lambda: update(x, y))]}
    params = detached_params(model)
    twin, plain = (per_sample_grads(m, params, x, y)[0] for m in (update.vmapped, model))
    out[precision] = {
        "censuses": censuses,
        # The largest difference from the plain module's per-example gradients, relative to the largest gradient.
        "difference": max(float((twin[k] - plain[k]).abs().max() / plain[k].abs().max()) for k in plain),
        "shared": all(a is b for a, b in zip(model.parameters(), update.vmapped.parameters())),
        "model's norms": sorted({type(m).__name__ for m in model.modules() if isinstance(m, nn.GroupNorm)}),
    }
print(json.dumps(out))
"""


def test_dp_sgd_with_torch_func_computes_group_norm_and_the_residual_stream_as_training_does():
    out = probe_json("torch", PROBE)
    bf16 = out["bf16"]["censuses"]
    for name in ("normalisation", "residual stream"):
        assert bf16["dp-sgd step"][name] == bf16["training step"][name] == ["bfloat16"], (name, bf16)
    fp32 = out["fp32"]
    assert fp32["censuses"]["dp-sgd step"]["residual stream"] == ["float32"]
    # In float32 the twin computes what vmap's own rule computes, the affine apart in the same order: any difference
    # is a reassociation's rounding, a few float32 ulps (2**-23 ~ 1.2e-7) of the largest gradient, far below 1e-5.
    assert fp32["difference"] < 1e-5, fp32["difference"]
    for precision in out.values():
        # The twin holds the model's own tensors, and the model keeps nn.GroupNorm, the type Opacus's rule is for.
        assert precision["shared"] and precision["model's norms"] == ["GroupNorm"]
