"""Every number of a request and of a profile has a bound (finite, fits its result column or
Slurm's own count, a plan that stays small), refused in one sentence before anything is written."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pytest
from helpers import dry_run, profile_file, settings

from orchestrator.errors import UsageError
from orchestrator.plan.profile import ClusterProfile, load_profile
from orchestrator.plan.settings import parse_batch_sizes, parse_memory_size

DIGITS = ("--benchmark", "digits", "--use-case", "1", "--synthetic")


def refused_before_writing(tmp_path: Path, proc, *words: str) -> None:
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    assert "Traceback" not in proc.stderr
    for word in words:
        assert word in lines[0], lines[0]
    assert not (tmp_path / "r").exists() and not (tmp_path / "s").exists()


@pytest.mark.parametrize("key, value", [
    ("cpus_per_task", "99999999999999999999"),
    ("cpus_per_task", "65535"),
    ("gpus_per_task", "100000"),
    ("max_array_size", "4000002"),
])
def test_profile_counts_beyond_what_slurm_holds_are_refused(tmp_path, key, value):
    recipe = 'jax_recipe = "cuda12"\n' if key == "gpus_per_task" else ""
    with pytest.raises(UsageError, match=key):
        load_profile(profile_file(tmp_path, f"{recipe}{key} = {value}\n"))


def test_a_time_limit_of_more_days_than_slurm_counts_is_refused(tmp_path):
    with pytest.raises(UsageError, match="time_limit"):
        load_profile(profile_file(tmp_path, 'time_limit = "99999999999999999999-00:00:00"\n'))
    assert load_profile(profile_file(tmp_path, 'time_limit = "7-00:00:00"\n')).time_limit == "7-00:00:00"


def test_a_huge_cpu_count_in_the_profile_stops_the_campaign_before_anything_is_written(tmp_path):
    path = profile_file(tmp_path, "cpus_per_task = 99999999999999999999\n")
    refused_before_writing(tmp_path, dry_run(tmp_path, *DIGITS, "--profile", str(path)), "cpus_per_task", "65534")


def test_a_system_with_a_huge_cpu_count_is_refused_by_its_table(tmp_path):
    with pytest.raises(UsageError, match="systems.big"):
        load_profile(profile_file(tmp_path, "[systems.big]\ncpus_per_task = 70000\n"))


@pytest.mark.parametrize("field, value, option", [
    ("learning_rate", math.inf, "--learning-rate"),
    ("min_duration_s", math.inf, "--min-duration"),
    ("min_duration_s", 1e9, "--min-duration"),
    ("weight_decay", math.inf, "--weight-decay"),
    ("clip_norm", math.inf, "--clip-norm"),
    ("noise_multiplier", math.inf, "--noise-multiplier"),
    ("target_epsilon", math.inf, "--target-epsilon"),
    ("seed", 10**20, "--seed"),
    ("seed", 2**32, "--seed"),
    ("seed", -1, "--seed"),
    ("epochs", 3 * 10**9, "--epochs"),
    ("warmup_steps", 2**31, "--warmup-steps"),
    ("synthetic_samples", 10**12, "--synthetic-samples"),
    ("timed_steps", 2**40, "--min-iterations"),
    ("trials", 100_000_000, "--trials"),
    ("trials", 1001, "--trials"),
    ("nodes", 2**31, "--nodes"),
    ("lr_decay_steps", 10**30, "--lr-decay-steps"),
    ("batch_search_limit", 2**31, "--max-batch-limit"),
])
def test_each_number_of_a_request_has_a_bound(field, value, option):
    with pytest.raises(UsageError) as refused:
        settings(**{field: value})
    assert str(refused.value).startswith(option), str(refused.value)


def test_numbers_at_their_bounds_are_accepted():
    accepted = settings(seed=2**32 - 1, epochs=2**31 - 1, trials=1000, min_duration_s=86400.0,
                        learning_rate=1e300, synthetic_samples=2**31 - 1)
    assert accepted.seed == 2**32 - 1 and accepted.trials == 1000


def test_a_batch_size_beyond_the_result_column_is_refused():
    with pytest.raises(UsageError, match="batch size 3000000000"):
        parse_batch_sizes(["32,3000000000"])


@pytest.mark.parametrize("text", ["infG", "nanG", "1e30T"])
def test_a_memory_size_that_is_not_finite_or_fits_no_64_bit_count_is_one_sentence(text):
    with pytest.raises(UsageError, match="memory size"):
        parse_memory_size(text)


@pytest.mark.parametrize("args, words", [
    (("--trials", "100000000"), ("--trials", "1000")),
    (("--learning-rate", "inf"), ("--learning-rate", "finite")),
    (("--min-duration", "inf"), ("--min-duration", "finite")),
    (("--seed", "100000000000000000000"), ("--seed", "4294967295")),
    (("--epochs", "3000000000"), ("--epochs", "2147483647")),
])
def test_the_command_line_refuses_each_unbounded_number_before_anything_is_written(tmp_path, args, words):
    refused_before_writing(tmp_path, dry_run(tmp_path, *DIGITS, *args), *words)


def test_a_campaign_of_too_many_array_tasks_is_refused_before_anything_is_written(tmp_path):
    from orchestrator.plan.rules import MAX_TASKS
    from orchestrator.run.launch import LaunchRequest, launch

    big = settings(synthetic_samples=4096, trials=1000)
    request = LaunchRequest("mnist", 1, [], [], list(range(1, 12)), [], big, ClusterProfile(), "slurm", True, False,
                            tmp_path / "r", tmp_path / "s", "test")
    assert 2 * 11 * 1000 > MAX_TASKS
    with pytest.raises(UsageError, match=f"22000 array tasks, more than the {MAX_TASKS}"):
        launch(request, report=lambda line: None)
    assert not (tmp_path / "r").exists() and not (tmp_path / "s").exists()
    launch(replace(request, settings=replace(big, trials=2)), report=lambda line: None)  # a smaller one is planned
