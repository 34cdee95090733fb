"""PyTorch's optimizers update with multi-tensor operations on CUDA by default (foreach), and those in-place
operations return nothing: the census saw no optimizer update, and on an H200 every training row was "not
comparable: optimizer update float32 in JAX, none in PyTorch". Forced here on the CPU, where the default is one
operation per tensor."""

from helpers import probe_json

CENSUS = """
import json
import torch
from torch_backend.census import step_census

torch.manual_seed(0)
x, y = torch.randn(5, 4), torch.tensor([0, 1, 2, 0, 1])
out = {}
for name, optimizer_class, options in [("sgd", torch.optim.SGD, dict(lr=0.1)),
                                       ("momentum", torch.optim.SGD, dict(lr=0.1, momentum=0.9)),
                                       ("adam", torch.optim.Adam, dict(lr=0.1))]:
    for foreach in (True, False):
        model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
        optimizer = optimizer_class(model.parameters(), foreach=foreach, **options)

        def step():
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()

        found = step_census(step, optimizer)
        out[f"{name}, {'foreach' if foreach else 'for-loop'}"] = sorted(found.get("optimizer update", []))
print(json.dumps(out))
"""


def test_the_census_sees_the_optimizer_update_however_the_optimizer_runs_it():
    updates = probe_json("torch", CENSUS)
    assert len(updates) == 6 and all(dtypes == ["float32"] for dtypes in updates.values()), updates
