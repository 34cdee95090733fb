"""Entry point on the compute node: `python -m jax_backend.run SPEC.json`."""

from __future__ import annotations

import contextlib
import os
import sys
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

import jax
import jax.numpy as jnp
import numpy as np

from bench_contract.data.datasets import Dataset
from bench_contract.measure import allocator
from bench_contract.measure.device import nvml_memory_total
from bench_contract.results import ResultRows
from bench_contract.run.batch_search import device_memory_fraction, try_memory_cap
from bench_contract.run.precision import DTYPE_NAMES, precision_policy
from bench_contract.run.runner import DeviceSetup, main
from bench_contract.run.sampling import compiled_batch_size
from bench_contract.run.topology import topology_for
from bench_contract.run.training import refuse_batch_norm
from bench_contract.spec import SHARDED_PARALLELISM, JobSpec
from jax_backend import census, compiles, language, mixed, models, steps
from jax_backend.efficiency import cuda_ordinals, efficiency, gpu_description, runtime_versions, traced_flops
from jax_backend.inference import JaxInference
from jax_backend.optim import build_optimizer
from jax_backend.parallel import Placement, initialize
from jax_backend.per_sample import JaxPerSampleOps
from jax_backend.sync import synchronize

# The words recorded for each precision policy live in bench_contract.run.precision.PRECISION_POLICIES, one
# table for both backends, so rows compare like with like.


class JaxOps:
    """Holds the training state; the step itself is a pure function (`steps`) compiled ahead of time."""

    compiles_lazily = False  # compiled ahead of time: compile_time is measured on its own (training_ops)
    pads_batches = True  # one batch shape: Poisson batches are padded (bench_contract.run.sampling)

    def __init__(self, model: str, module, variables, optimizer, step_fn, sample_batch, placement: Placement,
                 donate: bool = True) -> None:
        self.model, self.module, self.placement = model, module, placement
        self.params = placement.state(variables["params"])
        # Batch norm's running statistics ({} without batch norm): updated by every train step, used by predict.
        self.batch_stats = placement.replicate(variables.get("batch_stats", {}))
        self.opt_state = placement.state(optimizer.init(variables["params"]))
        self.step = placement.replicate(np.zeros((), np.uint32))
        # Sharded state (--parallelism fsdp): gathering it for evaluation is a collective, so every rank evaluates.
        self.shards_state = placement.sharded_state
        state = (self.params, self.batch_stats, self.opt_state, self.step)
        self.step_fn, self.compile_times, self.step_jaxpr = compiles.ahead_of_time(
            placement.jit_step(step_fn, state, donate), *state, *self.to_device(*sample_batch))
        self.predict_fn = jax.jit(
            lambda params, batch_stats, x: jnp.argmax(steps.eval_forward(module, params, batch_stats, x), axis=-1))

    def flops_per_step(self, batch):
        # FLOPs from the step's jaxpr (global shapes: the whole step's); bytes from XLA's per-device program.
        return traced_flops(self.step_jaxpr, self.step_fn, self.placement.device_count)

    def precision_census(self, batch) -> dict[str, set[str]]:
        return census.census(self.step_jaxpr)  # the step as traced for compilation: every step ran that program

    def attention_kernel(self, batch) -> str:
        return language.attention_kernel(self.step_fn.as_text()) if self.model == language.MODEL_NAME else ""

    def to_device(self, x: np.ndarray, y: np.ndarray):
        # The layout change (channel-last for convolutions) is a host-side copy, outside the timed step.
        x = models.to_model_layout(self.model, x)
        return synchronize((self.placement.batch(x), self.placement.batch(y)))

    def train_step(self, batch):
        self.params, self.batch_stats, self.opt_state, self.step, loss = self.step_fn(
            self.params, self.batch_stats, self.opt_state, self.step, *batch)
        return loss

    def synchronize(self, out) -> None:
        # JAX dispatches asynchronously: the step is done only when its outputs are ready.
        synchronize((out, self.params))

    def compilations(self) -> int:
        return compiles.count()

    def loss_scale(self) -> float | None:
        return mixed.loss_scale(self.opt_state)

    def loss_value(self, out) -> float:
        # The loss is replicated: this process's copy is the global batch's loss.
        return float(out.addressable_data(0))

    def predict(self, x: np.ndarray) -> np.ndarray:
        # On this process's own copy of the parameters: evaluation involves no other process.
        x = models.to_model_layout(self.model, x)
        local = self.placement.local_copy
        params = self.placement.gathered(self.params)
        return np.asarray(self.predict_fn(local(params), local(self.batch_stats), x))

    def state_bytes_per_device(self) -> int:
        return self.placement.local_bytes((self.params, self.opt_state))


