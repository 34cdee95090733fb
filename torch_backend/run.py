"""Entry point on the compute node: `python -m torch_backend.run SPEC.json`."""

from __future__ import annotations

import contextlib
import os
import sys
from functools import partial
from pathlib import Path

from bench_contract.run import cpu_binding, stop_signals

# Before the framework's import, which takes seconds: a stop signal in that time is remembered, not fatal, and
# the cell still gets its failure row (bench_contract.run.stop_signals).
stop_signals.catch_early()
# Before the framework's import too, so that every thread it starts inherits the task's CPUs (XLA sizes its
# pools from them); the same decision in both backends (bench_contract.run.cpu_binding).
cpu_binding.bind_task_cpus()
# And the variables that would turn TF32 on behind the precision policy (NGC's images set one), found and cleared.
from bench_contract.measure.device import clear_tf32_overrides  # noqa: E402  (after the signals are caught)

clear_tf32_overrides()

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.profiler import ProfilerActivity, profile

from bench_contract.data.datasets import Dataset
from bench_contract.measure import allocator
from bench_contract.results import ResultRows
from bench_contract.run.batch_search import device_memory_fraction
from bench_contract.run.precision import DTYPE_NAMES, precision_policy
from bench_contract.run.runner import DeviceSetup, main
from bench_contract.run.topology import Topology, topology_for
from bench_contract.run.training import refuse_batch_norm
from bench_contract.spec import SHARDED_PARALLELISM, JobSpec
from torch_backend import census, compiles, language, models, sharding, vision
from torch_backend.compiled import compiled
from torch_backend.efficiency import counted_flops, cuda_description, efficiency, pci_bus_id, runtime_versions
from torch_backend.inference import TorchInference
from torch_backend.mixed import LossScaler, set_tf32, with_precision
from torch_backend.opacus_engine import OpacusDPSGDUpdate, OpacusPerSampleOps, opacus_mode
from torch_backend.optim import build_optimizer
from torch_backend.per_sample import DPSGDUpdate, TorchPerSampleOps
from torch_backend.sharding import fully_sharded
from torch_backend.sync import batch_to_device, synchronize

# The words recorded for each precision policy live in bench_contract.run.precision.PRECISION_POLICIES, one
# table for both backends, so rows compare like with like.


def mean_cross_entropy(logits: torch.Tensor, y: torch.Tensor, label_smoothing: float = 0.0) -> torch.Tensor:
    """The mean cross-entropy over every label: one per example for a classifier, one per position for the
    language model ((N, L, vocabulary) logits, (N, L) next tokens), as optax's integer-label loss takes both; with
    label_smoothing eps, against the one-hot target smoothed towards the uniform distribution, (1 - eps) one-hot
    + eps / K (jax_backend.steps.cross_entropy)."""
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1), label_smoothing=label_smoothing)


