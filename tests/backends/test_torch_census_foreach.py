"""PyTorch's optimizers update with multi-tensor operations on CUDA by default (foreach), and those in-place
operations return nothing: the census saw no optimizer update, and on an H200 every training row was "not
comparable: optimizer update float32 in JAX, none in PyTorch". Forced here on the CPU, where the default is one
operation per tensor."""

import json
import subprocess

import pytest
from helpers import REPO_ROOT, env_python

CENSUS = """
import json, sys
import torch
from torch_backend.census import step_census

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
kind, foreach = sys.argv[1], sys.argv[2] == "foreach"
optimizer = {"sgd": lambda p: torch.optim.SGD(p, lr=0.1, foreach=foreach),
             "momentum": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, foreach=foreach),
             "adam": lambda p: torch.optim.Adam(p, lr=0.1, foreach=foreach)}[kind](model.parameters())
x, y = torch.randn(5, 4), torch.tensor([0, 1, 2, 0, 1])

def step():
    optimizer.zero_grad()
    torch.nn.functional.cross_entropy(model(x), y).backward()
    optimizer.step()

print(json.dumps({k: sorted(v) for k, v in step_census(step, optimizer).items()}))
"""


@pytest.mark.parametrize("optimizer", ["sgd", "momentum", "adam"])
@pytest.mark.parametrize("implementation", ["foreach", "for-loop"])
def test_the_census_sees_the_optimizer_update_however_the_optimizer_runs_it(optimizer, implementation):
    out = subprocess.run([str(env_python("torch")), "-c", CENSUS, optimizer, implementation], cwd=REPO_ROOT,
                         capture_output=True, text=True, check=True)
    census = json.loads(out.stdout.splitlines()[-1])
    assert census["optimizer update"] == ["float32"], census