@contextlib.contextmanager
def jax_trace(folder: Path):
    """jax.profiler's trace: XPlane for TensorBoard, and Chrome-format JSON (gzipped) for Perfetto."""
    with jax.profiler.trace(str(folder), create_perfetto_trace=True):
        yield


def cap_device_memory(spec) -> None:
    """A capped batch-search try on a GPU: XLA's allocator may take that share of the GPU's memory. XLA reads
    XLA_PYTHON_CLIENT_MEM_FRACTION when its GPU backend starts (below, in prepare); with preallocation off it is
    still the allocator's limit (bench_contract.run.batch_search)."""
    total = nvml_memory_total() if try_memory_cap(spec) else None
    fraction = device_memory_fraction(spec, total) if total else None
    if fraction is not None:
        os.environ["XLA_PYTHON_CLIENT_MEM_FRACTION"] = f"{fraction:.6f}"


INTRA_OP_THREADS_SOURCE = ("XLA's CPU client: one intra-op thread per CPU of the process's affinity mask when "
                           "the client starts (XLA ignores OMP_NUM_THREADS)")


class JaxBackend:
    framework = "jax"
    libraries = ["jax", "jaxlib", "flax", "optax"]
    no_gpu_cause = ("its environment has the CPU build of JAX; set jax_recipe = 'cuda12' or 'cuda13' in the "
                    "cluster profile and run `python main.py envs` again")

    def prepare(self, spec: JobSpec) -> DeviceSetup:
        policy = precision_policy("jax", spec.precision, spec.use_case)
        allocator.fix_thresholds()  # a pass reuses what the last one freed, as in the other framework
        if spec.run_xla_flags():
            # The profile's per-model flags and the tuned configuration's. XLA reads XLA_FLAGS once, when JAX first starts a backend, which
            # is below (jax.local_devices()); nothing before this line starts one.
            os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {spec.run_xla_flags()}".strip()
        if spec.device == "cpu":
            jax.config.update("jax_platforms", "cpu")
        else:
            cap_device_memory(spec)
        self.topology = topology_for(spec)
        initialize(self.topology)  # before anything asks JAX for its devices
        devices = jax.local_devices()
        # "gpu" (CUDA or ROCm), "cpu", or another platform JAX runs on (TPU; "METAL" with Apple's plugin), named
        # as it is: a TPU is never recorded as the host's CPU.
        kind = devices[0].platform.lower()
        if spec.device == "gpu" and kind != "gpu":
            raise RuntimeError(f"device 'gpu' was asked for, but JAX sees only {devices[0].platform} devices")
        self.device = devices[0]
        # XLA's default on GPU is TF32-like reduced precision for float32 matmuls: only the tf32 policy gets it
        # (refused where the device has none); fp32 means fp32 on both sides.
        mixed.set_matmul_precision(spec.precision, self.device)
        self.kind = kind
        return DeviceSetup(
            kind=kind,
            count=len(devices),  # seen; it computes on one (under Slurm, jax.distributed gives each process one)
            framework_version=jax.__version__,
            precision_policy=policy,
            device_ids=cuda_ordinals([self.device]),
            runtime_versions=runtime_versions(),
            model=None if kind in ("gpu", "cpu") else devices[0].device_kind,
            framework_device=gpu_description(self.device) if kind == "gpu" else None,
            # XLA has no thread setting to read back: its CPU client, started by local_devices() above, sized
            # its intra-op pool from the affinity mask, which is what this records (cpu_binding's docstring).
            intra_op_threads=len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
            threads_source=INTRA_OP_THREADS_SOURCE,
        )

    def efficiency(self, spec: JobSpec):
        return efficiency(self.kind, [self.device], spec.precision, self.topology.world_size)

    def param_specs(self, model, sample_shape, num_classes, variant, graph=None):
        return models.param_specs(model, sample_shape, num_classes, variant, graph)

    def inference_ops(self, spec, weights, sample_shape, num_classes) -> JaxInference:
        return JaxInference(spec.model, spec.model_variant, weights, sample_shape, num_classes, self.device,
                            dtype=getattr(jnp, DTYPE_NAMES[spec.precision]))

    def training_ops(self, spec: JobSpec, data: Dataset, weights: dict[str, np.ndarray], rows: ResultRows) -> JaxOps:
        module, variables = models.build_with_variables(spec.model, weights, data.sample_shape, data.num_classes,
                                                        spec.model_variant, data.graph)
        unknown = set(variables) - {"params", "batch_stats"}
        if unknown:
            raise ValueError(f"training {spec.model} (it has {', '.join(sorted(unknown))}) is not implemented "
                             "in the jax backend")
        rows.add("parameter_count", sum(p.size for p in jax.tree_util.tree_leaves(variables["params"])), "parameters")
        optimizer = build_optimizer(spec)
        refuse_batch_norm(spec, "batch_stats" in variables)
        module = mixed.with_precision(module, spec.precision, self.kind == "gpu")  # bf16, fp16: autocast's policy
        placement = Placement(self.topology, sharded_state=spec.parallelism == SHARDED_PARALLELISM)
        if spec.case.per_sample:
            step_fn = steps.dp_sgd_step(module, optimizer, spec.clip_norm, spec.noise_multiplier, spec.seed,
                                        expected_batch_size=spec.batch_size, mesh=placement.mesh,
                                        label_smoothing=spec.label_smoothing)
        elif spec.precision == "fp16":
            optimizer = mixed.dynamic_loss_scaling(optimizer)
            step_fn = mixed.scaled_plain_step(module, optimizer, placement.value_and_grad, spec.label_smoothing)
        else:
            step_fn = steps.plain_step(module, optimizer, placement.value_and_grad, spec.label_smoothing)
        # The shape every step takes: B, or under Poisson sampling the padded size (sampling.compiled_batch_size).
        global_batch = compiled_batch_size(spec, len(data.x_train)) if spec.sampling == "poisson" else spec.batch_size
        local = global_batch // self.topology.world_size
        sample = (data.x_train[:local], data.y_train[:local])
        ops = JaxOps(spec.model, module, variables, optimizer, step_fn, sample, placement,
                     donate=spec.knob("donate_state"))
        for metric, seconds in ops.compile_times.items():
            rows.add(metric, seconds, "s")
        return ops

    def per_sample_ops(self, spec: JobSpec, ops: JaxOps) -> JaxPerSampleOps:
        return JaxPerSampleOps(spec.model, ops.module, ops.placement.local_copy(ops.params), spec.clip_norm,
                               self.device, spec.label_smoothing)

    def trace(self, folder: Path):
        return jax_trace(folder)

    def matmul(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return np.asarray(jnp.matmul(jax.device_put(a, self.device), jax.device_put(b, self.device)))

    def reset_device_memory(self) -> None:
        """Nothing to do: JAX cannot reset its peak statistics, which is why each cell has its own process."""

    def finish(self) -> None:
        """Nothing to release: jax.distributed shuts down with the process."""

    def add_device_memory(self, rows: ResultRows) -> None:
        # This process ran one cell only, so the peak belongs to it: JAX cannot reset its peak statistics.
        stats = self.device.memory_stats()  # None on CPU, where XLA keeps no allocator statistics
        if stats and "peak_bytes_in_use" in stats:
            # Preallocation only reserves the pool; peak_bytes_in_use counts what was allocated from it. The
            # setting is recorded anyway (also in environment_variables): the rendered scripts turn it off.
            setting = os.environ.get("XLA_PYTHON_CLIENT_PREALLOCATE", "not set (JAX preallocates)")
            rows.add("peak_device_memory_allocated", stats["peak_bytes_in_use"], "bytes",
                     note=f"jax Device.memory_stats()['peak_bytes_in_use'], process lifetime (one cell per "
                          f"process); XLA_PYTHON_CLIENT_PREALLOCATE={setting}")
        else:
            rows.add_unavailable("peak_device_memory_allocated", "bytes",
                                 f"XLA keeps no allocator statistics on {self.device.platform} "
                                 "(host memory: peak_host_rss)")


if __name__ == "__main__":
    sys.exit(main(JaxBackend()))
