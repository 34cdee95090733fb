"""Trials until the interval is narrow (`--trials auto`): Stein's two-stage rule for paired JAX/PyTorch trials.

A paired job runs FIRST_STAGE trials of its pair (JAX then PyTorch on one node, A B A B), then this rule reads
their throughputs and says how many trials the pair needs in all, at most the planned `trials`:

    N = max(FIRST_STAGE, ceil((t * s / d)^2)),   d = log(1 + target),

where s is the standard deviation of the first stage's log speed-ups (log of JAX's over PyTorch's throughput,
one per trial) and t the 97.5% quantile of Student's t with FIRST_STAGE - 1 degrees of freedom. The speed-up's
interval is then exp(mean ± t * s / sqrt(N)), the mean over all N trials: its half-width is within d, and it
covers the true (geometric mean) speed-up with probability 95% exactly when the log speed-ups are normal,
whatever their variance (C. Stein, "A two-sample test for a linear hypothesis whose power is independent of the
variance", Ann. Math. Statist. 16(3), 243-258, 1945): N depends on the first stage's variance only, so given s
the mean of N trials is normal about the truth with variance sigma^2 / N, and sqrt(N) (mean - mu) / s is
Student's t. A purely sequential rule (stop at the first n whose t-interval is narrow enough) does not keep its
coverage: simulated, it covered 90% at a stated 95% (tests/unit/test_sequential_trials.py compares the two).
Where the budget caps N, the interval is the same formula at the N that ran, wider than the target, and the
comparison says so. The budget is `--max-trials`, and the job's time limit: the trials that can end before it,
at the first stage's pace, one trial's time kept in reserve (trials_in_time), so that a pair never loses its last
trial to the limit. N still depends on the first stage only (its variance and its pace), so the coverage holds.

The job runs `python -m bench_contract.sequential JAX_SPECS TORCH_SPECS PAIR [FIRST_STAGE_S SECONDS_LEFT]` after
its first stage: it prints N and marks the trials it will not run as not needed (not_needed_path), so that status
and collect do not count them as missing. The orchestrator computes the interval from the rows with the same
functions (stein_interval).
"""

from __future__ import annotations

import json
import math
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from bench_contract.results import read_task_file
from bench_contract.spec import FIRST_STAGE, JobSpec
from bench_contract.student_t import t_quantile

# Student's t, 97.5% quantile, FIRST_STAGE - 1 = 4 degrees of freedom: 2.776 (scipy.stats.t.ppf(0.975, 4), which
# a unit test checks; bench_contract.student_t computes it without scipy, which not every backend environment has).
COVERAGE = 0.95  # every interval of the speed-up is a 95% one: Stein's, and the comparison's (orchestrator.results)
T_FIRST_STAGE = t_quantile(COVERAGE, FIRST_STAGE - 1)
RULE = "stein"  # the rows' trial_rule starts with it: "stein first=5 target=0.05"
NOT_NEEDED_SUFFIX = ".not-needed.json"


@dataclass(frozen=True)
class Rule:
    """The sequential rule a pair's trials ran under, as the rows record it (trial_rule)."""

    first_stage: int
    target: float  # the interval's half-width the trials aim at, relative to the speed-up (0.05: within 5%)

    def label(self) -> str:
        return f"{RULE} first={self.first_stage} target={self.target:g}"


def percent(fraction: float) -> str:
    """A target interval in words: 0.05 as "5%", 0.001 as "0.1%" (a target below 1% must not read "0%")."""
    return f"{fraction * 100:g}%"


def parse_rule(text: str) -> Rule | None:
    """The Rule of a rows' trial_rule; None for "" (a fixed number of trials), any other text, or a first stage other
    than FIRST_STAGE."""
    words = text.split()
    if len(words) != 3 or words[0] != RULE:
        return None
    try:
        fields = dict(word.split("=", 1) for word in words[1:])
        rule = Rule(int(fields["first"]), float(fields["target"]))
    except (KeyError, ValueError):
        return None
    # Stein's interval is computed with FIRST_STAGE's t quantile only: rows of another first stage get the t interval.
    return rule if rule.first_stage == FIRST_STAGE else None


def trials_needed(first_log_ratios: list[float], target: float, most: int) -> int:
    """Stein's N from the first stage's log speed-ups, between FIRST_STAGE and `most`."""
    spread = stdev(first_log_ratios)
    wanted = math.ceil((T_FIRST_STAGE * spread / math.log1p(target)) ** 2)
    return max(len(first_log_ratios), min(most, wanted))


def trials_in_time(first_stage_s: float, seconds_left: float) -> int:
    """The trials a pair can run in all when its first FIRST_STAGE took `first_stage_s` and `seconds_left` remain
    before the job's time limit: as many more as fit at the first stage's mean pace, less one kept in reserve (a
    trial may run slower than the mean); never fewer than the first stage, which has run."""
    pace = max(first_stage_s, 1e-9) / FIRST_STAGE
    return FIRST_STAGE + max(0, math.floor(seconds_left / pace) - 1)