class TorchOps:
    """Plain training; with several ranks `model` is the DistributedDataParallel wrapper and `eval_model` the
    network inside it, so that evaluation on rank 0 alone starts no collective. With `compile_mode` the whole
    step (forward, backward, the optimizer's update) runs under torch.compile, compiled in its first call."""

    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer, device: torch.device,
                 world_size: int = 1, scaler: LossScaler | None = None, compile_mode: str | None = None,
                 sharded: bool = False, label_smoothing: float = 0.0) -> None:
        self.model, self.optimizer, self.device, self.world_size = model, optimizer, device, world_size
        # FSDP2 (torch_backend.sharding): a forward pass gathers the shards from every rank, so every rank evaluates.
        self.shards_state = sharded
        self.eval_model = model.module if isinstance(model, DistributedDataParallel) else model
        self.loss_fn = partial(mean_cross_entropy, label_smoothing=label_smoothing)
        self.scaler = scaler or LossScaler("fp32", device)
        self.compiles_lazily = compile_mode is not None
        self.pads_batches = False  # Poisson batches run at their drawn size (bench_contract.run.sampling)
        self.step = compiled(self.eager_step, compile_mode) if self.compiles_lazily else self.eager_step

    def to_device(self, x: np.ndarray, y: np.ndarray):
        return batch_to_device(x, y, self.device)

    def train_step(self, batch):
        return self.step(*batch)

    def eager_step(self, x, y):
        self.optimizer.zero_grad(set_to_none=True)
        loss = self.loss_fn(self.model(x), y)
        self.scaler.backward_and_step(loss, self.optimizer)
        return loss.detach()

    def loss_scale(self) -> float | None:
        return self.scaler.loss_scale()

    def synchronize(self, out) -> None:
        synchronize(self.device)

    def compilations(self) -> int:
        return compiles.count()

    def graph_breaks(self) -> dict[str, int]:
        return compiles.graph_breaks()

    def loss_value(self, out) -> float:
        if self.world_size > 1:
            # Each rank's loss is its shard's mean; the global batch's loss is their average (equal shards).
            out = out.clone()
            dist.all_reduce(out)
            out /= self.world_size
        return float(out.item())

    def flops_per_step(self, batch):
        # One more step, after training and evaluation, so that counting cannot disturb what was measured.
        # Each rank counts its own shard's work.
        # Counted on the eager step: the same operations, without a recompilation for the counter's mode.
        return counted_flops(lambda: self.eager_step(*batch), self.world_size)

    def precision_census(self, batch) -> dict[str, set[str]]:
        # One more eager step, after everything measured. A compiled step runs the same ATen operations in the
        # dtypes autocast gives them; Inductor's fused kernels may compute inside in float32, as XLA's do.
        return census.step_census(lambda: self.eager_step(*batch), self.optimizer)

    def state_bytes_per_device(self) -> int:
        return sharding.state_bytes(self.model, self.optimizer)

    def attention_kernel(self, batch) -> str:
        # One more eager step, after everything measured, as the census: the kernel SDPA picks depends on the
        # dtypes autocast gives it and on whether gradients are needed, so it is read from a real training step.
        return language.attention_kernel(self.eval_model, lambda: self.eager_step(*batch))

    @torch.no_grad()
    def predict(self, x: np.ndarray) -> np.ndarray:
        self.eval_model.eval()
        try:
            return self.eval_model(torch.from_numpy(x).to(self.device)).argmax(dim=-1).cpu().numpy()
        finally:
            self.eval_model.train()


class TorchDPOps(TorchOps):
    """DP-SGD steps (use cases 3 and 4). No DistributedDataParallel: its hooks average the gradients of
    `backward()`, and per-sample gradients do not come from `backward()`; `DPSGDUpdate` reduces them itself."""

    def __init__(self, update: DPSGDUpdate, compile_mode: str | None = None) -> None:
        self.update = update
        super().__init__(update.model, update.optimizer, update.device, update.world_size, compile_mode=compile_mode)
        # Compiled, a step takes one shape, as JAX's does: Poisson batches are padded to it and the padding masked
        # (DPSGDUpdate.clipped_sum_and_loss). At their drawn sizes Dynamo recompiled at every new size until its
        # recompile limit (8), then ran the step eagerly under the compiled row's name (issue 29, defect 1).
        self.pads_batches = self.compiles_lazily

    def eager_step(self, x, y):
        return self.update(x, y)

    def loss_value(self, out) -> float:
        return float(out.item())  # already the global batch's mean: the update's all_reduce carried it


def compile_mode_of(spec: JobSpec) -> str | None:
    """torch.compile's mode for the cell's step or forward pass, the one its rows name; None: eager."""
    return spec.compile_mode()


def dp_update_class(spec: JobSpec):
    """DPSGDUpdate (torch.func), or with dp_engine opacus its Opacus subclass in the model's grad_sample_mode
    (Opacus itself is imported only for the cells that run it: torch_backend.opacus_engine.grad_sample_module)."""
    if spec.dp_engine != "opacus":
        return DPSGDUpdate
    return partial(OpacusDPSGDUpdate, mode=opacus_mode(spec.model, spec.precision))


def unused_accelerators() -> tuple[str, ...]:
    """An Apple GPU PyTorch sees through MPS: this backend runs on CUDA or the CPU, so it is recorded, not used."""
    if torch.backends.mps.is_available():
        return ("Apple GPU (torch.backends.mps): seen, not used; this backend runs on CUDA or the CPU",)
    return ()


