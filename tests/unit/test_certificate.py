"""The comparability certificate: each comparison row says whether its two sides measured like things,
from what the runs recorded, and a row that is not comparable shows no speed-up, anywhere, only its reasons."""

import re

import pandas as pd
import pytest
from helpers import run_cli, spec, write_spec_run

from orchestrator.results.compare import comparison_frame
from orchestrator.results.views import use_case_frame, view_tables

DIGITS = "1,257/180/360 train/val/test examples, sha256 4046546367a14303"  # Dataset.fingerprint's words
VERSIONS = {"old": {"jax": "0.4.30", "torch": "2.3.0"}, "new": {"jax": "0.10.2", "torch": "2.9.1"}}


MLP_BF16 = '{"loss": ["float32"], "matmul": ["bfloat16"], "optimizer update": ["float32"]}'
LAYER_NORM_BF16 = ('{"loss": ["float32"], "matmul": ["bfloat16"], "normalisation": ["bfloat16"], '
                   '"optimizer update": ["float32"], "softmax": ["bfloat16"]}')
LAYER_NORM_FP32 = LAYER_NORM_BF16.replace('"normalisation": ["bfloat16"]', '"normalisation": ["float32"]')


def write_run(root, campaign, framework, throughput, version="0.10.2", environment="locked", xla_flags="",
              recompilations=0.0, census=MLP_BF16, data=DIGITS, commit="6feb0d7", matmul_error=1.2e-7):
    """One task's result file as a backend writes it (write_spec_run), with the software and the recompilations in
    timed steps that the run recorded. xla_flags: the spec's, as a profile gives them to JAX
    (plan.campaign.write_specs); the run records them as its XLA_FLAGS, as the JAX backend sets them."""
    run_spec = spec(framework, campaign=campaign, cell_id=f"{framework}-cell", pair_key="cell", xla_flags=xla_flags)
    recorded = {"environment_kind": environment, "precision_census": census, "data_fingerprint": data,
                "git_commit": commit, "framework_version": version, "xla_flags": xla_flags or "not set"}
    return write_spec_run(root, run_spec, throughput, context=recorded,
                          metrics={"recompilations_timed": (recompilations, "compilations"),
                                   "float32_matmul_error": (matmul_error, "relative")})


def both(root, campaign, jax=None, torch=None, jax_speed=2000, torch_speed=1000):
    """A JAX and a PyTorch run of one cell in one campaign; jax/torch: write_run's keywords for that side."""
    return [write_run(root, campaign, "jax", jax_speed, **(jax or {})),
            write_run(root, campaign, "torch", torch_speed, **(torch or {}))]


def test_runs_of_one_software_and_no_recompilation_are_comparable(tmp_path):
    frame = comparison_frame(pd.concat([*both(tmp_path, "a"), *both(tmp_path, "b")], ignore_index=True))
    assert len(frame) == 1 and frame["comparable"].iloc[0] == "yes"
    assert frame["speedup"].iloc[0] == 2.0 and frame["runs_jax_torch"].iloc[0] == "2/2"


