"""Entry point on the compute node: `python -m jax_backend.run SPEC.json`."""

from __future__ import annotations

import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax

from bench_contract.data import Dataset
from bench_contract.inference import INFERENCE_USE_CASE, precision_policy, run_inference
from bench_contract.results import ResultRows
from bench_contract.runner import DeviceSetup, main
from bench_contract.spec import JobSpec
from bench_contract.training import run_training
from jax_backend import models
from jax_backend.inference import JaxInference

# The words recorded for each precision policy live in bench_contract.inference.PRECISION_POLICIES, one
# table for both backends, so rows compare like with like.


class JaxOps:
    """Holds the training state; the step itself is a pure function compiled ahead of time."""

    def __init__(self, module, variables, optimizer, sample_batch) -> None:
        self.module = module
        self.params = variables["params"]
        self.opt_state = optimizer.init(self.params)

        def loss_fn(params, x, y):
            logits = module.apply({"params": params}, x)
            return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()

        def train_step(params, opt_state, x, y):
            loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
            updates, opt_state = optimizer.update(grads, opt_state, params)
            return optax.apply_updates(params, updates), opt_state, loss

        # Donating params and optimizer state lets XLA update them in place, as PyTorch's optimizer does.
        jitted = jax.jit(train_step, donate_argnums=(0, 1))
        start = time.perf_counter()
        lowered = jitted.lower(self.params, self.opt_state, *sample_batch)
        self.lowering_time_s = time.perf_counter() - start
        start = time.perf_counter()
        self.step_fn = lowered.compile()
        self.compile_time_s = time.perf_counter() - start
        self.predict_fn = jax.jit(lambda params, x: jnp.argmax(module.apply({"params": params}, x), axis=-1))

    def to_device(self, x: np.ndarray, y: np.ndarray):
        return jax.block_until_ready((jax.device_put(x), jax.device_put(y)))

    def train_step(self, batch):
        self.params, self.opt_state, loss = self.step_fn(self.params, self.opt_state, *batch)
        return loss

    def synchronize(self, out) -> None:
        # JAX dispatches asynchronously: the step is done only when its outputs are ready.
        jax.block_until_ready((out, self.params))

    def loss_value(self, out) -> float:
        return float(out)

    def predict(self, x: np.ndarray) -> np.ndarray:
        return np.asarray(self.predict_fn(self.params, x))


class JaxBackend:
    framework = "jax"
    libraries = ["jax", "jaxlib", "flax", "optax"]
    implemented_use_cases = (1, INFERENCE_USE_CASE)

    def prepare(self, spec: JobSpec) -> DeviceSetup:
        policy = precision_policy("jax", spec.precision, spec.use_case)
        if spec.device == "cpu":
            jax.config.update("jax_platforms", "cpu")
        # XLA's default on GPU is TF32-like reduced precision for float32 matmuls; fp32 means fp32 on both sides.
        jax.config.update("jax_default_matmul_precision", "highest")
        devices = jax.devices()
        kind = "gpu" if devices[0].platform == "gpu" else "cpu"
        if spec.device == "gpu" and kind != "gpu":
            raise RuntimeError(f"device 'gpu' was asked for, but JAX sees only {devices[0].platform} devices")
        self.device = devices[0]
        return DeviceSetup(
            kind=kind,
            count=len(devices) if kind == "gpu" else 1,
            framework_version=jax.__version__,
            precision_policy=policy,
        )

    def param_specs(self, model, sample_shape, num_classes, variant):
        return models.param_specs(model, sample_shape, num_classes, variant)

    def inference_ops(self, spec, weights, sample_shape, num_classes) -> JaxInference:
        return JaxInference(spec.model, spec.model_variant, weights, sample_shape, num_classes, self.device,
                            dtype=jnp.bfloat16 if spec.precision == "bf16" else jnp.float32)

    def run(self, spec: JobSpec, data: Dataset, weights: dict[str, np.ndarray], rows: ResultRows) -> None:
        if spec.use_case == INFERENCE_USE_CASE:
            ops = self.inference_ops(spec, weights, data.sample_shape, data.num_classes)
            run_inference(spec, data.x_train, ops, rows)
            self.add_device_memory(rows)
            return
        module, variables = models.build(spec.model, weights, data.num_classes)
        rows.add("parameter_count", sum(p.size for p in jax.tree_util.tree_leaves(variables["params"])), "parameters")
        if spec.optimizer != "sgd":
            raise ValueError(f"optimizer {spec.optimizer!r} is not implemented in the jax backend (only sgd)")
        sample = (data.x_train[: spec.batch_size], data.y_train[: spec.batch_size])
        ops = JaxOps(module, variables, optax.sgd(spec.learning_rate), sample)
        rows.add("lowering_time", ops.lowering_time_s, "s")
        rows.add("compile_time", ops.compile_time_s, "s")
        run_training(spec, data, ops, rows)
        self.add_device_memory(rows)

    def add_device_memory(self, rows: ResultRows) -> None:
        # This process ran one cell only, so the peak belongs to it: JAX cannot reset its peak statistics.
        stats = self.device.memory_stats()  # None on CPU, where XLA keeps no allocator statistics
        if stats and "peak_bytes_in_use" in stats:
            rows.add("peak_device_memory_allocated", stats["peak_bytes_in_use"], "bytes")


if __name__ == "__main__":
    sys.exit(main(JaxBackend()))