def stein_interval(log_ratios: list[float], first_stage: int = FIRST_STAGE) -> tuple[float, float, float]:
    """(speed-up, low, high) after len(log_ratios) trials whose first `first_stage` decided their number."""
    if first_stage != FIRST_STAGE or len(log_ratios) < first_stage:
        raise ValueError(f"Stein's interval needs the first {FIRST_STAGE} trials that decided the number")
    center = sum(log_ratios) / len(log_ratios)
    half = T_FIRST_STAGE * stdev(log_ratios[:first_stage]) / math.sqrt(len(log_ratios))
    return math.exp(center), math.exp(center - half), math.exp(center + half)


def stdev(values: list[float]) -> float:
    mean = sum(values) / len(values)
    return math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))


def not_needed_path(results_path: str | os.PathLike[str]) -> Path:
    """The mark beside a trial's result path that says the rule stopped before it."""
    path = Path(results_path)
    return path.with_name(path.name + NOT_NEEDED_SUFFIX)


def not_needed_reason(results_path: str) -> str | None:
    """Why the trial that writes `results_path` was left out by its pair's rule; None where it was not."""
    try:
        return f"left out by the sequential rule: {json.loads(not_needed_path(results_path).read_text())['why']}"
    except (OSError, ValueError, KeyError, TypeError):
        return None


def run_throughput(results_path: str) -> float:
    """A run's throughput as its task file holds it (the median of its per-run throughput rows, as the comparison
    takes it: orchestrator.results.compare.run_values)."""
    rows = read_task_file(results_path).rows
    values = sorted(
        value for metric, value, step, epoch in zip(*(rows.column(c).to_pylist()
                                                      for c in ("metric", "value", "step", "epoch")))
        if metric == "throughput" and step is None and epoch is None and value is not None)
    if not values:
        raise ValueError(f"{results_path} holds no throughput")
    middle = len(values) // 2
    return values[middle] if len(values) % 2 else (values[middle - 1] + values[middle]) / 2


def decide(jax_specs: str, torch_specs: str, pair: int,
           time_left: tuple[float, float] | None = None) -> tuple[int, str]:
    """(trials the pair needs, why), from the specs files of a paired job whose pair `pair` ran its first stage,
    and, where the job has a time limit, (the first stage's seconds, the seconds left before the limit); marks the
    trials it will not run, and unmarks the others (a rerun may need more than the run before)."""
    # Each file read once (JobSpec.read scans a file from its start for every line asked for).
    jax, torch = (Path(path).read_text().splitlines() for path in (jax_specs, torch_specs))
    most = JobSpec.from_json(jax[0]).trials  # every line of a campaign's specs file has the same trials
    lines = [(JobSpec.from_json(jax[pair * most + t]), JobSpec.from_json(torch[pair * most + t]))
             for t in range(most)]
    target = lines[0][0].target_interval
    try:
        ratios = [math.log(run_throughput(a.results_path) / run_throughput(b.results_path))
                  for a, b in lines[:FIRST_STAGE]]
    except Exception as exc:  # noqa: BLE001  a failed or unreadable first-stage run: the rule cannot apply
        needed, why = most, f"the first stage is incomplete ({exc}): all {most} trials run"
    else:
        needed = trials_needed(ratios, target, most)
        why = (f"Stein's rule: the first {FIRST_STAGE} trials' log speed-ups have a standard deviation of "
               f"{stdev(ratios):.4f}: {needed} trials in all for an interval within {percent(target)} (at most {most})")
    if time_left is not None and (fits := trials_in_time(*time_left)) < needed:
        needed = fits
        left = (f"{time_left[1]:.0f} s are left (one trial kept in reserve)" if time_left[1] >= 0
                else f"{-time_left[1]:.0f} s past the time the job had for it")
        why += f"; the job's time limit holds {fits}: the first stage took {time_left[0]:.0f} s, {left}"
    for trial, pair_lines in enumerate(lines):
        for spec in pair_lines:
            mark = not_needed_path(spec.results_path)
            if trial >= needed:
                mark.write_text(json.dumps({"trials": needed, "why": why}) + "\n")
            else:
                mark.unlink(missing_ok=True)
    return needed, why


def main(argv: list[str]) -> int:
    """python -m bench_contract.sequential JAX_SPECS TORCH_SPECS PAIR [FIRST_STAGE_S SECONDS_LEFT]: prints the
    trials pair PAIR needs (within the job's time limit, where the seconds are given)."""
    if len(argv) not in (3, 5):
        print("usage: python -m bench_contract.sequential JAX_SPECS TORCH_SPECS PAIR [FIRST_STAGE_S SECONDS_LEFT]",
              file=sys.stderr)
        return 2
    time_left = (float(argv[3]), float(argv[4])) if len(argv) == 5 else None
    needed, why = decide(argv[0], argv[1], int(argv[2]), time_left)
    print(why, file=sys.stderr)
    print(needed)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
