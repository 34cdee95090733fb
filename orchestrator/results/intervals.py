"""The speed-up and its 95% interval, from the two frameworks' throughputs over their runs; and the bootstrap draws
the baseline's intervals of medians resample (orchestrator.results.baseline).

The speed-up is a ratio of typical throughputs, so it is computed on the log scale, where a ratio is a difference
and a run's multiplicative noise is additive: the speed-up is exp(centre), and its interval exp(centre -+ t se),
Student's t at the interval's degrees of freedom. The printed speed-up is the interval's centre, so the two always
agree: the ratio of the two sides' geometric mean throughputs (unpaired runs), or the geometric mean of the pairs'
ratios (paired runs). Both are the ratio of the median throughputs where runs vary log-normally, and within a
fraction of a percent of the ratio of mean throughputs at the spreads the verdict accepts (log(mean / geometric
mean) is about CV^2 / 2: 0.5% at a CV of 10%).
- Paired runs (one trial of a paired job: JAX and PyTorch one after the other on one node): a t interval of the mean
  of the pairs' log ratios, with pairs - 1 degrees of freedom; drift a pair shares cancels in its ratio.
- Unpaired runs: Welch's t interval of the difference of the two sides' mean logs, with the Welch-Satterthwaite
  degrees of freedom rounded down (a wider interval than the fractional ones would give, never a narrower one).
Where a side's runs (or the pairs) ran on several nodes, the nodes are the unit of evidence (issue 31): each node's
mean log is one value, with nodes - 1 degrees of freedom, so that ten runs on one slow node and one on another count
as two nodes' worth of evidence, not eleven independent runs, and a node effect widens the interval as it should.

Why not a bootstrap of the runs: with 3 runs a side a percentile bootstrap covers the true ratio 74-79% of the time,
with 10 runs 91% (issue 63; its resamples of 3 runs hold few distinct means, and no t quantile widens them). These
intervals are exact for log-normal runs at any count (the paired one) or close to it (Welch's, conservative where its
degrees of freedom are rounded down); tests/unit/test_interval_coverage.py simulates their coverage at 3, 5 and 10
runs a side, paired and unpaired, on one node and on several.

Pairs that ran under `--trials auto` (all of one campaign, under one sequential rule) get Stein's interval
instead (sequential_speedup): the rule chose their number from the first trials' spread, and that interval is the
one whose coverage it keeps (bench_contract.sequential).

Paired jobs alternate which framework runs first (bench_contract.spec.pair_order). From ORDER_EFFECT_MIN_PAIRS pairs
on, order_effect tests whether the pairs run JAX first give another ratio than those run PyTorch first (Welch's t
on the two groups' log ratios): a position effect within a pair (a warmer CPU, caches, turbo) that the alternation
balances in the mean but that makes the pairs' spread, and so the interval, say less than it seems.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bench_contract.sequential import Rule, parse_rule, stein_interval
from bench_contract.spec import PAIRED_ORDER
from bench_contract.student_t import t_quantile

COVERAGE = 0.95  # the speed-up's interval is a 95% one
BOOTSTRAP_SAMPLES = 2000  # the baseline's bootstrap of medians


def speedup_interval(numerator: np.ndarray, denominator: np.ndarray, numerator_nodes: np.ndarray | None = None,
                     denominator_nodes: np.ndarray | None = None):
    """(speed-up, low, high) of numerator's runs over denominator's, each side's runs independent (Welch's t on the
    log scale, over each side's nodes where its runs ran on several). The runs lie along the last axis: an array of
    campaigns gives an array of each. The interval is NaN where a side has fewer than two units (runs, or nodes),
    all three where a side has no runs."""
    numerator, denominator = np.asarray(numerator), np.asarray(denominator)
    if not numerator.shape[-1] or not denominator.shape[-1]:
        return np.nan, np.nan, np.nan
    (logs_a, first_a), (logs_b, first_b) = about_first(numerator), about_first(denominator)
    centre_a, variance_a, df_a = mean_and_variance(units(logs_a, numerator_nodes))
    centre_b, variance_b, df_b = mean_and_variance(units(logs_b, denominator_nodes))
    variance = variance_a + variance_b
    with np.errstate(divide="ignore", invalid="ignore"):  # no spread on either side: any degrees of freedom
        welch = variance ** 2 / (variance_a ** 2 / df_a + variance_b ** 2 / df_b)
    df = np.where(variance > 0, welch, np.minimum(df_a, df_b))
    return scaled(first_a / first_b, t_interval(centre_a - centre_b, variance, np.floor(df)))


def paired_speedup_interval(numerator: np.ndarray, denominator: np.ndarray, nodes: np.ndarray | None = None):
    """(speed-up, low, high) where numerator[..., i] and denominator[..., i] ran as one pair (the same trial of one
    paired job, on one node, one after the other): a t interval of the mean of the pairs' log ratios (over the
    nodes' means, where the pairs ran on several), so that drift that falls on both sides of a pair cancels. The
    interval is NaN with fewer than two units (pairs, or nodes); all three without pairs."""
    numerator, denominator = np.asarray(numerator), np.asarray(denominator)
    if not numerator.shape[-1] or numerator.shape != denominator.shape:
        return np.nan, np.nan, np.nan
    logs, first = about_first(numerator / denominator)
    return scaled(first, t_interval(*mean_and_variance(units(logs, nodes))))


def about_first(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(log(values / the first value), the first value), along the last axis: logs about a value of their own, so
    that values that all agree give their ratio exactly (exp(0) is 1; exp(log(2.0)) may miss 2.0 in its last bit)."""
    first = values[..., :1]
    return np.log(values / first), first[..., 0]


