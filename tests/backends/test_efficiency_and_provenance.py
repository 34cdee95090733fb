"""Energy, MFU, device memory and provenance as the real backends record them, on this CPU-only machine."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest
from helpers import metric, run_in_env
from test_backends import FRAMEWORKS, make_spec, run_backend

from bench_contract.models.mlp import MLP_HIDDEN
from bench_contract.results import read_task_table

BATCH = 1024
INPUTS = 28 * 28


def mnist_mlp_training_flops(batch: int) -> float:
    """Matmul FLOPs of one MLP training step: forward 2BW per weight matrix, backward 4BW (input and weight
    gradients), except the first layer, whose input gradient nobody needs (both frameworks skip it)."""
    widths = [INPUTS, *MLP_HIDDEN, 10]
    weights = sum(a * b for a, b in zip(widths, widths[1:]))
    return 6 * batch * weights - 2 * batch * INPUTS * MLP_HIDDEN[0]


@pytest.fixture(scope="module")
def training_run(tmp_path_factory):
    """The MNIST-shaped MLP on synthetic data at a large batch, one short epoch, in each framework:
    (the campaign folder holding rows/<framework>/cell.parquet, the rows of each framework)."""
    tmp_path = tmp_path_factory.mktemp("mfu")
    frames = {}
    for framework in FRAMEWORKS:
        spec = make_spec(framework, tmp_path, benchmark="mnist", data_source="synthetic", synthetic_samples=6 * BATCH,
                         batch_size=BATCH, epochs=1, warmup_steps=1,
                         results_path=str(tmp_path / "camp" / "rows" / framework / "cell.parquet"))
        proc = run_backend(framework, spec, tmp_path)
        assert proc.returncode == 0, proc.stderr
        frames[framework] = read_task_table(spec.results_path).to_pandas()
    return tmp_path / "camp", frames


@pytest.fixture(scope="module")
def training(training_run):
    return training_run[1]


def note(df, name: str) -> str:
    return df.loc[df.metric == name, "note"].iloc[0]


def test_flops_per_step_agree_between_frameworks_and_with_the_analytic_count(training):
    jax_flops, torch_flops = (metric(training[fw], "flops_per_step") for fw in FRAMEWORKS)
    analytic = mnist_mlp_training_flops(BATCH)
    # Both count the matmuls only (PyTorch's FlopCounterMode; JAX the dot_generals of the traced jaxpr), 2 per
    # multiply-add: the same three weight matrices, forward and backward, with the first layer's input gradient
    # skipped by both. The bias additions, ReLU, softmax and the SGD update are counted by neither, so all three
    # are equal to the FLOP (integers far below 2**53, exact as floats). XLA's cost analysis, JAX's count before,
    # added the element-wise work (well under 1% here) and needed a tolerance.
    assert torch_flops == jax_flops == analytic
    assert "traced jaxpr" in note(training["jax"], "flops_per_step")
    assert "XLA cost analysis" in note(training["jax"], "bytes_per_step")
    assert "FlopCounterMode" in note(training["torch"], "flops_per_step")


def test_mfu_against_the_measured_cpu_matmul_peak(training):
    for framework, df in training.items():
        peak, achieved, mfu = (metric(df, m) for m in ("peak_flops", "achieved_flops", "mfu"))
        assert note(df, "peak_flops").startswith(f"measured: fastest of 5 {framework} 1024x1024 fp32 matmuls")
        assert achieved == pytest.approx(metric(df, "flops_per_step") * metric(df, "throughput") / BATCH, rel=1e-9)
        assert mfu == pytest.approx(achieved / peak, rel=1e-9)
        # Above 0: work was done. At most 1.5, not 1: the peak is one measurement of a 1024x1024 matmul on two
        # cores shared with other users, so load during the calibration can make it lower than the rate the
        # model's own matmuls (784x512x1024 and larger) reach in a quieter moment; beyond 1.5 is a bug.
        assert 0 < mfu <= 1.5, (framework, mfu, peak, achieved)


def test_every_training_cell_has_an_intensity_and_a_bound(training):
    """The roofline of the MLP step: bytes from XLA's cost analysis and from PyTorch's per-operation tensor
    sizes. Each step reads every parameter at least once, so bytes_per_step cannot be below the weights' size."""
    for framework, df in training.items():
        weights = 4 * metric(df, "parameter_count")
        assert metric(df, "bytes_per_step") >= weights, framework
        assert metric(df, "arithmetic_intensity") == pytest.approx(
            metric(df, "flops_per_step") / metric(df, "bytes_per_step"))
        assert metric(df, "peak_bandwidth") > 1e8 and "measured" in note(df, "peak_bandwidth")
        assert metric(df, "ridge_point") == pytest.approx(metric(df, "peak_flops") / metric(df, "peak_bandwidth"))
        bound = metric(df, "compute_bound")
        assert bound == float(metric(df, "arithmetic_intensity") >= metric(df, "ridge_point"))
        assert note(df, "compute_bound").startswith("compute-bound" if bound else "memory-bound")


