"""A verdict per comparison row, in words, at the top of collect's output, report.md and the HTML page: who was
faster, by how much with its interval, from how many runs on how many nodes, and whether the number can be quoted.

The rule for "reliable" (docs/comparisons-and-report.md says it in words; tests/unit/test_verdict.py tests each
condition on both sides of its edge). A row is reliable when all of these hold:
- it is comparable (the certificate, orchestrator.results.certificate);
- each framework has at least MIN_RUNS runs (trials, each in a fresh process; paired trials count as pairs);
- the speed-up's 95% interval lies within MAX_INTERVAL of the speed-up on both sides;
- neither side's spread is too wide (within a run the step times, between runs the throughputs: CV_THRESHOLD);
- nothing about it is implausible across batch sizes (orchestrator.results.plausibility);
- no run of either side ran on a GPU slowed down for heat or by its hardware (bench_contract.measure.node_state);
- on neither side did other processes use more than SHARED_CPUS of the CPUs a run was bound to while it measured
  (bench_contract.measure.host; the median over its runs);
- the throughput and the median step time agree on the faster framework. The speed-up is a ratio of throughputs
  (samples over the mean step time, the HEADLINE), so a few slow steps can decide it against the typical step;
- paired runs show no order effect: from intervals.ORDER_EFFECT_MIN_PAIRS pairs on, the pairs run JAX first and
  those run PyTorch first do not differ at 95% (intervals.order_effect);
- in a pack whose pairs ran side by side, each pair's JAX and PyTorch runs ran beside the same cells
  (orchestrator.results.neighbours).
Anything else is "not reliable", with the reasons and what to rerun.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bench_contract.measure.host import SHARED_CPUS
from bench_contract.sequential import percent
from bench_contract.spec import FRAMEWORK_TITLES, USE_CASES, JobSpec
from orchestrator.results.certificate import MAX_INTERVAL
from orchestrator.results.intervals import OrderEffect, order_effect
from orchestrator.results.neighbours import Neighbours, neighbour_mismatches
from orchestrator.results.compare import (
    FRAMEWORKS,
    ROW_KEY,
    comparable,
    run_values,
    with_variant_label,
)
from orchestrator.results.views import cell_words, use_case_words

# What every speed-up of a verdict is a ratio of, in words (compare: the throughput metric).
HEADLINE = "throughput, samples over the mean step time"
# The fewest runs a side (pairs, where paired) a reliable row has: the speed-up's interval keeps its 95% coverage from
# there on (tests/unit/test_interval_coverage.py simulates MIN_RUNS, 5 and 10 runs a side, paired and unpaired, and
# asserts at least 93% at each), so a row is never called reliable on an interval whose coverage is untested.
MIN_RUNS = 3
# The shortest timing window the rerun advice accepts when the numbers spread: the window inference and the
# per-sample timings take by default (JobSpec.min_duration_s). A run whose timed steps add up to less measures the
# host's moment as much as the framework, and more trials do not narrow the spread: on the 2-core AMD EPYC machine,
# the digits MLP's 4 timed steps a run (0.02 s) varied by 14 to 20% between runs, its 395 (4.3 s) by 4.5 to 4.7%.
MIN_TIMED_WINDOW_S = JobSpec.min_duration_s


@dataclass(frozen=True)
class Verdict:
    device_model: str
    use_case: int
    text: str  # the whole line
    reliable: bool


def verdicts(frame, df) -> list[Verdict]:
    """One verdict per row of `frame` (views.use_case_frame of the merged rows `df`), by device model and use case."""
    if frame.empty:
        return []
    runs, nodes = run_and_node_counts(df)
    effects = order_effects(df)
    beside = neighbour_mismatches(df)
    out = []
    for _, row in frame.sort_values(["device_model", "use_case", "benchmark", "model", "batch_size"]).iterrows():
        key = tuple(row[c] for c in ROW_KEY)
        counts = {fw: runs.get((*key, fw), 0) for fw in FRAMEWORKS}
        row = with_order_effect(row, effects.get(key))
        row["neighbours_differ"] = beside.get(key)
        out.append(verdict(row, counts, nodes.get(key, 0)))
    return out


def with_order_effect(row, effect: OrderEffect | None):
    """The row with its paired runs' order effect (intervals.order_effect), for reasons() to read."""
    row = row.copy()
    row["order_effect"] = effect
    return row


def order_effects(df) -> dict[tuple, OrderEffect]:
    """Per comparison row (ROW_KEY) whose runs are pairs, enough of them, the test of an order effect."""
    throughput = run_values(with_variant_label(df), "throughput")
    effects = {}
    for key, block in throughput.groupby(level=ROW_KEY, dropna=False):
        framework = block.index.get_level_values("framework")
        effect = order_effect(block[framework == "jax"], block[framework == "torch"])
        if effect is not None:
            effects[key] = effect
    return effects