def test_runs_of_different_framework_versions_are_pooled_only_as_not_comparable(tmp_path):
    """JAX 0.4.30 and PyTorch 2.3 (locked) in campaign a, JAX 0.10.2 and PyTorch 2.9 (site) in b once
    became one row, runs 2/2, speed-up 1.5 [1.0, 2.0], and nothing said why."""
    old = both(tmp_path, "a", {"version": "0.4.30"}, {"version": "2.3.0"}, torch_speed=1000)
    new = both(tmp_path, "b", {"version": "0.10.2", "environment": "site"}, {"version": "2.9.1", "environment": "site"},
               torch_speed=2000)
    runs = pd.concat([*old, *new], ignore_index=True)
    frame = comparison_frame(runs)
    (reasons,) = frame["comparable"]
    assert reasons == ("JAX runs of 2 versions pooled (0.10.2 site, 0.4.30 locked); "
                       "PyTorch runs of 2 versions pooled (2.3.0 locked, 2.9.1 site)")
    assert frame[["speedup", "speedup_ci_low", "speedup_ci_high"]].isna().all(axis=None)
    (table,) = view_tables(use_case_frame(runs))
    assert table.rows[0][table.headers.index("speed-up JAX/PyTorch\n[95% CI]")] == "not comparable"
    assert f"not comparable, digits mlp batch 32: {reasons}" in table.notes
    # collect, as the user runs it: no speed-up on the line, the reasons below the table.
    proc = run_cli("collect", "--results-dir", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert "not comparable, digits mlp batch 32: JAX runs of 2 versions pooled" in proc.stdout
    line = next(line for line in proc.stdout.splitlines() if line.lstrip().startswith("digits"))
    assert "not comparable" in line and re.search(r"\d\.\d+x", line) is None, line


def test_the_environment_kind_alone_splits_the_software(tmp_path):
    frame = comparison_frame(pd.concat([*both(tmp_path, "a"), *both(tmp_path, "b", torch={"environment": "site"})]))
    assert frame["comparable"].iloc[0] == "PyTorch runs of 2 versions pooled (0.10.2 locked, 0.10.2 site)"


def test_a_recompilation_inside_the_timed_steps_makes_the_row_not_comparable(tmp_path):
    frame = comparison_frame(pd.concat(both(tmp_path, "a", torch={"recompilations": 8.0})))
    assert frame["comparable"].iloc[0] == "PyTorch recompiled in its timed steps (up to 8 times in a run)"
    assert frame["speedup"].isna().all()


@pytest.mark.parametrize("metric", ["recompilations_timed", "per_sample_grads_vectorized_recompilations_timed",
                                    "per_sample_grads_loop_recompilations_timed"])
def test_a_single_recompilation_in_any_timed_steps_makes_the_side_not_comparable(metric):
    """The training or inference steps' count, and each per-sample timing's (bench_contract.run.training writes
    them): one compilation inside timed steps is one too many, and a count of 0 is none."""
    from orchestrator.results.certificate import recompiled

    side = pd.DataFrame({"metric": [metric, "throughput"], "value": [1.0, 100.0]})
    assert recompiled(side, "torch") == ["PyTorch recompiled in its timed steps (up to 1 times in a run)"]
    assert recompiled(side.assign(value=[0.0, 100.0]), "torch") == []


def test_censuses_a_table_never_recorded_are_told_apart_from_different_ones(tmp_path):
    """In this process (the named classes' test runs collect as a command): censuses that differ are named, JAX
    first, however the rows come; a side whose rows have no census column at all (NaN, a table from before the
    census) took none; and runs of one side with and without one are not pooled."""
    differing = both(tmp_path, "a", {"census": LAYER_NORM_BF16}, {"census": LAYER_NORM_FP32})
    frame = comparison_frame(pd.concat(differing[::-1], ignore_index=True))
    assert frame["comparable"].iloc[0] == "normalisation bfloat16 in JAX, float32 in PyTorch"
    jax, torch = both(tmp_path, "b")
    frame = comparison_frame(pd.concat([jax, torch.drop(columns="precision_census")], ignore_index=True))
    assert frame["comparable"].iloc[0] == "no precision census from PyTorch"
    unrecorded = [run.drop(columns="precision_census") for run in both(tmp_path, "c")]
    frame = comparison_frame(pd.concat([jax, torch, *unrecorded], ignore_index=True))
    assert frame["comparable"].iloc[0] == "JAX runs of 2 precision censuses pooled; PyTorch runs of 2 precision " \
                                          "censuses pooled"


def test_jax_runs_with_and_without_xla_flags_recorded_are_not_pooled_and_every_flag_is_said(tmp_path):
    flagged = both(tmp_path, "a", {"xla_flags": "--xla_a=1"})
    unrecorded = [run.drop(columns="xla_flags") for run in both(tmp_path, "b")]
    frame = comparison_frame(pd.concat([*flagged, *unrecorded], ignore_index=True))
    assert frame["comparable"].iloc[0] == "JAX runs with different XLA_FLAGS pooled ('', '--xla_a=1')"
    frame = comparison_frame(pd.concat([*flagged, *both(tmp_path, "c", {"xla_flags": "--xla_b=2"})]))
    assert frame["tuning"].iloc[0] == "JAX XLA_FLAGS --xla_a=1 | --xla_b=2"


def test_xla_flags_of_a_profile_never_split_the_pair_and_are_shown_beside_it(tmp_path):
    """A profile's per-model xla_flags reach the JAX specs only, and as a measured setting they once
    split the cell into two rows, runs 1/0 and 0/1, with no speed-up at all."""
    flags = "--xla_cpu_enable_fast_math=false"
    frame = comparison_frame(pd.concat(both(tmp_path, "a", {"xla_flags": flags}), ignore_index=True))
    assert len(frame) == 1 and frame["runs_jax_torch"].iloc[0] == "1/1" and frame["speedup"].iloc[0] == 2.0
    assert frame["comparable"].iloc[0] == "yes" and frame["tuning"].iloc[0] == f"JAX XLA_FLAGS {flags}"
    proc = run_cli("collect", "--results-dir", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert f"tuning, digits mlp batch 32: JAX XLA_FLAGS {flags}" in proc.stdout and "2.00x" in proc.stdout


def test_jax_runs_with_different_xla_flags_are_not_comparable(tmp_path):
    frame = comparison_frame(pd.concat([*both(tmp_path, "a", {"xla_flags": "--xla_a=1"}), *both(tmp_path, "b")]))
    assert frame["comparable"].iloc[0] == "JAX runs with different XLA_FLAGS pooled ('--xla_a=1', 'not set')"


def test_a_gpu_no_one_could_name_is_never_compared(tmp_path):
    """Every GPU run without NVML was "unknown GPU (NVML unavailable)", which pooled an A100 with an H100."""
    frames = both(tmp_path, "a")
    for frame in frames:
        frame["device_kind"], frame["device_model"] = "gpu", "unknown GPU (NVML unavailable)"
    frame = comparison_frame(pd.concat(frames, ignore_index=True))
    assert frame["comparable"].iloc[0] == ("the GPU model is unknown (unknown GPU (NVML unavailable)): runs on "
                                           "different GPUs may be pooled")


def test_without_nvml_the_gpu_model_is_the_frameworks_name_for_it():
    from bench_contract.measure.device import device_model

    nvml_failed = {"gpus": "not available: NVML: libnvidia-ml.so.1 not found", "cpu": {"cpu_model": "CPU X"}}
    assert device_model("gpu", nvml_failed, "NVIDIA H100 80GB HBM3") == "NVIDIA H100 80GB HBM3"
    assert device_model("gpu", nvml_failed).startswith("unknown GPU")
    nvml = {"gpus": [{"name": "NVIDIA A100-SXM4-80GB"}], "cpu": {"cpu_model": "CPU X"}}
    assert device_model("gpu", nvml, "NVIDIA A100-SXM4-80GB") == "NVIDIA A100-SXM4-80GB"  # NVML's, as before


def test_different_precision_censuses_make_the_row_not_comparable_and_name_the_classes(tmp_path):
    """A bf16 policy that differs, as the backends record it for the nlp transformer in bf16 on a CPU: JAX casts the
    LayerNorm's parameters and runs it in bfloat16, PyTorch's autocast leaves it in float32."""
    both(tmp_path, "a", {"census": LAYER_NORM_BF16}, {"census": LAYER_NORM_FP32})
    proc = run_cli("collect", "--results-dir", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert ("not comparable, digits mlp batch 32: normalisation bfloat16 in JAX, float32 in PyTorch"
            in proc.stdout), proc.stdout


def test_one_side_without_a_census_is_not_comparable_and_runs_of_two_censuses_are_not_pooled(tmp_path):
    frame = comparison_frame(pd.concat(both(tmp_path, "a", None, {"census": ""})))
    assert frame["comparable"].iloc[0] == "no precision census from PyTorch"
    frame = comparison_frame(pd.concat([*both(tmp_path, "b"), *both(tmp_path, "c", {"census": LAYER_NORM_BF16})]))
    assert frame["comparable"].iloc[0] == "JAX runs of 2 precision censuses pooled"
    old = comparison_frame(pd.concat(both(tmp_path, "d", {"census": ""}, {"census": ""})))
    assert old["comparable"].iloc[0] == "yes"  # rows from before the census, on both sides: nothing to compare


def test_census_differences_name_each_class_and_a_class_one_side_never_ran():
    from bench_contract.run import census

    jax = census.parse(LAYER_NORM_BF16)
    torch = {k: v for k, v in census.parse(LAYER_NORM_FP32).items() if k != "softmax"}
    assert census.differences({"jax": jax, "torch": torch}, {"jax": "JAX", "torch": "PyTorch"}) == [
        "normalisation bfloat16 in JAX, float32 in PyTorch", "softmax bfloat16 in JAX, none in PyTorch"]
    assert census.differences({"jax": jax, "torch": jax}, {}) == []


def test_runs_that_saw_other_data_or_ran_another_harness_commit_are_not_comparable(tmp_path):
    """Two data folders of different size paired freely, and the harness's own commit was not looked at."""
    other = "2,000/180/360 train/val/test examples, sha256 9f1c0b7e22d4a6e1"
    frame = comparison_frame(pd.concat(both(tmp_path, "a", torch={"data": other}), ignore_index=True))
    assert frame["comparable"].iloc[0] == f"runs of different data (JAX {DIGITS}; PyTorch {other})"
    pooled = comparison_frame(pd.concat([*both(tmp_path, "a"), *both(tmp_path, "b", {"commit": "17e52a4"},
                                                                       {"commit": "17e52a4"})], ignore_index=True))
    assert pooled["comparable"].iloc[0] == "runs of different harness commits (JAX 17e52a4 | 6feb0d7; PyTorch " \
                                           "17e52a4 | 6feb0d7)"
    # Rows written before either was recorded ("") have nothing to tell apart.
    older = comparison_frame(pd.concat(both(tmp_path, "a", {"data": "", "commit": ""}), ignore_index=True))
    assert older["comparable"].iloc[0] == "yes"


def test_padding_makes_a_row_not_comparable_only_beyond_what_a_quoted_speed_up_may_be_off_by():
    """A side padded by p computes 1/(1 - p) examples per drawn one; against a side that pads nothing, the edge is
    the p at which that reaches 1 + MAX_INTERVAL. Sides padded alike compute alike, however much."""
    from orchestrator.results.certificate import MAX_INTERVAL, padding_reasons

    edge = MAX_INTERVAL / (1 + MAX_INTERVAL)  # 1 / (1 - edge) = 1 + MAX_INTERVAL
    assert padding_reasons({"jax": edge * 0.99, "torch": 0.0}) == []
    (reason,) = padding_reasons({"jax": 0.0, "torch": edge * 1.01})
    assert reason.startswith("PyTorch computed 1.10 times the examples per drawn one that JAX did (padding JAX none, "
                             "PyTorch 9%), more than the 10%")
    assert padding_reasons({"jax": 0.65, "torch": 0.65}) == [] and padding_reasons({"jax": 0.65}) == []


def test_an_fp32_side_whose_own_matmul_check_shows_tf32_is_not_comparable(tmp_path):
    """NGC's PyTorch images set TORCH_ALLOW_TF32_CUBLAS_OVERRIDE, which turns TF32 on whatever the backend sets: the
    probe's error (about 4e-4 for TF32, bench_contract.run.precision) is the evidence, and an fp32 row with it on
    one side compares TF32 with float32."""
    frame = comparison_frame(pd.concat(both(tmp_path, "a", torch={"matmul_error": 3.9e-4})))
    assert frame["comparable"].iloc[0] == ("PyTorch's float32 matmuls ran in reduced precision (TF32 or lower) in an "
                                           "fp32 row: its own check's error 3.9e-04 is above 6.1e-05")
    assert frame["speedup"].isna().all()
    assert comparison_frame(pd.concat(both(tmp_path, "b")))["comparable"].iloc[0] == "yes"
