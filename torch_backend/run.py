"""Entry point on the compute node: `python -m torch_backend.run SPEC.json`."""

from __future__ import annotations

import sys

import numpy as np
import torch
from torch import nn

from bench_contract.data import Dataset
from bench_contract.inference import INFERENCE_USE_CASE, precision_policy, run_inference
from bench_contract.results import ResultRows
from bench_contract.runner import DeviceSetup, main
from bench_contract.spec import JobSpec
from bench_contract.training import run_training
from torch_backend import models
from torch_backend.inference import TorchInference

# The words recorded for each precision policy live in bench_contract.inference.PRECISION_POLICIES, one
# table for both backends, so rows compare like with like.


class TorchOps:
    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer, device: torch.device) -> None:
        self.model, self.optimizer, self.device = model, optimizer, device
        self.loss_fn = nn.CrossEntropyLoss()

    def to_device(self, x: np.ndarray, y: np.ndarray):
        batch = (torch.from_numpy(x).to(self.device), torch.from_numpy(y).long().to(self.device))
        self.synchronize(batch)
        return batch

    def train_step(self, batch):
        x, y = batch
        self.optimizer.zero_grad(set_to_none=True)
        loss = self.loss_fn(self.model(x), y)
        loss.backward()
        self.optimizer.step()
        return loss.detach()

    def synchronize(self, out) -> None:
        # CUDA kernels run asynchronously: without this the clock would stop at dispatch, not completion.
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def loss_value(self, out) -> float:
        return float(out.item())

    @torch.no_grad()
    def predict(self, x: np.ndarray) -> np.ndarray:
        self.model.eval()
        try:
            return self.model(torch.from_numpy(x).to(self.device)).argmax(dim=1).cpu().numpy()
        finally:
            self.model.train()


class TorchBackend:
    framework = "torch"
    libraries = ["torch", "torchvision"]
    implemented_use_cases = (1, INFERENCE_USE_CASE)

    def __init__(self) -> None:
        self.device = torch.device("cpu")

    def prepare(self, spec: JobSpec) -> DeviceSetup:
        policy = precision_policy("torch", spec.precision, spec.use_case)
        # TF32 would silently lower matmul precision on Ampere and later; fp32 means fp32 on both sides.
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        torch.set_float32_matmul_precision("highest")
        gpu = torch.cuda.is_available()
        if spec.device == "gpu" and not gpu:
            raise RuntimeError("device 'gpu' was asked for, but PyTorch sees no CUDA device")
        use_gpu = gpu and spec.device != "cpu"
        self.device = torch.device("cuda:0" if use_gpu else "cpu")
        torch.manual_seed(spec.seed)
        return DeviceSetup(
            kind="gpu" if use_gpu else "cpu",
            count=torch.cuda.device_count() if use_gpu else 1,
            framework_version=torch.__version__,
            precision_policy=policy,
        )

    def param_specs(self, model, sample_shape, num_classes, variant):
        return models.param_specs(models.build(model, sample_shape, num_classes, variant))

    def inference_ops(self, spec, weights, sample_shape, num_classes) -> TorchInference:
        return TorchInference(spec.model, spec.model_variant, weights, sample_shape, num_classes, self.device,
                              torch_compile=spec.torch_compile, channels_last=spec.channels_last,
                              dtype=torch.bfloat16 if spec.precision == "bf16" else torch.float32)

    def run(self, spec: JobSpec, data: Dataset, weights: dict[str, np.ndarray], rows: ResultRows) -> None:
        if spec.use_case == INFERENCE_USE_CASE:
            ops = self.inference_ops(spec, weights, data.sample_shape, data.num_classes)
            self.reset_device_memory()
            run_inference(spec, data.x_train, ops, rows)
            self.add_device_memory(rows)
            return
        model = models.build(spec.model, data.sample_shape, data.num_classes)
        # strict=True: a name or shape mismatch with the shared weights is an error, never a partial load.
        model.load_state_dict({name: torch.from_numpy(w) for name, w in weights.items()}, strict=True)
        model.to(self.device).train()
        rows.add("parameter_count", sum(p.numel() for p in model.parameters()), "parameters")
        if spec.optimizer != "sgd":
            raise ValueError(f"optimizer {spec.optimizer!r} is not implemented in the torch backend (only sgd)")
        optimizer = torch.optim.SGD(model.parameters(), lr=spec.learning_rate)
        self.reset_device_memory()
        run_training(spec, data, TorchOps(model, optimizer, self.device), rows)
        self.add_device_memory(rows)

    def reset_device_memory(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)

    def add_device_memory(self, rows: ResultRows) -> None:
        if self.device.type == "cuda":
            rows.add("peak_device_memory_allocated", torch.cuda.max_memory_allocated(self.device), "bytes")
            rows.add("peak_device_memory_reserved", torch.cuda.max_memory_reserved(self.device), "bytes")


if __name__ == "__main__":
    sys.exit(main(TorchBackend()))