class TorchBackend:
    framework = "torch"
    libraries = ["torch", "torchvision", "opacus"]
    no_gpu_cause = "its PyTorch build has no CUDA, or not one this node's driver runs (torch.cuda.is_available() is False)"

    def __init__(self) -> None:
        self.device = torch.device("cpu")
        self.topology = Topology()

    def prepare(self, spec: JobSpec) -> DeviceSetup:
        policy = precision_policy("torch", spec.precision, spec.use_case)
        allocator.fix_thresholds()  # a pass reuses what the last one freed, as in the other framework
        gpu = torch.cuda.is_available()
        if spec.device == "gpu" and not gpu:
            raise RuntimeError("device 'gpu' was asked for, but PyTorch sees no CUDA device")
        use_gpu = gpu and spec.device != "cpu"
        self.topology = topology = topology_for(spec)
        # One process per device: with several ranks on a node, each takes the GPU of its local rank.
        self.device = torch.device(f"cuda:{topology.local_rank if topology.world_size > 1 else 0}" if use_gpu else "cpu")
        if use_gpu:  # a capped batch-search try: the allocator's limit is the cap (bench_contract.run.batch_search)
            fraction = device_memory_fraction(spec, torch.cuda.get_device_properties(self.device).total_memory)
            if fraction is not None:
                torch.cuda.set_per_process_memory_fraction(fraction, self.device)
        # TF32 only for the tf32 policy, refused where the device has none: fp32 means fp32 on both sides.
        set_tf32(spec.precision, self.device)
        if topology.world_size > 1:
            # MASTER_ADDR and MASTER_PORT come from the rendered script (the first node of the allocation).
            dist.init_process_group("nccl" if use_gpu else "gloo", rank=topology.rank, world_size=topology.world_size)
        torch.manual_seed(spec.seed)
        if use_gpu:  # the tuned configuration's (bench_contract.tuning); out of the box off, PyTorch's default
            torch.backends.cudnn.benchmark = bool(spec.knob("cudnn_benchmark"))
        if spec.knob("interop_threads"):  # before any inter-op work starts, which fixes the pool's size
            torch.set_num_interop_threads(spec.knob("interop_threads"))
        threads = cpu_binding.current().count
        if threads:  # as many intra-op threads as bound CPUs, whatever OMP_NUM_THREADS said at import
            torch.set_num_threads(threads)
        return DeviceSetup(
            kind="gpu" if use_gpu else "cpu",
            count=torch.cuda.device_count() if use_gpu else 1,  # seen; it computes on self.device alone
            framework_version=torch.__version__,
            precision_policy=policy,
            device_ids=(pci_bus_id(self.device),) if use_gpu else (),
            framework_device=cuda_description(self.device) if use_gpu else None,
            runtime_versions=runtime_versions(),
            unused_accelerators=unused_accelerators(),
            intra_op_threads=torch.get_num_threads(),
            threads_source=("torch.get_num_threads(), after torch.set_num_threads(bound CPUs)" if threads else
                            "torch.get_num_threads(), PyTorch's default: the CPUs could not be bound"),
        )

    def param_specs(self, model, sample_shape, num_classes, variant, graph=None):
        return models.param_specs(models.build(model, sample_shape, num_classes, variant, graph))

    def inference_ops(self, spec, weights, sample_shape, num_classes) -> TorchInference:
        return TorchInference(spec.model, spec.model_variant, weights, sample_shape, num_classes, self.device,
                              compile_mode=compile_mode_of(spec), channels_last=spec.uses_channels_last(),
                              grad_mode=spec.knob("grad_mode"),
                              dtype=getattr(torch, DTYPE_NAMES[spec.precision]))

    def training_ops(self, spec: JobSpec, data: Dataset, weights: dict[str, np.ndarray],
                     rows: ResultRows) -> TorchOps:
        model = models.build(spec.model, data.sample_shape, data.num_classes, spec.model_variant, data.graph)
        models.load_shared_weights(model, weights)
        refuse_batch_norm(spec, any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.modules()))
        # Dropout and stochastic depth draw from PyTorch's own RNG, which JAX cannot follow: off for training,
        # so both frameworks take the same steps (the Flax modules have none; framework_options records it).
        vision.disable_random_regularisers(model)
        model.to(self.device).train()
        rows.add("parameter_count", sum(p.numel() for p in model.parameters()), "parameters")
        world_size = self.topology.world_size
        if spec.parallelism == SHARDED_PARALLELISM:  # before the optimizer, which then holds the shards' state
            model = fully_sharded(model, self.device, world_size)
        model = with_precision(model, spec.precision)  # bf16, fp16: the forward pass under autocast
        compile_mode = compile_mode_of(spec)
        optimizer = build_optimizer(model.parameters(), spec)
        scaler = LossScaler(spec.precision, self.device)
        if spec.case.per_sample:
            return TorchDPOps(dp_update_class(spec)(model, optimizer, self.device, clip_norm=spec.clip_norm,
                                                    noise_multiplier=spec.noise_multiplier, seed=spec.seed,
                                                    world_size=world_size, expected_batch_size=spec.batch_size,
                                                    label_smoothing=spec.label_smoothing), compile_mode)
        smoothing = spec.label_smoothing
        if spec.parallelism == SHARDED_PARALLELISM:
            return TorchOps(model, optimizer, self.device, world_size, scaler, compile_mode, sharded=True,
                            label_smoothing=smoothing)
        if world_size > 1:
            # Buffers outside the state_dict (the GCN's graph) are constants, the same on every rank:
            # DDP would broadcast them before every forward pass for nothing. Batch-norm statistics stay synced.
            stateful = set(model.state_dict()) - {name for name, _ in model.named_parameters()}
            ddp = DistributedDataParallel(model, device_ids=[self.device] if self.device.type == "cuda" else None,
                                          broadcast_buffers=bool(stateful))
            return TorchOps(ddp, optimizer, self.device, world_size, scaler, compile_mode, label_smoothing=smoothing)
        return TorchOps(model, optimizer, self.device, scaler=scaler, compile_mode=compile_mode,
                        label_smoothing=smoothing)

    def per_sample_ops(self, spec: JobSpec, ops: TorchOps) -> TorchPerSampleOps:
        if spec.dp_engine == "opacus":  # the update's own Opacus module is what the vectorisation timing times
            return OpacusPerSampleOps(ops.update, spec.clip_norm, self.device)
        return TorchPerSampleOps(ops.eval_model, spec.clip_norm, self.device, spec.label_smoothing)

    def efficiency(self, spec: JobSpec):
        return efficiency(self.device, spec.precision, self.topology.world_size)

    def finish(self) -> None:
        if self.topology.world_size > 1:
            # Every rank past its last collective before any tears the group down: a rank that exited while gloo
            # still had work of its peer in flight was aborted ("terminate called without an active exception",
            # seen once in 58 cluster tests under load), and srun cancelled the whole step. It came back once at
            # the interpreter's teardown, after these two: see `leave`.
            dist.barrier()
            dist.destroy_process_group()

    @contextlib.contextmanager
    def trace(self, folder: Path):
        """torch.profiler over CPU (and CUDA on a GPU) activity, exported as a Chrome-format trace for Perfetto."""
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if self.device.type == "cuda" else [])
        with profile(activities=activities) as prof:
            yield
        prof.export_chrome_trace(str(folder / "torch_trace.json"))

    def matmul(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return (torch.from_numpy(a).to(self.device) @ torch.from_numpy(b).to(self.device)).cpu().numpy()

    def reset_device_memory(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)

    def add_device_memory(self, rows: ResultRows) -> None:
        if self.device.type == "cuda":
            note = "torch.cuda.max_memory_*, reset before the cell's model ran"
            rows.add("peak_device_memory_allocated", torch.cuda.max_memory_allocated(self.device), "bytes", note=note)
            rows.add("peak_device_memory_reserved", torch.cuda.max_memory_reserved(self.device), "bytes", note=note)
        else:
            for metric in ("peak_device_memory_allocated", "peak_device_memory_reserved"):
                rows.add_unavailable(metric, "bytes", "PyTorch ran on the CPU, which has no CUDA allocator "
                                                      "statistics (host memory: peak_host_rss)")


def leave(backend: TorchBackend, code: int) -> None:
    """Exit with `code`. A rank of a multi-process run leaves without the interpreter's teardown: there PyTorch's
    gloo threads aborted a finished rank ("terminate called without an active exception", twice in the cluster
    tests under load, after the barrier and destroy_process_group of `finish`), and srun cancelled the whole step
    though rank 0 had written the results. Once main has returned, the results and failure rows are published
    (bench_contract.atomic flushes them to disk) and only the standard streams are left to flush."""
    if backend.topology.world_size > 1:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)


if __name__ == "__main__":
    torch_backend = TorchBackend()
    leave(torch_backend, main(torch_backend))
