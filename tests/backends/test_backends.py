"""Each backend in its own environment, on real data: the two sides are the same network, trained the same way."""

import json
import os
import signal
import subprocess
from pathlib import Path

import numpy as np
import pytest
from helpers import BRIEF_TIMING, REPO_ROOT, curve, env_python, metric, run_in_env, wait_until, write_mnist_folder

from bench_contract.measure.device import cpu_model
from bench_contract.results import read_task_table
from bench_contract.run.failure import failure_path, read_failure
from bench_contract.run.precision import DTYPE_NAMES, precision_policy
from bench_contract.spec import INFERENCE_USE_CASE, JobSpec

FRAMEWORKS = ("jax", "torch")


def run_backend(framework: str, spec: JobSpec, tmp_path: Path,
                env: dict | None = None) -> subprocess.CompletedProcess:
    """The backend's run of `spec` in its own environment; `env` adds to this process's environment."""
    path = tmp_path / f"{framework}.json"
    path.write_text(spec.to_json())
    return run_in_env(framework, "-m", f"{framework}_backend.run", str(path), env=env, cwd=Path.cwd())


def make_spec(framework: str, tmp_path: Path, **overrides) -> JobSpec:
    """A digits MLP cell of use case 1, with `overrides`. Its repeated measurements are brief (BRIEF_TIMING):
    these tests check what a run records and computes; the timing rules have their own tests."""
    values = dict(campaign="test", cell_id=f"{framework}-cell", pair_key="cell", framework=framework,
                  benchmark="digits", use_case=1, model="mlp", batch_size=32, precision="fp32", epochs=2,
                  warmup_steps=3, device="cpu", results_path=str(tmp_path / f"{framework}.parquet"),
                  init_weights_path=str(tmp_path / "init.npz"), **BRIEF_TIMING)
    values.update(overrides)
    return JobSpec(**values)


@pytest.fixture(scope="module")
def first_runs(tmp_path_factory):
    """One short digits run per framework from the same initial weights file. JAX compiles its step from source, as
    in a user's first run: the suite's persistent compilation cache (tests/cluster_run.py) is off, so that the
    compile time apart from the steps is a real compilation's."""
    tmp_path = tmp_path_factory.mktemp("both")
    frames = {}
    for framework in FRAMEWORKS:
        proc = run_backend(framework, make_spec(framework, tmp_path, warmup_steps=0), tmp_path,
                           env={"JAX_ENABLE_COMPILATION_CACHE": "false"})
        assert proc.returncode == 0, proc.stderr
        frames[framework] = read_task_table(tmp_path / f"{framework}.parquet").to_pandas()
    return frames


