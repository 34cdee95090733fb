"""The speed-up's 95% interval covers the true speed-up at the run counts people use: simulated campaigns
through the product's own interval functions (orchestrator.results.intervals), paired and unpaired, on one node and
on several. The percentile bootstrap the intervals were before covered 76-80% of the time at 3 runs a side.

Each simulated campaign draws its throughputs log-normally about a true speed-up, each side with a between-run
coefficient of variation drawn from 5-15% (the spreads a shared machine shows; the two sides' differ, which Welch's
interval must withstand). Paired runs also share a drift per pair, a node's speed moving between trials, which
falls on both runs of a pair alike. Fixed seeds: the shares are the same on every machine.

The Monte-Carlo margin: a share estimated from CAMPAIGNS = 2000 campaigns has a binomial standard error of
sqrt(0.95 * 0.05 / 2000) = 0.0049 where the coverage is 95%, so an interval that keeps its 95% falls below
LEAST_COVERAGE = 93% with probability under 1e-4 (4.1 standard errors), while the bootstrap's 76-80% lies 30 standard
errors below it.
"""

import numpy as np
import pytest

from orchestrator.results.intervals import paired_speedup_interval, speedup_interval
from orchestrator.results.verdict import MIN_RUNS

CAMPAIGNS = 2000
LEAST_COVERAGE = 0.93
TRUE_SPEEDUP = 1.3
SPREADS = (0.05, 0.15)  # each side's between-run CV, drawn per campaign from this range
PAIR_DRIFT = 0.10  # the standard deviation, on the log scale, of a pair's shared drift
# The fewest runs the verdict calls reliable (MIN_RUNS), and more: the counts people use.
RUN_COUNTS = sorted({MIN_RUNS, 3, 5, 10})


def log_normal(rng, shape: tuple[int, ...], typical: float) -> np.ndarray:
    """Throughputs about `typical` (their median) with a between-run CV drawn per campaign from SPREADS: a
    log-normal's CV is sqrt(exp(sigma^2) - 1), so sigma = sqrt(log(1 + CV^2))."""
    cv = rng.uniform(*SPREADS, size=(*shape[:-1], 1))
    return typical * np.exp(rng.normal(0.0, 1.0, shape) * np.sqrt(np.log1p(cv ** 2)))


def campaigns(seed: int, runs: int, paired: bool) -> tuple[np.ndarray, np.ndarray]:
    """CAMPAIGNS simulated campaigns of `runs` runs a side, JAX's and PyTorch's throughputs (campaigns, runs)."""
    rng = np.random.default_rng(seed)
    shape = (CAMPAIGNS, runs)
    drift = np.exp(rng.normal(0.0, PAIR_DRIFT, shape)) if paired else 1.0
    return log_normal(rng, shape, 1000.0 * TRUE_SPEEDUP) * drift, log_normal(rng, shape, 1000.0) * drift


def node_speeds(rng, nodes: np.ndarray, spread: float) -> np.ndarray:
    """Each run's factor for its node's speed, drawn per campaign and node (campaigns, runs)."""
    return np.exp(rng.normal(0.0, spread, (CAMPAIGNS, nodes.max() + 1)))[:, nodes]


def covered(low, high) -> float:
    return float(np.mean((low <= TRUE_SPEEDUP) & (TRUE_SPEEDUP <= high)))


@pytest.mark.parametrize("paired", [False, True], ids=["unpaired", "paired"])
@pytest.mark.parametrize("runs", RUN_COUNTS)
def test_the_speed_ups_interval_covers_the_true_speed_up_at_the_run_counts_people_use(runs, paired):
    jax, torch = campaigns(seed=runs, runs=runs, paired=paired)
    interval = paired_speedup_interval if paired else speedup_interval
    speedup, low, high = interval(jax, torch)
    assert covered(low, high) >= LEAST_COVERAGE
    # The printed speed-up is the interval's centre on the log scale.
    assert np.allclose(speedup, np.sqrt(low * high), rtol=1e-12)


@pytest.mark.parametrize("paired", [False, True], ids=["unpaired", "paired"])
@pytest.mark.parametrize("per_node, node_spread", [
    ((2, 2, 2), 0.05),  # three nodes, each 5% faster or slower than the next (log-scale standard deviation)
    ((10, 1), 0.0),  # ten runs on one node and one on another, which differ by nothing but the runs' own spread
    ((10, 1), 0.05),
])
def test_runs_on_several_nodes_keep_the_coverage_with_the_nodes_as_units(per_node, node_spread, paired):
    """Runs on several nodes are counted by node: each node's speed is drawn per campaign, for each side
    (unpaired) or for the pairs; the interval over the nodes' means keeps its coverage however the runs fall."""
    rng = np.random.default_rng(len(per_node) + int(100 * node_spread))
    nodes = np.repeat(np.arange(len(per_node)), per_node)
    jax, torch = campaigns(seed=len(nodes), runs=len(nodes), paired=paired)
    jax = jax * node_speeds(rng, nodes, node_spread)  # in pairs, a node where JAX runs relatively faster
    if paired:
        ends = [paired_speedup_interval(a, b, nodes=nodes)[1:] for a, b in zip(jax, torch)]
    else:
        torch = torch * node_speeds(rng, nodes, node_spread)
        ends = [speedup_interval(a, b, numerator_nodes=nodes, denominator_nodes=nodes)[1:] for a, b in zip(jax, torch)]
    low, high = np.array(ends).T
    assert covered(low, high) >= LEAST_COVERAGE
