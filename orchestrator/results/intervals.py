"""The speed-up's 95% interval: a percentile bootstrap of the ratio of the two frameworks' mean throughputs over
their runs (BOOTSTRAP_SAMPLES resamples, a fixed seed), and the runs it resamples.

Runs are resampled with replacement; paired runs (one trial of a paired job: JAX and PyTorch one after the other on
one node) as pairs, so drift a pair shares cancels. Where a side's runs ran on several nodes, the resampling is
hierarchical (issue 31): the nodes are drawn with replacement first, then each drawn node's runs, so that ten runs on
one slow node and one on another count as two nodes' worth of evidence, not eleven independent runs, and a node
effect widens the interval as it should. On one node it is the plain bootstrap, draw for draw.

Pairs that ran under `--trials auto` (all of one campaign, under one sequential rule) get Stein's interval
instead (sequential_speedup): the rule chose their number from the first trials' spread, and that interval is the
one whose coverage it keeps (bench_contract.sequential).
"""

from __future__ import annotations

import numpy as np

from bench_contract.sequential import Rule, parse_rule, stein_interval

BOOTSTRAP_SAMPLES = 2000


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
    """statistic (np.mean, np.median) of `values` over each draw of picks."""
    if isinstance(drawn, np.ndarray):
        return statistic(values[drawn], axis=1)
    return np.array([statistic(values[d]) for d in drawn])


def one_node(count: int) -> np.ndarray:
    return np.zeros(count, dtype=int)


def bootstrap_ratio_ci(numerator: np.ndarray, denominator: np.ndarray, seed: int = 0,
                       numerator_nodes: np.ndarray | None = None,
                       denominator_nodes: np.ndarray | None = None) -> tuple[float, float] | None:
    """95% CI of mean(numerator)/mean(denominator), each side's runs resampled on its own (over its nodes first,
    where they ran on several); None with fewer than two runs on a side."""
    if len(numerator) < 2 or len(denominator) < 2:
        return None
    rng = np.random.default_rng(seed)
    num_nodes = one_node(len(numerator)) if numerator_nodes is None else np.asarray(numerator_nodes)
    den_nodes = one_node(len(denominator)) if denominator_nodes is None else np.asarray(denominator_nodes)
    num_means = per_draw(np.mean, numerator, picks(num_nodes, rng))  # drawn first, as before: same seed, same draws
    ratio = num_means / per_draw(np.mean, denominator, picks(den_nodes, rng))
    low, high = np.percentile(ratio, [2.5, 97.5])
    return float(low), float(high)


def paired_bootstrap_ratio_ci(numerator: np.ndarray, denominator: np.ndarray, seed: int = 0,
                              nodes: np.ndarray | None = None) -> tuple[float, float] | None:
    """95% CI of mean(numerator)/mean(denominator) where numerator[i] and denominator[i] ran as one pair (the
    same trial of one paired job, on one node, one after the other): pairs are resampled together (over the nodes
    first, where they ran on several), so drift that falls on both sides of a pair cancels."""
    if len(numerator) < 2 or len(numerator) != len(denominator):
        return None
    rng = np.random.default_rng(seed)
    drawn = picks(one_node(len(numerator)) if nodes is None else np.asarray(nodes), rng)
    low, high = np.percentile(per_draw(np.mean, numerator, drawn) / per_draw(np.mean, denominator, drawn),
                              [2.5, 97.5])
    return float(low), float(high)


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


def sequential_rule(jax, torch) -> Rule | None:
    """The rule under which every one of these runs (_run_series of both sides) ran, where they are the pairs of
    one campaign and one rule and at least its first stage ran; None otherwise (fixed trials, or runs pooled from
    several campaigns: the bootstrap then)."""
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