# Alone, after the rest (make test): the CPU's peak is the best of each framework's matmul calibrations, and with the
# suite's workers on the same cores both calibrations once ran slower than JAX's timed steps (MFU 1.055,
# docs/records/2026-12-07-suite-after-clean-up.md). A benchmark job has its CPUs to itself; the check is of the
# arithmetic of one shared peak, measured as a job would measure it.
@pytest.mark.serial
def test_through_the_comparison_every_mfu_is_above_0_and_at_most_1_against_one_peak_and_bandwidth(
        training_run, tmp_path):
    """Each backend divides by its own CPU calibration, so its own MFU can pass 1 and its roofline differs
    from the other's. Collected and compared, both runs divide by one peak and one bandwidth of the device, every
    MFU lies in (0, 1], and both frameworks (bound to the same CPUs) share one comparison row."""
    from orchestrator.results.collect import merge
    from orchestrator.results.compare import comparison_frame, with_row_key, with_shared_peak, with_shared_roofline

    campaign, _ = training_run
    merged = pd.read_parquet(merge(campaign, tmp_path / "merged.parquet").output)
    compared = with_shared_roofline(with_shared_peak(with_row_key(merged)))
    summary = compared[compared.step.isna() & compared.epoch.isna()]
    mfu = summary[summary.metric == "mfu"]
    assert sorted(mfu.framework) == sorted(FRAMEWORKS)
    assert ((mfu.value > 0) & (mfu.value <= 1)).all(), mfu[["framework", "value"]]
    for name in ("peak_flops", "peak_bandwidth", "ridge_point"):
        assert summary.loc[summary.metric == name, "value"].nunique() == 1, name
    assert merged.groupby("framework").bound_cpus.first().nunique() == 1
    frame = comparison_frame(merged)
    assert len(frame) == 1
    assert 0 < frame.jax_mfu.iloc[0] <= 1 and 0 < frame.torch_mfu.iloc[0] <= 1


def test_each_backend_records_that_its_float32_matmuls_ran_in_float32(training):
    """The probe runs in the backend's own precision setup (runner.run_use_case); on a GPU with TF32 left on it
    would read about 3e-4 (tests/unit/test_matmul_probe.py), here float32's rounding, far below the bound."""
    from bench_contract.run.precision import REDUCED_MATMUL_BOUND

    for framework, df in training.items():
        assert 0 < metric(df, "float32_matmul_error") < REDUCED_MATMUL_BOUND / 10, framework
        assert "against float64: float32" in note(df, "float32_matmul_error")


def test_on_cpu_energy_and_device_memory_are_not_available_with_a_reason(training):
    for df in training.values():
        for name in ("energy_timed", "energy_window_time", "energy_per_sample", "samples_per_joule",
                     "peak_device_memory_allocated"):
            row = df[df.metric == name]
            assert len(row) == 1 and math.isnan(row.value.iloc[0]), name  # null, not 0
            assert row.note.iloc[0].startswith("not available: "), row.note.iloc[0]
    assert "ran on the CPU" in note(training["jax"], "energy_timed")
    assert "no CUDA allocator" in note(training["torch"], "peak_device_memory_reserved")


# Columns where the empty string is a defined value, not an unknown one.
EMPTY_IS_A_VALUE = {"pair_order": "the run was not paired", "system": "the campaign named no system (--systems)",
                    "dp_engine": "no DP-SGD outside use cases 3 and 4", "dp_engine_mode": "likewise",
                    "trial_rule": "a fixed number of trials (not --trials auto)",
                    "attention_kernel": "a model without fused attention (only the language model has one)"}
PROVENANCE_JSON = ("device_details", "library_versions", "environment_variables", "framework_options", "node_state")


def unfilled(value, path="") -> list[str]:
    """Paths of empty values in a JSON document (a value that is not known must say "not available: ...")."""
    if isinstance(value, dict):
        return [p for key, v in value.items() for p in unfilled(v, f"{path}.{key}")]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in unfilled(v, f"{path}[{i}]")]
    return [path] if value is None or value == "" else []


