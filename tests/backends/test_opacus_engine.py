"""PyTorch's Opacus engine (--dp-engine opacus) against its torch.func engine, in the PyTorch environment:

- on the same weights and batch, Opacus's sum of clipped per-example gradients equals torch.func's, in both of
  the grad_sample_modes the engine runs (expanded weights for the ResNet, hooks for the ViT), and so does one
  whole DP-SGD update with noise (the same generator seed), while the examples are really clipped;
- Opacus's hooks are off outside its own step: the per-example loop after it leaves no grad_sample behind;
- a use-case-3 run with the Opacus engine takes the same steps as the torch.func run without noise, and its rows
  name the engine, its mode and Opacus's version; so does use case 4 with Opacus on two processes (the clipped sums
  all-reduced by DPSGDUpdate), against the same one-process run.
"""

import json

import numpy as np
import pandas as pd
import pytest
from helpers import REPO_ROOT, prefixed, run_in_env
from test_backends import make_spec, run_backend
from test_parallel_training_options import run_ranks

from bench_contract import results
from bench_contract.model_registry import MODELS as REGISTERED

CLIP_NORM = 0.5  # well below the probe batch's gradient norms: every example is clipped
PROBE_BATCH = 8
PROCESSES = 2  # use case 4's run
MODELS = [("cifar10", "resnet18_gn"), ("imagenet", "vit_b_16")]
# The probe computes in float64 (opacus_probe.py says why: ReLU kinks). The engines sum a convolution's or a
# matmul's K <= 3 * 3 * 256 = 2304 products in different orders: at most K * u = 2304 * 1.1e-16 ~ 3e-13 of the
# terms' magnitude per layer, ~1e-11 through the ~20 layers of a gradient's path. ENGINE_TOLERANCE, 1e-9 of each
# tensor's largest entry, is 100x that; an engine that skipped clipping or one example, or hooks left on in the
# loop, move them by percents. Measured on AMD EPYC: 2.4e-15.
ENGINE_TOLERANCE = 1e-9


def assert_close(actual: dict, expected: dict, what: str) -> None:
    for name, value in expected.items():
        np.testing.assert_allclose(actual[name], value, rtol=0, atol=ENGINE_TOLERANCE * np.abs(value).max(),
                                   err_msg=f"{what} {name}")


@pytest.fixture(scope="module", params=MODELS, ids=[model for _, model in MODELS])
def opacus_run(request, tmp_path_factory):
    benchmark, model = request.param
    path = tmp_path_factory.mktemp("opacus") / f"{model}.npz"
    proc = run_in_env("torch", str(REPO_ROOT / "tests" / "backends" / "opacus_probe.py"), benchmark, model, str(path),
                      str(PROBE_BATCH), str(CLIP_NORM))
    assert proc.returncode == 0, proc.stderr[-3000:]
    with np.load(path) as f:
        return model, {k: f[k] for k in f.files}


def test_opacus_clipped_sum_and_update_equal_torch_func(opacus_run):
    model, arrays = opacus_run
    assert (arrays["norms"] > CLIP_NORM).all(), "every example must be clipped, or clipping is not compared"
    torchfunc, opacus = prefixed(arrays, "torchfunc"), prefixed(arrays, "opacus")
    assert torchfunc.keys() == opacus.keys() and torchfunc
    assert_close(opacus, torchfunc, model)
    assert float(arrays["loss/opacus"]) == pytest.approx(float(arrays["loss/torchfunc"]), rel=ENGINE_TOLERANCE)
    assert_close(prefixed(arrays, "step_opacus"), prefixed(arrays, "step_torchfunc"),
                 f"{model} after one noised update:")


def test_opacus_hooks_stay_out_of_the_per_example_loop(opacus_run):
    model, arrays = opacus_run
    assert not arrays["loop_left_grad_samples"].any(), f"{model}: the loop ran Opacus's per-sample hooks"
    assert_close(prefixed(arrays, "after_step_loop"), prefixed(arrays, "loop"), model)


def task_context(path):
    """A task file's context columns (its first row, widened as collect reads it)."""
    return results.read_task_table(path).slice(0, 1).to_pylist()[0]


def digits_dp_spec(tmp_path, name, **overrides):
    """Digits' MLP, one epoch of DP-SGD without noise at global batch 32, few timed repeats."""
    values = {"use_case": 3, "epochs": 1, "noise_multiplier": 0.0, "clip_norm": CLIP_NORM, "timed_steps": 2,
              "min_duration_s": 0.0, "warmup_steps": 1, "loop_batch_size": 4, "cell_id": f"torch-{name}",
              "results_path": str(tmp_path / f"{name}.parquet")} | overrides
    return make_spec("torch", tmp_path, **values)


def losses_of(path):
    df = pd.read_parquet(path)
    return df[df.metric == "train_loss"].sort_values("step")["value"].to_numpy()


@pytest.fixture(scope="module")
def digits_runs(tmp_path_factory):
    """Result paths: torch.func and Opacus on one process (use case 3), Opacus on two (use case 4)."""
    tmp_path = tmp_path_factory.mktemp("opacus_runs")
    paths = {}
    for engine in ("torchfunc", "opacus"):
        spec = digits_dp_spec(tmp_path, engine, dp_engine=engine)
        proc = run_backend("torch", spec, tmp_path)
        assert proc.returncode == 0, proc.stderr
        paths[engine] = spec.results_path
    spec = digits_dp_spec(tmp_path, "opacus_uc4", dp_engine="opacus", use_case=4, tasks_per_node=PROCESSES)
    spec_path = tmp_path / "uc4.json"
    spec_path.write_text(spec.to_json())
    for proc in run_ranks("torch", spec_path, job_id=4600, world=PROCESSES):
        assert proc.returncode == 0, proc.stderr
    paths["opacus_uc4"] = spec.results_path
    return paths


def test_use_case_4_with_opacus_on_two_processes_takes_the_one_process_steps(digits_runs):
    two = losses_of(digits_runs["opacus_uc4"])
    assert len(two) == 1257 // 32
    np.testing.assert_allclose(two, losses_of(digits_runs["torchfunc"]), rtol=1e-5)
    assert task_context(digits_runs["opacus_uc4"])["dp_engine"] == "opacus"


def test_a_use_case_3_run_with_opacus_takes_torch_funcs_steps_and_names_its_engine(digits_runs):
    frames = {e: pd.read_parquet(digits_runs[e]) for e in ("torchfunc", "opacus")}
    contexts = {e: task_context(digits_runs[e]) for e in frames}
    np.testing.assert_allclose(losses_of(digits_runs["opacus"]), losses_of(digits_runs["torchfunc"]), rtol=1e-5)
    opacus = contexts["opacus"]
    assert opacus["dp_engine"] == "opacus"
    assert opacus["dp_engine_mode"] == f"GradSampleModule, grad_sample_mode={REGISTERED['mlp'].opacus}"
    assert contexts["torchfunc"]["dp_engine"] == "torchfunc"
    assert "opacus" in json.loads(opacus["library_versions"])
    assert (frames["opacus"].metric == "vectorization_speedup").any()
