"""PyTorch's FLOP count of a DP-SGD step: torch's formula for a convolution's backward counts
the weight gradient of a grouped convolution `groups` times over, and torch.func's per-sample gradients of a
convolution are one, with a group per example. The CIFAR-10 CNN's DP-SGD step counted 43 times its work, an MFU of
3.9 on a CPU; each check below fails with torch's own formula."""

import json

from helpers import run_in_env

COUNTS = """
import json
import torch
import torch.nn.functional as F
from torch_backend import models
from torch_backend.efficiency import counted_flops
from torch_backend.per_sample import DPSGDUpdate

torch.manual_seed(0)
groups, c, o, k = 8, 3, 4, 3
x = torch.randn(1, groups * c, 16, 16, requires_grad=True)
w = torch.randn(groups * o, c, k, k, requires_grad=True)
x1, w1 = x[:, :c].detach().requires_grad_(), w[:o].detach().requires_grad_()
grouped = counted_flops(lambda: F.conv2d(x, w, groups=groups).sum().backward()).per_step
single = counted_flops(lambda: F.conv2d(x1, w1).sum().backward()).per_step

model = models.build("cnn", (3, 32, 32), 10, "tiny")
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
update = DPSGDUpdate(model, optimizer, torch.device("cpu"), clip_norm=1.0, noise_multiplier=0.0, seed=0,
                     world_size=1, expected_batch_size=64)
xs, ys = torch.randn(64, 3, 32, 32), torch.randint(0, 10, (64,))

def plain():
    optimizer.zero_grad()
    F.cross_entropy(model(xs), ys).backward()
    optimizer.step()

print(json.dumps({"grouped": grouped, "single": single, "dp_sgd": counted_flops(lambda: update(xs, ys)).per_step,
                  "plain": counted_flops(plain).per_step}))
"""


def dp_sgd_counts() -> dict:
    out = run_in_env("torch", "-c", COUNTS)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.splitlines()[-1])


def test_the_flop_counts_of_a_grouped_convolution_and_of_a_dp_sgd_step_are_their_work():
    got = dp_sgd_counts()
    # A convolution of `groups` groups is that many independent convolutions: exactly that many times the work.
    assert got["grouped"] == 8 * got["single"]
    # A DP-SGD step does the plain step's multiply-adds (the per-example weight gradients sum to the batch's), plus
    # per-example norms and clipping, O(parameters x batch) elementwise work that the counter does not count: the
    # two counts differ only by the matmul that sums the clipped gradients, a few percent of the step.
    assert got["plain"] <= got["dp_sgd"] <= 1.1 * got["plain"]