def test_every_collected_row_has_its_provenance_filled_or_not_available(training_run, tmp_path):
    from bench_contract.results import CONTEXT_FIELDS
    from orchestrator.results.collect import merge

    campaign, _ = training_run
    merged = pd.read_parquet(merge(campaign, tmp_path / "merged.parquet").output)
    assert set(merged.framework) == set(FRAMEWORKS)
    for field in CONTEXT_FIELDS:
        column = merged[field.name]
        assert column.notna().all(), field.name
        if field.type == "string" and field.name not in EMPTY_IS_A_VALUE:
            assert (column.str.len() > 0).all(), f"{field.name} is empty on some rows"
    for name in PROVENANCE_JSON:
        for text in merged[name].unique():
            assert not unfilled(json.loads(text)), (name, text)
    versions = json.loads(merged.loc[merged.framework == "torch", "library_versions"].iloc[0])
    assert {"cuda", "cudnn", "nccl", "torch"} <= set(versions)
    versions = json.loads(merged.loc[merged.framework == "jax", "library_versions"].iloc[0])
    assert {"cuda", "cudnn", "nccl", "jaxlib"} <= set(versions)
    assert merged.packages_sha256.str.fullmatch(r"[0-9a-f]{64}").all()
    # Two environments, two package lists.
    assert merged.groupby("framework").packages_sha256.first().nunique() == 2


def test_an_environment_built_from_its_lock_records_the_locks_packages_sha256(training_run):
    """The rows' packages_sha256 is the lock's, so a reader can tell which lock built the environment. (The
    environments here are built by `make setup` from the checked-in locks, with the default JAX recipe.)"""
    from orchestrator.run import locks

    _, frames = training_run
    recorded = {framework: rows.packages_sha256.iloc[0] for framework, rows in frames.items()}
    assert recorded == {"jax": locks.JAX["cpu"].packages_sha256(), "torch": locks.TORCH.packages_sha256()}


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_inference_flops_and_mfu(framework, tmp_path):
    spec = make_spec(framework, tmp_path, benchmark="mnist", use_case=5, data_source="synthetic", batch_size=256,
                     epochs=1, warmup_steps=2, timed_steps=10)
    proc = run_backend(framework, spec, tmp_path)
    assert proc.returncode == 0, proc.stderr
    df = read_task_table(spec.results_path).to_pandas()
    widths = [INPUTS, *MLP_HIDDEN, 10]
    forward = 2 * 256 * sum(a * b for a, b in zip(widths, widths[1:]))
    assert metric(df, "flops_per_step") == forward  # the matmuls only, in both (see the training test above)
    assert 0 < metric(df, "mfu") <= 1.5
    assert math.isnan(metric(df, "energy_per_sample"))


def test_the_profiles_xla_flags_reach_xla_and_are_recorded(tmp_path):
    """A spec's XLA flags are in force when JAX starts (here: three host devices instead of one)."""
    import os
    import subprocess

    from helpers import REPO_ROOT, env_python

    spec = make_spec("jax", tmp_path, xla_flags="--xla_force_host_platform_device_count=3")
    spec_path = tmp_path / "spec.json"
    spec_path.write_text(spec.to_json())
    code = ("import os, jax; from bench_contract.spec import JobSpec; from jax_backend.run import JaxBackend; "
            f"JaxBackend().prepare(JobSpec.read({str(spec_path)!r})); "
            "assert len(jax.devices()) == 3, jax.devices(); print(os.environ['XLA_FLAGS'])")
    env = {key: value for key, value in os.environ.items() if key != "XLA_FLAGS"}
    proc = subprocess.run([str(env_python("jax")), "-c", code], capture_output=True, text=True, cwd=REPO_ROOT,
                          env={**env, "PYTHONPATH": str(REPO_ROOT)})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "--xla_force_host_platform_device_count=3"
    proc = run_backend("jax", make_spec("jax", tmp_path, xla_flags="--xla_cpu_enable_fast_math=false", epochs=1),
                       tmp_path)
    assert proc.returncode == 0, proc.stderr
    df = read_task_table(tmp_path / "jax.parquet").to_pandas()
    assert (df.xla_flags.str.endswith("--xla_cpu_enable_fast_math=false")).all()
    assert "--xla_cpu_enable_fast_math=false" in json.loads(df.environment_variables.iloc[0])["XLA_FLAGS"]


