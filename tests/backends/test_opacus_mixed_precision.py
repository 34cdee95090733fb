"""Opacus in bf16: its expanded weights fail under autocast, since their backward multiplies the
bfloat16 gradient by the float32 weight outside it, so in bf16 the engine runs Opacus's hooks (spec.
opacus_grad_sample_mode), on the models whose hooks run (not the ResNets: their in-place operations break them).
Here, in the PyTorch environment: expanded weights still fail (when Opacus fixes them, this test says so), and the
hooks' DP-SGD step computes in the dtypes torch.func's does and gives its per-example gradients."""

from helpers import probe_json

PROBE = """
import json
import torch
from torch_backend import models
from torch_backend.census import step_census
from torch_backend.mixed import with_precision
from torch_backend.opacus_engine import OpacusDPSGDUpdate, OpacusPerSampleGrads, opacus_mode
from torch_backend.per_sample import DPSGDUpdate

out = {}
for name, shape in [("mlp", (64,)), ("cnn", (3, 32, 32))]:
    torch.manual_seed(0)
    x, y = torch.randn(8, *shape), torch.arange(8) % 10
    model = with_precision(models.build(name, shape, 10, "tiny"), "bf16")
    try:
        OpacusPerSampleGrads(model, "ew")(x, y)
        expanded = "ran"
    except RuntimeError as error:
        expanded = str(error)
    options = dict(clip_norm=0.5, noise_multiplier=0.0, seed=0, world_size=1)
    engines = {}
    opacus = lambda *a, **k: OpacusDPSGDUpdate(*a, mode=opacus_mode(name, "bf16"), **k)
    for engine, update_class in [("torchfunc", DPSGDUpdate), ("opacus", opacus)]:
        optimizer = torch.optim.SGD(model.parameters(), lr=0.0)  # lr 0: both engines see the same weights
        update = update_class(model, optimizer, torch.device("cpu"), **options)
        grads, _ = update.per_example(x, y)
        engines[engine] = torch.cat([g.flatten(1) for _, g in sorted(grads.items())], 1).double()
        census = step_census(lambda: update(x, y), optimizer)
        engines[engine + " census"] = {k: sorted(v) for k, v in census.items()}
    a, b = engines.pop("torchfunc"), engines.pop("opacus")
    out[name] = {"mode": opacus_mode(name, "bf16"), "expanded weights": expanded, **engines,
                 "cosines": torch.nn.functional.cosine_similarity(a, b).tolist(),
                 "norm ratios": (b.norm(dim=1) / a.norm(dim=1)).tolist()}
print(json.dumps(out))
"""


def test_opacus_runs_bf16_with_its_hooks_and_computes_as_torch_func_does():
    out = probe_json("torch", PROBE)
    for name, found in out.items():
        assert found["mode"] == "hooks", name
        assert "expected m1 and m2 to have the same dtype" in found["expanded weights"], name
        assert found["opacus census"] == found["torchfunc census"], name
        assert found["opacus census"]["matmul"][0] == "bfloat16", name
        # Each example's gradient, all parameters together, points the same way in both engines and has the same
        # norm. Not equal: Opacus's forward runs the batch, torch.func's one example, and bf16 rounds the two
        # differently (u = 2**-8), so a unit near its ReLU's kink may switch on in one and off in the other, which
        # moves its row of the next layer's gradient. Measured on AMD EPYC: cosines >= 0.998, norms within 0.3%;
        # against another example's gradient the cosines were below 0.
        assert min(found["cosines"]) >= 0.99, (name, found["cosines"])
        assert all(abs(ratio - 1) <= 0.02 for ratio in found["norm ratios"]), (name, found["norm ratios"])