def verdict(row, runs: dict[str, int], nodes: int) -> Verdict:
    """The verdict of one comparison row, whose frameworks have `runs` runs on `nodes` nodes in all."""
    head = f"{use_case_words(row['use_case'])}, {row_words(row)} on {row['device_model']}"
    if not comparable(row):
        return Verdict(row["device_model"], row["use_case"], f"{head}: not comparable ({row['comparable']}); "
                       "no speed-up is given", False)
    if np.isnan(row["speedup"]):
        absent = [FRAMEWORK_TITLES[fw] for fw in FRAMEWORKS if not runs[fw]]
        why = f"no throughput from {' or '.join(absent)}" if absent else "no throughput to compare"
        return Verdict(row["device_model"], row["use_case"], f"{head}: {why}", False)
    problems = reasons(row, runs)
    said = f"{head}: {faster(row)}, {runs_words(row, runs, nodes)}"
    if not problems:
        return Verdict(row["device_model"], row["use_case"], f"{said}: reliable", True)
    return Verdict(row["device_model"], row["use_case"], f"{said}: not reliable ({'; '.join(problems)}); rerun with "
                   f"`{rerun_options(row, runs)}` on an idle node{longer_windows(row)}", False)


def rerun_options(row, runs: dict[str, int]) -> str:
    """The trials a rerun should ask for: --trials auto, with room for twice the trials where auto ran out."""
    if sequential(row):
        return f"--trials auto --target-interval {percent(row['target_interval'])} --max-trials {2 * runs['jax']}"
    return f"--trials auto --target-interval {percent(MAX_INTERVAL)}"


def longer_windows(row) -> str:
    """Where the numbers spread and a side's runs timed less than MIN_TIMED_WINDOW_S (the median over its runs):
    ", each run timing at least 1 s (JAX's timed 0.02 s: more --epochs)"; "" otherwise."""
    if not row.get("spread_too_wide"):
        return ""
    short = [f"{FRAMEWORK_TITLES[fw]}'s timed {seconds:.2g} s" for fw in FRAMEWORKS
             if (seconds := row.get(f"{fw}_timed_duration", np.nan)) < MIN_TIMED_WINDOW_S]  # NaN: not recorded
    if not short:
        return ""
    case = USE_CASES.get(row["use_case"])  # None for a row of a use case no longer declared: trained, say
    longer = "more --epochs" if case is None or case.trains else "a longer --min-duration"
    return f", each run timing at least {MIN_TIMED_WINDOW_S:g} s ({', '.join(short)}: {longer})"


def sequential(row) -> bool:
    """Whether the row's trials ran under --trials auto (compare: its target_interval)."""
    target = row.get("target_interval")
    return target is not None and not np.isnan(target)


def reasons(row, runs: dict[str, int]) -> list[str]:
    """Why a comparable row with a speed-up is not reliable, in words; [] when it is."""
    found = []
    width = interval_width(row)
    if min(runs.values()) < MIN_RUNS:
        found.append(f"fewer than {MIN_RUNS} runs a side")
    elif width is None:  # runs enough, yet no interval (a throughput of 0 has no log): nothing to quote it with
        found.append("no 95% interval")
    if width is not None and width > MAX_INTERVAL:
        # One decimal: an interval just past the edge (10.4%) must not read as the edge itself ("10%, more than 10%").
        found.append(f"the interval reaches {width:.1%} from the speed-up, more than {MAX_INTERVAL:.0%}")
    if row.get("spread_too_wide"):
        found.append(f"spread {row['spread_too_wide']}")
    if row.get("implausible"):
        found.append(f"implausible: {row['implausible']}")
    for framework in FRAMEWORKS:
        throttled = row.get(f"{framework}_throttled_runs")
        if throttled is not None and throttled > 0:  # NaN (no GPU, nothing read) is not > 0
            found.append(f"{FRAMEWORK_TITLES[framework]}'s GPU was throttled in {throttled:.0f} of {runs[framework]} "
                         "runs (the rows' throttled metric says why)")
        others = row.get(f"{framework}_host_cpu_others")
        if others is not None and not np.isnan(others) and others > SHARED_CPUS:
            found.append(f"{FRAMEWORK_TITLES[framework]}'s CPUs were shared: other processes used {others:.0%} of them")
    found += median_step_disagrees(row)
    differ = row.get("neighbours_differ")
    if isinstance(differ, Neighbours) and differ.differ:
        # A pack's side-by-side runs share the node's memory bandwidth, caches and power: sides beside different
        # cells were not measured alike (orchestrator.results.neighbours).
        found.append(f"in {differ.differ} of {differ.trials} paired trials its JAX and PyTorch runs ran beside different "
                     "cells in their pack (the rows' neighbours)")
    effect = row.get("order_effect")
    if isinstance(effect, OrderEffect) and effect.found:
        found.append(f"an order effect: the pairs run JAX first gave {effect.jax_first:.3g}x, those run PyTorch "
                     f"first {effect.torch_first:.3g}x (Welch's t {abs(effect.t):.2f} > {effect.critical:.2f}, 95%)")
    return found