def test_the_flops_of_a_sharded_step_count_every_device(tmp_path):
    """A sharded step's FLOPs are the whole step's. The jaxpr of a jit-sharded step has the global shapes, so its
    count is the unsharded step's; a shard_map body (DP-SGD's sharded_clipped_sums) is one device's shard, counted
    times its mesh's devices. XLA analyses the per-device program (a batch-sharded step over 2 devices reports half
    the FLOPs), so the bytes taken from it, and its own FLOPs, are multiplied by the device count."""
    import subprocess

    from helpers import REPO_ROOT, env_python

    code = """
import os
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"
import jax, jax.numpy as jnp, numpy as np, optax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
from jax_backend import flops, models, steps
from jax_backend.efficiency import traced_flops, xla_flops
grad = jax.grad(lambda w, x: jnp.sum((x @ w) ** 2))
w, x = jnp.ones((784, 512)), jnp.ones((1024, 784))
single = jax.jit(grad).trace(w, x)
compiled = single.lower().compile()
one, xla_one = traced_flops(single.jaxpr, compiled), xla_flops(compiled)
mesh = Mesh(np.array(jax.devices()), ("data",))
r, s = NamedSharding(mesh, P()), NamedSharding(mesh, P("data"))
sharded = jax.jit(grad, in_shardings=(r, s), out_shardings=r).trace(w, jax.device_put(x, s))
compiled = sharded.lower().compile()
two, xla_two = traced_flops(sharded.jaxpr, compiled, 2), xla_flops(compiled, 2)
assert one.per_step == two.per_step == 2 * 2 * 1024 * 784 * 512, (one, two)  # forward and weight gradient
assert "x 2 devices" in two.bytes_method and "XLA cost analysis" in two.bytes_method
assert abs(xla_two.per_step / xla_one.per_step - 1) < 0.01, (xla_one, xla_two)
assert "x 2 devices" in xla_two.method

net, sgd = models.module("mlp", 10), optax.sgd(0.1)
params = jax.eval_shape(net.init, jax.random.PRNGKey(0), np.zeros((1, 1, 28, 28), np.float32))["params"]
args = (params, {}, jax.eval_shape(sgd.init, params), jax.ShapeDtypeStruct((), jnp.uint32),
        jax.ShapeDtypeStruct((64, 1, 28, 28), jnp.float32), jax.ShapeDtypeStruct((64,), jnp.int32))
count = lambda mesh: flops.count(jax.make_jaxpr(steps.dp_sgd_step(net, sgd, 1.0, 0.0, 0, mesh=mesh))(*args)).flops
assert count(mesh) == count(None), (count(mesh), count(None))
"""
    proc = subprocess.run([str(env_python("jax")), "-c", code], capture_output=True, text=True, cwd=REPO_ROOT,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO_ROOT)})
    assert proc.returncode == 0, proc.stderr


JAX_CUDA_VERSIONS = """
import json, types
import jax._src.lib as lib
lib.cuda_versions = types.SimpleNamespace(cuda_runtime_get_version=lambda: 13000, cudnn_get_version=lambda: 91900)
from jax_backend.efficiency import runtime_versions
print(json.dumps(runtime_versions()))
"""


def test_jax_spells_the_cuda_version_as_pytorch_does():
    """On the H200, JAX's rows said cuda "13000" and PyTorch's "13.0" for the same CUDA 13.0."""
    out = run_in_env("jax", "-c", JAX_CUDA_VERSIONS)
    assert out.returncode == 0, out.stderr[-3000:]
    versions = json.loads(out.stdout.splitlines()[-1])
    assert (versions["cuda"], versions["cudnn"]) == ("13.0", "91900")


@pytest.mark.parametrize("framework", ["jax", "torch"])
def test_variables_that_turn_tf32_on_behind_the_policy_are_cleared_and_recorded(tmp_path, framework):
    """NGC's PyTorch images set TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1; NVIDIA_TF32_OVERRIDE forces cuBLAS and cuDNN.
    Each backend clears both before its framework starts, and its rows say what it found."""
    proc = run_backend(framework, make_spec(framework, tmp_path, epochs=1), tmp_path,
                       env={"TORCH_ALLOW_TF32_CUBLAS_OVERRIDE": "1", "NVIDIA_TF32_OVERRIDE": "1"})
    assert proc.returncode == 0, proc.stderr
    df = read_task_table(tmp_path / f"{framework}.parquet").to_pandas()
    recorded = json.loads(df.environment_variables.iloc[0])
    assert recorded["TORCH_ALLOW_TF32_CUBLAS_OVERRIDE"] == recorded["NVIDIA_TF32_OVERRIDE"] == "1 (cleared)"
