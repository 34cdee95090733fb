"""A count of torch.compile compilations in this process, from TorchDynamo's own counters.

Dynamo counts every graph it captures and compiles (`counters["stats"]["unique_graphs"]`), the first
compilation and every recompilation after a guard failed (a new shape, dtype or Python value). Eager
PyTorch never compiles: when torch._dynamo has not even been imported, nothing can have been compiled, and
the count is 0 without paying for that import (about 2 s).

A graph break is where Dynamo stopped capturing (an unsupported call, data-dependent control flow) and ran the
code up to the next capture eagerly: a compiled step with graph breaks is partly eager. Dynamo counts them by
reason (`counters["graph_break"]`).
"""

from __future__ import annotations

import sys


def count() -> int:
    """Graphs compiled so far in this process."""
    if "torch._dynamo" not in sys.modules:
        return 0
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


def graph_breaks() -> dict[str, int]:
    """Graph breaks so far in this process, by reason (its explanation's first words where Dynamo gives one):
    places where a compiled function ran eagerly between graphs."""
    if "torch._dynamo" not in sys.modules:
        return {}
    from torch._dynamo.utils import counters

    reasons: dict[str, int] = {}
    for reason, count in counters["graph_break"].items():
        lines = [line.strip() for line in reason.splitlines() if line.strip()]
        explanation = next((line.removeprefix("Explanation: ") for line in lines if line.startswith("Explanation:")),
                           lines[0] if lines else "unknown")
        reasons[explanation] = reasons.get(explanation, 0) + int(count)
    return reasons