def median_step_disagrees(row) -> list[str]:
    """A reason where the framework faster by throughput (the speed-up's HEADLINE) has the slower median step."""
    p50 = {fw: row.get(f"{fw}_step_time_p50", np.nan) for fw in FRAMEWORKS}
    if any(value is None or np.isnan(value) for value in p50.values()) or p50["jax"] == p50["torch"]:
        return []
    by_median = min(p50, key=p50.get)
    if by_median == ("jax" if row["speedup"] > 1 else "torch"):
        return []
    slower = next(fw for fw in FRAMEWORKS if fw != by_median)
    return [f"the throughput and the median step disagree on the faster: {FRAMEWORK_TITLES[by_median]}'s median step "
            f"took {p50[by_median]:.3g} ms against {FRAMEWORK_TITLES[slower]}'s {p50[slower]:.3g} ms, so a few slow "
            "steps decide the speed-up"]


def interval_width(row) -> float | None:
    """How far the 95% interval reaches from the speed-up, relative to it, on its wider side; None without one."""
    low, high, speedup = row["speedup_ci_low"], row["speedup_ci_high"], row["speedup"]
    if np.isnan(low) or np.isnan(high):
        return None
    return float(max(high / speedup - 1, 1 - low / speedup))


def faster(row) -> str:
    """"JAX 1.32x faster [1.25, 1.40]", or PyTorch's ratio where it is the faster; the interval where there is one."""
    speedup, low, high = row["speedup"], row["speedup_ci_low"], row["speedup_ci_high"]
    if speedup < 1:  # PyTorch faster: its own ratio, the interval's ends swapped
        speedup, low, high = 1 / speedup, 1 / high, 1 / low
        name = FRAMEWORK_TITLES["torch"]
    else:
        name = FRAMEWORK_TITLES["jax"]
    interval = "" if np.isnan(low) else f" [{low:.2f}, {high:.2f}]"
    return f"{name} {speedup:.2f}x faster{interval}"


def runs_words(row, runs: dict[str, int], nodes: int) -> str:
    """"6 paired trials on 3 nodes", "1 run each on 1 node", "3 JAX and 2 PyTorch runs on 2 nodes"."""
    where = f"on {nodes} node{'s' if nodes != 1 else ''}"
    if sequential(row):
        width = interval_width(row)
        met = "within" if width is not None and width <= row["target_interval"] else "short of"
        target = percent(row["target_interval"])
        return f"{runs['jax']} paired trials {where} (--trials auto, {met} its {target} target)"
    if row.get("paired"):
        return f"{runs['jax']} paired trial{'s' if runs['jax'] != 1 else ''} {where}"
    if runs["jax"] == runs["torch"]:
        return f"{runs['jax']} run{'s' if runs['jax'] != 1 else ''} each {where}"
    return f"{runs['jax']} JAX and {runs['torch']} PyTorch runs {where}"


def row_words(row) -> str:
    """The cell, its precision and the settings that tell it from the other rows of the cell."""
    settings = f", {row['differs_in']}" if row.get("differs_in") else ""
    return f"{cell_words(row)} {row['precision']}{settings}"


def run_and_node_counts(df) -> tuple[dict[tuple, int], dict[tuple, int]]:
    """The runs with a throughput per comparison row and framework (ROW_KEY + framework), as compare counts them,
    and the nodes each row's runs ran on, both frameworks together (compare.run_values keeps each run's node)."""
    throughput = run_values(with_variant_label(df), "throughput")
    runs = throughput.groupby(level=[*ROW_KEY, "framework"], dropna=False).size().to_dict()
    nodes = throughput.index.to_frame(index=False).groupby(ROW_KEY, dropna=False)["node"].nunique()
    return runs, nodes.to_dict()


def verdict_lines(found: list[Verdict]) -> list[str]:
    """collect's verdicts (verdicts()): a heading, then one line per comparison row."""
    if not found:
        return []
    reliable = sum(v.reliable for v in found)
    return [f"Verdicts ({reliable} of {len(found)} reliable; each speed-up a ratio of {HEADLINE}; the rule: "
            "docs/comparisons-and-report.md):",
            *(f"  {v.text}" for v in found)]
