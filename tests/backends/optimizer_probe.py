"""Run inside one framework's environment: STEPS training steps of the MNIST MLP from the shared initial weights,
once for every optimizer and schedule in CASES, each built by the backend's own build_optimizer from a spec.

    python tests/backends/optimizer_probe.py {jax|torch} WEIGHTS.npz OUT.npz

The first framework to run writes the shared weights file and the second reads it, as the backends do. OUT.npz
holds, per case, the losses of the STEPS steps (`<case>/losses`), the final parameters in PyTorch's names
and layout (`<case>/<parameter>`), and `<case>/fixed`: a vector after STEPS updates by the same given gradients
in both frameworks, which compares the update formulas alone, without the training's feedback. The training
steps run in float64, the fixed updates in float32 (tests/backends/test_optimizers.py says why).
"""

from __future__ import annotations

import sys

import numpy as np

from bench_contract.data.loading import synthetic_dataset
from bench_contract.models.weights import load_or_create
from bench_contract.spec import JobSpec

BENCHMARK, MODEL, BATCH, STEPS = "mnist", "mlp", 32, 20
# The schedule's warm-up and decay end inside the 20 steps, so its last steps run at rate 0.
SCHEDULE = {"lr_schedule": "warmup_cosine", "lr_warmup_steps": 5, "lr_decay_steps": 10}
CASES = {
    "sgd": {"optimizer": "sgd", "learning_rate": 0.1},
    "sgd_cosine_l2": {"optimizer": "sgd", "learning_rate": 0.1, "weight_decay": 0.01, **SCHEDULE},
    "momentum": {"optimizer": "momentum", "learning_rate": 0.05, "momentum": 0.9},
    "momentum_cosine": {"optimizer": "momentum", "learning_rate": 0.05, "momentum": 0.9, **SCHEDULE},
    "nesterov_l2": {"optimizer": "momentum", "learning_rate": 0.05, "nesterov": True, "weight_decay": 0.01},
    "nesterov_cosine": {"optimizer": "momentum", "learning_rate": 0.05, "nesterov": True, **SCHEDULE},
    "adam": {"optimizer": "adam", "learning_rate": 0.001},
    "adam_cosine_l2": {"optimizer": "adam", "learning_rate": 0.001, "weight_decay": 0.01, **SCHEDULE},
    "adamw": {"optimizer": "adamw", "learning_rate": 0.001, "weight_decay": 0.1},
    "adamw_cosine": {"optimizer": "adamw", "learning_rate": 0.001, "weight_decay": 0.1, **SCHEDULE},
}


def case_spec(framework: str, case: str) -> JobSpec:
    return JobSpec(campaign="probe", cell_id=case, pair_key=case, framework=framework, benchmark=BENCHMARK,
                   use_case=1, model=MODEL, batch_size=BATCH, precision="fp32", **CASES[case])


def fixed_gradients() -> tuple[np.ndarray, np.ndarray]:
    """A starting vector and STEPS gradients for it, of sizes from 1e-6 to 1 (Adam's eps matters at the low end)."""
    rng = np.random.default_rng(0)
    start = rng.normal(size=1000).astype(np.float32)
    grads = (rng.normal(size=(STEPS, 1000)) * np.logspace(-6, 0, 1000)).astype(np.float32)
    return start, grads


def jax_fixed(optimizer) -> np.ndarray:
    import optax

    start, grads = fixed_gradients()
    params = start
    state = optimizer.init(params)
    for grad in grads:
        updates, state = optimizer.update(grad, state, params)
        params = optax.apply_updates(params, updates)
    return np.asarray(params)


def torch_fixed(spec: JobSpec) -> np.ndarray:
    import torch

    from torch_backend.optim import build_optimizer

    start, grads = fixed_gradients()
    param = torch.nn.Parameter(torch.from_numpy(start))
    optimizer = build_optimizer([param], spec)
    for grad in grads:
        param.grad = torch.from_numpy(grad)
        optimizer.step()
    return param.detach().numpy().copy()


def jax_probe(weights_path, x, y):
    import jax
    from flax import traverse_util

    from jax_backend import layout, models, steps
    from jax_backend.optim import build_optimizer

    jax.config.update("jax_default_matmul_precision", "highest")
    jax.config.update("jax_enable_x64", True)
    x = x.astype(np.float64)
    weights, _ = load_or_create(weights_path, models.param_specs(MODEL, x.shape[2:], 10, "full"), seed=0)
    results = {}
    for case in CASES:
        module, variables = models.build_with_variables(MODEL, weights, x.shape[2:], 10, "full")
        optimizer = build_optimizer(case_spec("jax", case))
        step = jax.jit(steps.plain_step(module, optimizer))
        params = jax.tree.map(lambda p: jax.numpy.asarray(p, jax.numpy.float64), variables["params"])
        stats, opt_state, k = {}, optimizer.init(params), 0
        losses = []
        for i in range(STEPS):
            params, stats, opt_state, k, loss = step(params, stats, opt_state, k, x[i], y[i])
            losses.append(float(loss))
        flat = traverse_util.flatten_dict({"params": params})
        state = {layout.torch_name(key): layout.to_torch_layout(key[-1], np.asarray(v)) for key, v in flat.items()}
        results[case] = (losses, {**state, "fixed": jax_fixed(build_optimizer(case_spec("jax", case)))})
    return results


def torch_probe(weights_path, x, y):
    import torch
    import torch.nn.functional as F

    from torch_backend import models
    from torch_backend.optim import build_optimizer

    torch.set_float32_matmul_precision("highest")
    results = {}
    for case in CASES:
        model = models.build(MODEL, x.shape[2:], 10, "full")
        weights, _ = load_or_create(weights_path, models.param_specs(model), seed=0)
        models.load_shared_weights(model, weights)
        model.double()
        optimizer = build_optimizer(model.parameters(), case_spec("torch", case))
        losses = []
        for i in range(STEPS):
            optimizer.zero_grad(set_to_none=True)
            loss = F.cross_entropy(model(torch.from_numpy(x[i]).double()), torch.from_numpy(y[i]).long())
            loss.backward()
            optimizer.step()
            losses.append(float(loss.detach()))
        state = {n: t.detach().numpy().copy() for n, t in model.state_dict().items()}
        results[case] = (losses, {**state, "fixed": torch_fixed(case_spec("torch", case))})
    return results


def main() -> None:
    framework, weights_path, out = sys.argv[1:4]
    data = synthetic_dataset(BENCHMARK, 2 * BATCH * STEPS)  # the training split is a part of the samples
    x = data.x_train[: BATCH * STEPS].reshape(STEPS, BATCH, *data.sample_shape)
    y = data.y_train[: BATCH * STEPS].reshape(STEPS, BATCH)
    results = (jax_probe if framework == "jax" else torch_probe)(weights_path, x, y)
    arrays = {}
    for case, (losses, state) in results.items():
        arrays[f"{case}/losses"] = np.array(losses)
        arrays.update({f"{case}/{name}": value for name, value in state.items()})
    np.savez(out, **arrays)


if __name__ == "__main__":
    main()
