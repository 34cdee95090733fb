"""The timing contract with each backend's own synchronize and compilation counter, and what a real run
records: the stopping rule, the spread, and no recompilation inside the timed region."""

import json
from pathlib import Path

import pytest
from cluster_run import compilation_cache_settings
from helpers import REPO_ROOT, metric, run_in_env

from bench_contract.results import read_task_table
from bench_contract.spec import JobSpec


def probe(framework: str, *args: str, env: dict | None = None) -> dict:
    proc = run_in_env(framework, str(REPO_ROOT / "tests" / "backends" / "measurement_probe.py"), *args, env=env,
                      cwd=Path.cwd())
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_jax_steps_are_timed_until_the_device_is_done_not_until_dispatch():
    result = probe("jax", "sync")
    honest, dispatch = result["backend"], result["none"]
    # With the backend's synchronize, the timed steps are the work: they add up to the wall time until done.
    assert honest["timed_s"] == pytest.approx(honest["wall_until_done_s"], rel=0.2)
    # Without it, the clock stops at dispatch: a small part of the time the same work really took.
    assert dispatch["timed_s"] < 0.2 * dispatch["wall_until_done_s"]
    assert dispatch["timed_s"] < 0.2 * honest["timed_s"]


@pytest.mark.parametrize("framework", ["jax", "torch"])
def test_a_recompilation_inside_the_timed_region_is_counted(framework):
    counts = probe(framework, "recompile", framework)
    assert counts["same_shape"] == 0
    # Shape 16 compiles in the warm-up step (not counted); shape 32 compiles inside a timed step.
    assert counts["changed_shape"] == 1


def test_a_recompilation_served_from_jaxs_persistent_cache_is_counted(tmp_path):
    """With JAX's persistent compilation cache on (the suite itself runs with one), a second process finds the
    changed shape's program on disk and loads it instead of compiling it: no backend-compile event, but a
    recompilation of the timed step all the same."""
    cache = compilation_cache_settings(tmp_path / "cache")
    first = probe("jax", "recompile", "jax", env=cache)
    assert any((tmp_path / "cache").iterdir())  # the first process wrote its programs
    assert probe("jax", "recompile", "jax", env=cache) == first == {"same_shape": 0, "changed_shape": 1}


@pytest.mark.parametrize("framework", ["jax", "torch"])
def test_inference_times_until_both_minimums_are_reached_and_records_them(framework, tmp_path):
    spec = JobSpec(campaign="test", cell_id=f"{framework}-inf", pair_key="inf", framework=framework,
                   benchmark="digits", use_case=5, model="mlp", batch_size=8, precision="fp32", device="cpu",
                   data_source="synthetic", warmup_steps=2, timed_steps=5, min_duration_s=0.3, trials=3, trial=2,
                   results_path=str(tmp_path / "rows.parquet"), init_weights_path=str(tmp_path / "init.npz"))
    path = tmp_path / "spec.json"
    path.write_text(spec.to_json())
    proc = run_in_env(framework, "-m", f"{framework}_backend.run", str(path), cwd=Path.cwd())
    assert proc.returncode == 0, proc.stderr
    df = read_task_table(spec.results_path).to_pandas()
    assert metric(df, "min_iterations") == 5 and metric(df, "min_duration") == 0.3
    # An MLP forward pass on 8 samples takes well under 60 ms: the duration, not the count, ended the loop.
    assert metric(df, "timed_duration") >= 0.3 and metric(df, "timed_steps") > 5
    assert metric(df, "recompilations_timed") == 0
    cv = metric(df, "step_time_cv")
    assert cv == pytest.approx(metric(df, "step_time_std") / metric(df, "step_time_mean"))
    assert metric(df, "spread_too_wide") == float(cv > 0.10)
    assert (df["trial"] == 2).all() and (df["pair_order"] == "").all()
