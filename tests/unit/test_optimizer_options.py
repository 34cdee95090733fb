"""Optimizers and schedules at plan time: the options reach every cell's spec, and where they mean nothing
the real CLI refuses them in one sentence, exit 2, nothing written."""

import json

import pytest
from helpers import run_cli, spec

from bench_contract.run.optim import learning_rate_at, learning_rates
from bench_contract.spec import SpecError

OPTIONS = ["--optimizer", "adamw", "--weight-decay", "0.05", "--lr-schedule", "warmup_cosine",
           "--lr-warmup-steps", "3", "--lr-decay-steps", "20"]
SGD = {"batch_size": 4, "learning_rate": 0.1}  # the specs' optimizer: plain SGD at 0.1


@pytest.mark.parametrize("use_case", [1, 2, 3, 4])
def test_every_training_use_case_carries_the_options_into_its_specs(tmp_path, use_case):
    """DP-SGD's use cases too: adam or adamw there is DP-Adam."""
    proc = run_cli("--benchmark", "digits", "--use-case", str(use_case), *OPTIONS, "--dry-run",
                   "--results-dir", str(tmp_path / "r"), "--scripts-dir", str(tmp_path / "s"))
    assert proc.returncode == 0, proc.stderr
    lines = [json.loads(line) for path in (tmp_path / "r").rglob("*.jsonl") for line in path.read_text().splitlines()]
    assert lines and all(line["optimizer"] == "adamw" and line["weight_decay"] == 0.05 and
                         line["lr_schedule"] == "warmup_cosine" and line["lr_warmup_steps"] == 3 and
                         line["lr_decay_steps"] == 20 for line in lines)


@pytest.mark.parametrize(
    "args, message",
    [
        (["--use-case", "5", "--optimizer", "adam"], "use case 5 trains nothing (inference (forward pass, eval mode) on one GPU), so --optimizer does not apply"),
        (["--use-case", "1", "--optimizer", "lamb"], "unknown --optimizer 'lamb'; choose from: sgd, momentum, adam, adamw"),
        (["--use-case", "1", "--optimizer", "adam", "--nesterov"], "--nesterov belong to --optimizer momentum"),
        (["--use-case", "1", "--lr-warmup-steps", "5"], "give --lr-schedule warmup_cosine too"),
        (["--use-case", "1", "--lr-schedule", "step"], "unknown --lr-schedule 'step'"),
        (["--use-case", "1", "--optimizer", "momentum", "--momentum", "1.5"], "--momentum must be at least 0"),
        (["--use-case", "3", "--weight-decay", "-1"], "--weight-decay cannot be negative"),
    ],
)
def test_options_that_mean_nothing_are_refused_in_one_sentence(tmp_path, args, message):
    results, scripts = tmp_path / "r", tmp_path / "s"
    proc = run_cli("--benchmark", "digits", *args, "--results-dir", str(results), "--scripts-dir", str(scripts))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert not results.exists() and not scripts.exists()


def test_warmup_then_cosine_to_zero():
    schedule = spec(**SGD, lr_schedule="warmup_cosine", lr_warmup_steps=4, lr_decay_steps=10)
    rates = [learning_rate_at(step, schedule) for step in range(20)]
    assert rates[:4] == pytest.approx([0.025, 0.05, 0.075, 0.1])  # the first update already moves
    assert rates[4] == pytest.approx(0.1) and rates[9] == pytest.approx(0.05)  # half way down the cosine
    assert rates[14:] == [0.0] * 6
    table = learning_rates(schedule)
    assert table.dtype == "float32" and len(table) == 15 and table[-1] == 0.0
    assert list(learning_rates(spec(**SGD))) == [pytest.approx(0.1)]


def test_a_spec_written_by_hand_is_refused_where_the_plan_would_be():
    with pytest.raises(SpecError, match="--nesterov belong to --optimizer momentum"):
        spec(**SGD, optimizer="adam", nesterov=True)
    with pytest.raises(SpecError, match="unknown --optimizer 'lamb'; choose from"):
        spec(**SGD, optimizer="lamb")
