"""PyTorch's DP-SGD step moves nothing between host and device: it copied a Python float (the batch's
size) to the device every step, which on CUDA blocks the host until the copy is done and defeats the pipelining
that throughput_pipelined measures. On the CPU the copy costs nothing, so the test reads the dispatched operations:
no tensor made from host data (aten.lift_fresh, what torch.tensor(3.0) dispatches) and no value read back
(aten._local_scalar_dense, what .item() dispatches)."""

import subprocess

from helpers import REPO_ROOT, env_python

STEP_UNDER_WATCH = """
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch_backend.per_sample import DPSGDUpdate

# A Python scalar in an operation (torch.where(c, g, 0.0)) becomes a wrapped CPU number (aten.scalar_tensor) that
# kernels take as an argument, with no copy: not a transfer.
HOST_TRANSFERS = {"lift_fresh", "_local_scalar_dense"}

class Watch(TorchDispatchMode):
    seen = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.overloadpacket.__name__ in HOST_TRANSFERS:
            self.seen.append(func.overloadpacket.__name__)
        return func(*args, **(kwargs or {}))

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
update = DPSGDUpdate(model, torch.optim.SGD(model.parameters(), lr=0.1), torch.device("cpu"), clip_norm=1.0,
                     noise_multiplier=1.0, seed=0, world_size=1, expected_batch_size=6)
x, y = torch.randn(5, 4), torch.tensor([0, 1, 2, 0, -1])  # the last one padding (PAD_LABEL)
update(x, y)  # a first step outside the watch: one-off set-up is not the step's
with Watch():
    update(x, y)
print(sorted(set(Watch.seen)))
"""


def test_the_dp_sgd_step_copies_nothing_from_the_host_and_reads_nothing_back():
    proc = subprocess.run([str(env_python("torch")), "-c", STEP_UNDER_WATCH], capture_output=True, text=True,
                          timeout=300, env={"PYTHONPATH": str(REPO_ROOT), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == "[]", proc.stdout
