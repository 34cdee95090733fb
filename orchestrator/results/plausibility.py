"""Patterns across batch sizes that measurement cannot produce, only noise can: a step at a larger batch several
times faster than at a smaller one, or throughput falling tenfold from one batch size to the next. Seen in a
campaign on a shared machine: PyTorch's inference took 32.6 ms at batch 8 and 5.23 ms at batch 128, and its speed-up
at batch 8 read 66.9x (issue 31). Such a row is flagged below its table and is never called reliable (verdict).

Each framework's cells are compared along the batch sizes of one comparison series: the same device, cell key but
the batch, and settings.
"""

from __future__ import annotations

import numpy as np

from bench_contract.spec import FRAMEWORK_TITLES
from orchestrator.results.compare import CPU_SETTINGS, FRAMEWORKS

# A step of a larger batch does at least the work of a smaller one's: one that takes less than half the time is
# noise, not overhead amortised (a fixed overhead makes the larger step at most as fast as the smaller, never twice).
STEP_FASTER = 2.0
# Throughput may fall when a larger batch spills a cache or memory, by a factor of two or three; by ten, a run was
# disturbed.
THROUGHPUT_FALL = 10.0
SERIES = ["device_kind", "device_model", "benchmark", "use_case", "model", "precision", "settings", *CPU_SETTINGS]


def implausible_notes(frame) -> list[str]:
    """Per row of a comparison frame (compare.comparison_frame), what is implausible about it and the row of the
    same series it contradicts, in words; "" where nothing is."""
    notes = {index: [] for index in frame.index}
    if frame.empty:
        return []
    series = [c for c in SERIES if c in frame]
    for _, block in frame.groupby(series, dropna=False, sort=False):
        block = block.sort_values("batch_size")
        for framework in FRAMEWORKS:
            for (small, a), (large, b) in zip(block.iloc[:-1].iterrows(), block.iloc[1:].iterrows()):
                for note in contradictions(framework, a, b):
                    notes[small].append(note)
                    notes[large].append(note)
    return ["; ".join(notes[index]) for index in frame.index]


def contradictions(framework: str, small, large) -> list[str]:
    """What a framework's cell at the larger batch (`large`) contradicts in its cell at the smaller (`small`)."""
    title, found = FRAMEWORK_TITLES[framework], []
    step_small, step_large = small.get(f"{framework}_step_time_p50"), large.get(f"{framework}_step_time_p50")
    if measured(step_small) and measured(step_large) and step_large * STEP_FASTER < step_small:
        found.append(f"{title}'s step at batch {large['batch_size']} ({step_large:.3g} ms) is "
                     f"{step_small / step_large:.1f}x faster than at batch {small['batch_size']} "
                     f"({step_small:.3g} ms)")
    rate_small, rate_large = small.get(f"{framework}_throughput"), large.get(f"{framework}_throughput")
    if measured(rate_small) and measured(rate_large) and rate_large * THROUGHPUT_FALL < rate_small:
        found.append(f"{title}'s throughput falls {rate_small / rate_large:.0f}x from batch {small['batch_size']} "
                     f"({rate_small:,.0f} samples/s) to batch {large['batch_size']} ({rate_large:,.0f})")
    return found


def measured(value) -> bool:
    return value is not None and not np.isnan(value) and value > 0