def scaled(factor, interval):
    """(speed-up, low, high) of logs taken about_first, each times the ratio of the first values."""
    return tuple(factor * end for end in interval)


def units(logs: np.ndarray, nodes: np.ndarray | None) -> np.ndarray:
    """The units of evidence of one side (or of the pairs), on the log scale: each run's log where all ran on one
    node (or `nodes` is None); each node's mean log where they ran on several."""
    if nodes is None:
        return logs
    names, which = np.unique(np.asarray(nodes), return_inverse=True)
    if len(names) <= 1:
        return logs
    return np.bincount(which, weights=logs) / np.bincount(which)


def mean_and_variance(values: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """The mean along the last axis, its estimated variance (NaN for one value) and its degrees of freedom."""
    count = values.shape[-1]
    variance = values.var(axis=-1, ddof=1) / count if count > 1 else np.full(values.shape[:-1], np.nan)
    return values.mean(axis=-1), variance, count - 1


def t_interval(centre, variance, df):
    """(exp(centre), and the COVERAGE interval exp(centre -+ t se)) for a centre on the log scale whose estimated
    variance has `df` degrees of freedom (NaN: no interval)."""
    df = np.asarray(df)
    quantile = np.full(df.shape, np.nan)
    for value in np.unique(df[df >= 1]):  # each distinct degrees of freedom once (t_quantile is exact, and cached)
        quantile[df == value] = t_quantile(COVERAGE, int(value))
    half = quantile * np.sqrt(variance)
    return np.exp(centre), np.exp(centre - half), np.exp(centre + half)


def picks(nodes: np.ndarray, rng, samples: int = BOOTSTRAP_SAMPLES) -> np.ndarray | list[np.ndarray]:
    """`samples` draws of run indices (into `nodes`, the node of each run): one array of shape (samples, runs) on one
    node, else a list of index arrays, each all runs of nodes drawn with replacement, resampled within each node."""
    names = np.unique(nodes)
    if len(names) <= 1:
        return rng.integers(0, len(nodes), size=(samples, len(nodes)))
    members = [np.flatnonzero(nodes == name) for name in names]
    drawn = []
    for _ in range(samples):
        chosen = rng.integers(0, len(members), size=len(members))
        drawn.append(np.concatenate([rng.choice(members[c], size=len(members[c])) for c in chosen]))
    return drawn


def per_draw(statistic, values: np.ndarray, drawn) -> np.ndarray:
    """statistic (the baseline's np.median) of `values` over each draw of picks."""
    if isinstance(drawn, np.ndarray):
        return statistic(values[drawn], axis=1)
    return np.array([statistic(values[d]) for d in drawn])


def one_node(count: int) -> np.ndarray:
    return np.zeros(count)


def pairs_of(jax, torch) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """The two sides' runs matched pair by pair, and each pair's node, when every run of both came from paired
    jobs; else None. A pair is one trial of one campaign: a paired job runs exactly one JAX and one PyTorch run per
    trial, on one node."""
    if not len(jax) or "pair_order" not in jax.index.names or "pair_order" not in torch.index.names:
        return None
    keyed, nodes = [], None
    for side in (jax, torch):
        frame = side.reset_index()
        if (frame["pair_order"] == "").any() or frame.duplicated(["campaign", "trial"]).any():
            return None
        keyed.append(frame.set_index(["campaign", "trial"])["value"])
        if nodes is None and "node" in frame:
            nodes = frame.set_index(["campaign", "trial"])["node"]
    if set(keyed[0].index) != set(keyed[1].index):
        return None
    order = sorted(keyed[0].index)
    pair_nodes = nodes.loc[order].to_numpy() if nodes is not None else one_node(len(order))
    return keyed[0].loc[order].to_numpy(dtype=float), keyed[1].loc[order].to_numpy(dtype=float), pair_nodes


# The fewest pairs order_effect tests: three run each way round, the fewest whose variance has two degrees of freedom.
ORDER_EFFECT_MIN_PAIRS = 6


@dataclass(frozen=True)
class OrderEffect:
    jax_first: float  # the speed-up of the pairs run JAX first (the geometric mean of their ratios)
    torch_first: float  # and of those run PyTorch first
    t: float  # Welch's t of the difference of their mean log ratios
    critical: float  # the 95% two-sided quantile at its degrees of freedom (Welch-Satterthwaite, rounded down)

    @property
    def found(self) -> bool:
        return abs(self.t) > self.critical


def order_effect(jax, torch) -> OrderEffect | None:
    """Welch's t test of the pairs' log ratios, run JAX first against run PyTorch first (the run_values series of
    both sides, with their pair_order); None where the runs are not all paired, fewer than ORDER_EFFECT_MIN_PAIRS, or
    fewer than two ran either way round, or where neither group spreads at all."""
    if pairs_of(jax, torch) is None:
        return None
    sides = [side.reset_index().set_index(["campaign", "trial"]) for side in (jax, torch)]
    keys = sorted(sides[0].index)
    logs = np.log(sides[0].loc[keys, "value"].to_numpy(float) / sides[1].loc[keys, "value"].to_numpy(float))
    jax_first = sides[0].loc[keys, "pair_order"].to_numpy() == ",".join(PAIRED_ORDER)
    groups = logs[jax_first], logs[~jax_first]
    if len(logs) < ORDER_EFFECT_MIN_PAIRS or min(len(g) for g in groups) < 2:
        return None
    share = [g.var(ddof=1) / len(g) for g in groups]  # each group mean's variance
    if sum(share) == 0:
        return None
    df = (sum(share) ** 2) / sum(s ** 2 / (len(g) - 1) for s, g in zip(share, groups))
    t = (groups[0].mean() - groups[1].mean()) / np.sqrt(sum(share))
    return OrderEffect(float(np.exp(groups[0].mean())), float(np.exp(groups[1].mean())), float(t),
                       t_quantile(0.95, max(1, int(np.floor(df)))))


def sequential_rule(jax, torch) -> Rule | None:
    """The rule under which every one of these runs (_run_series of both sides) ran, where they are the pairs of
    one campaign and one rule and at least its first stage ran; None otherwise (fixed trials, or runs pooled from
    several campaigns: the t intervals then)."""
    if "trial_rule" not in jax.index.names:
        return None
    labels = set(jax.index.get_level_values("trial_rule")) | set(torch.index.get_level_values("trial_rule"))
    campaigns = set(jax.index.get_level_values("campaign")) | set(torch.index.get_level_values("campaign"))
    rule = parse_rule(labels.pop()) if len(labels) == 1 and len(campaigns) == 1 else None
    first_stage_ran = rule is not None and set(range(rule.first_stage)) <= set(jax.index.get_level_values("trial"))
    return rule if first_stage_ran else None


def sequential_speedup(numerator: np.ndarray, denominator: np.ndarray, rule: Rule) -> tuple[float, float, float]:
    """(speed-up, low, high) of pairs in trial order under `rule`: the geometric mean of the pairs' ratios, and
    Stein's 95% interval about it."""
    return stein_interval(list(np.log(numerator / denominator)), rule.first_stage)