def test_same_weights_same_data_same_losses(first_runs):
    """Identical initial weights and batch order: the two loss curves coincide step by step."""
    losses = {fw: curve(df) for fw, df in first_runs.items()}
    assert len(losses["jax"]) == len(losses["torch"]) == 2 * (1257 // 32)
    assert losses["jax"][0] == pytest.approx(losses["torch"][0], rel=1e-5)
    np.testing.assert_allclose(losses["jax"], losses["torch"], rtol=1e-3)
    assert losses["jax"][-1] < losses["jax"][0]  # and it learns
    assert first_runs["jax"].init_weights_sha256.iloc[0] == first_runs["torch"].init_weights_sha256.iloc[0]


def test_same_architecture(first_runs):
    expected = (64 * 512 + 512) + (512 * 512 + 512) + (512 * 10 + 10)
    assert metric(first_runs["jax"], "parameter_count") == metric(first_runs["torch"], "parameter_count") == expected


def test_jax_compile_time_is_measured_apart_from_the_steps(first_runs):
    """With no warm-up at all, the first timed step must not contain the compilation.

    Step 0 is where a lazy compilation would land; a percentile over 78 steps would hide it, so step 0 is read
    by itself. Compiling inside it would take about compile_time (the same program), and its first call's own
    one-off costs are a small part of that (37 ms against 265 ms here); no compilation is counted in any
    timed step either."""
    df = first_runs["jax"]
    compile_s = metric(df, "compile_time")
    # Tracing and lowering are part of it, as Dynamo's tracing is of PyTorch's: XLA's
    # compilation alone left out about a fifth of the MLP's.
    assert metric(df, "lowering_time") > 0 and metric(df, "xla_compile_time") > 0
    assert compile_s == metric(df, "lowering_time") + metric(df, "xla_compile_time")
    first_step_s = df[(df.metric == "step_time") & (df.step == 0)]["value"].item() / 1e3
    assert first_step_s < compile_s / 2, (first_step_s, compile_s)
    assert metric(df, "recompilations_timed") == 0
    assert metric(df, "timed_steps") == 2 * (1257 // 32)


def test_rows_carry_their_provenance(first_runs):
    for framework, df in first_runs.items():
        first = df.iloc[0]
        assert first.device_kind == "cpu" and first.device_model == cpu_model()
        assert first.framework == framework and first.hostname and first.python_version
        versions = json.loads(first.library_versions)
        assert framework in versions and "numpy" in versions
        # torch reports its build too ("2.14.1+cu130"); the distribution version is the part before "+"
        assert first.framework_version.split("+")[0] == versions[framework]
        assert first.data_source == "real"
        assert (df.campaign == "test").all() and (df.cell_id == f"{framework}-cell").all()
    assert first_runs["jax"].precision_policy.iloc[0] == first_runs["torch"].precision_policy.iloc[0]


def test_metrics_are_sane(first_runs):
    for df in first_runs.values():
        assert metric(df, "throughput") > 0
        assert 0 < metric(df, "step_time_p50") <= metric(df, "step_time_p99")
        assert metric(df, "peak_host_rss") > 50e6
        val = df[df.metric == "val_accuracy"].sort_values("epoch")
        assert list(val.epoch) == [0, 1]
        assert 0.1 < metric(df, "test_accuracy") <= 1.0


@pytest.mark.parametrize("framework, check", [
    ("torch", "import torch; from torch_backend.run import TorchBackend; TorchBackend().prepare(SPEC); "
              "assert torch.backends.cuda.matmul.allow_tf32 is False; assert torch.backends.cudnn.allow_tf32 is False; "
              "assert torch.get_float32_matmul_precision() == 'highest'"),
    ("jax", "import jax; from jax_backend.run import JaxBackend; JaxBackend().prepare(SPEC); "
            "assert jax.config.jax_default_matmul_precision == 'highest'"),
])
def test_fp32_means_tf32_off_in_both_frameworks(framework, check, tmp_path):
    spec_path = tmp_path / "spec.json"
    spec_path.write_text(make_spec(framework, tmp_path).to_json())
    code = f"from bench_contract.spec import JobSpec; SPEC = JobSpec.read({str(spec_path)!r}); {check}"
    proc = run_in_env(framework, "-c", code)
    assert proc.returncode == 0, proc.stderr[-3000:]


INFERENCE_DTYPES = {
    "jax": "import jax, jax.numpy as jnp; from jax_backend.inference import JaxInference as Ops; "
           "device, dtype_of, name = jax.devices()[0], lambda n: getattr(jnp, n), lambda out: out.dtype.name",
    "torch": "import torch; from torch_backend.inference import TorchInference as Ops; "
             "device, dtype_of, name = torch.device('cpu'), lambda n: getattr(torch, n), "
             "lambda out: str(out.dtype).removeprefix('torch.')",
}


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_the_half_precision_policy_says_where_the_logits_become_float32(framework):
    """The timed forward pass returns the policy's dtype; to_numpy, outside the timed steps, casts to float32 on
    the host. The recorded words must say so (they once said the logits came back as float32)."""
    code = INFERENCE_DTYPES[framework] + """
import json, numpy as np
from bench_contract.models.mlp import param_specs
from bench_contract.models.weights import make_initial_weights
from bench_contract.run.precision import DTYPE_NAMES
weights = make_initial_weights(param_specs("mlp", (64,), 10), seed=0)
seen = {}
for precision in ("bf16", "fp16"):
    ops = Ops("mlp", "full", weights, (64,), 10, device, dtype=dtype_of(DTYPE_NAMES[precision]))
    x = ops.to_device(np.ones((4, 64), np.float32))
    ops.compile(x)
    out = ops.forward(x)
    seen[precision] = [name(out), ops.to_numpy(out).dtype.name]
print(json.dumps(seen))
"""
    proc = run_in_env(framework, "-c", code)
    assert proc.returncode == 0, proc.stderr
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    for precision, (forward_dtype, host_dtype) in seen.items():
        assert forward_dtype == DTYPE_NAMES[precision] and host_dtype == "float32"
        words = precision_policy(framework, precision, INFERENCE_USE_CASE)
        assert words.endswith("logits cast to float32 on the host, outside the timed step"), words


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_a_failure_is_reported_and_writes_no_result(framework, tmp_path):
    spec = make_spec(framework, tmp_path, precision="tf32")  # on the CPU (make_spec): no TF32 there
    proc = run_backend(framework, spec, tmp_path)
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines()[-1] == (
        f"error: {framework} backend failed: precision 'tf32' cannot run here: a CPU has no TF32 arithmetic, so it "
        "would silently be float32; use fp32 on this device"
    )
    assert not Path(spec.results_path).exists()
    # The failure row says why, where the result would have been (never among the results).
    row = read_failure(failure_path(spec.results_path))
    assert row["status"] == "failed" and row["framework"] == framework
    assert row["failure_reason"].startswith("exception: ")
    assert "precision 'tf32' cannot run here" in row["failure_reason"]


def test_a_training_spec_with_channels_last_is_refused_rather_than_run_contiguous(tmp_path):
    """channels_last is built for inference only; a hand-written training spec asking for it would be recorded as
    channels_last (framework_options) and run contiguous. (torch.compile trains too.)"""
    spec = make_spec("torch", tmp_path, channels_last=True)
    proc = run_backend("torch", spec, tmp_path)
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines()[-1] == (
        "error: torch backend failed: channels_last is implemented for inference (use case 5) only, "
        "not for training (use case 1)")
    assert not Path(spec.results_path).exists()


def catches(pid: int, signum: int) -> bool:
    """Whether the process has a handler for signum (the SigCgt mask in /proc)."""
    status = Path(f"/proc/{pid}/status").read_text()
    mask = int(next(line.split()[1] for line in status.splitlines() if line.startswith("SigCgt:")), 16)
    return bool(mask & (1 << (signum - 1)))


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_a_stop_signal_while_the_framework_imports_still_leaves_a_failure_row(framework, tmp_path):
    spec = make_spec(framework, tmp_path)
    path = tmp_path / f"{framework}.json"
    path.write_text(spec.to_json())
    proc = subprocess.Popen([str(env_python(framework)), "-m", f"{framework}_backend.run", str(path)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    # The first handler is set just before the framework's import, which takes a second or more: signal then.
    wait_until(lambda: catches(proc.pid, signal.SIGTERM), proc, seconds=60, what="the backend catching SIGTERM",
               poll_s=0.005)
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 128 + signal.SIGTERM, stderr
    row = read_failure(failure_path(spec.results_path))
    assert (row["status"], row["signal"]) == ("terminated", "SIGTERM")
    assert row["failure_reason"] == "terminated by SIGTERM while importing the framework"
    assert (row["cell_id"], row["framework"]) == (spec.cell_id, framework)  # it was None: nothing said whose
    assert not Path(spec.results_path).exists()


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_synthetic_data_is_recorded_as_such(framework, tmp_path):
    spec = make_spec(framework, tmp_path, data_source="synthetic", synthetic_samples=320, epochs=1, warmup_steps=1)
    proc = run_backend(framework, spec, tmp_path)
    assert proc.returncode == 0, proc.stderr
    df = read_task_table(spec.results_path).to_pandas()
    assert (df.data_source == "synthetic").all()


def test_mnist_idx_files_are_read_the_same_by_both(tmp_path):
    """The MNIST path end to end on IDX files made here (the real files cannot be fetched on this machine)."""
    data_dir = write_mnist_folder(tmp_path / "mnist", train=5000 + 320, test=64)
    frames = {}
    for framework in FRAMEWORKS:
        spec = make_spec(framework, tmp_path, benchmark="mnist", data_dir=str(data_dir), epochs=1, warmup_steps=1,
                         batch_size=64)
        proc = run_backend(framework, spec, tmp_path)
        assert proc.returncode == 0, proc.stderr
        frames[framework] = read_task_table(spec.results_path).to_pandas()
    expected = (784 * 512 + 512) + (512 * 512 + 512) + (512 * 10 + 10)
    for df in frames.values():
        assert metric(df, "parameter_count") == expected
        assert metric(df, "timed_steps") == 320 // 64 - 1
    losses = [frames[fw][frames[fw].metric == "train_loss"].sort_values("step")["value"].to_numpy() for fw in FRAMEWORKS]
    np.testing.assert_allclose(losses[0], losses[1], rtol=1e-3)


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_a_gpu_node_where_the_framework_sees_no_gpu_is_a_failure_not_a_cpu_run(tmp_path, monkeypatch, framework):
    """--device auto with a GPU given to the task (CUDA_VISIBLE_DEVICES) and a framework that sees none used to
    measure the CPU silently, beside the other framework on the GPU. Now it is a failure row with the cause."""
    from bench_contract.run.failure import failure_path, read_failure

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    spec = make_spec(framework, tmp_path, device="auto", epochs=1)
    proc = run_backend(framework, spec, tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    title = {"jax": "JAX", "torch": "PyTorch"}[framework]
    reason = read_failure(failure_path(spec.results_path))["failure_reason"]
    assert f"{title} sees no GPU on a node with 1 GPU" in reason and "--device cpu" in reason, reason
    assert not Path(spec.results_path).exists()
