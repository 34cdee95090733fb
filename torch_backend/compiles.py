"""A count of torch.compile compilations in this process, from TorchDynamo's own counters.

Dynamo counts every graph it captures and compiles (`counters["stats"]["unique_graphs"]`), the first
compilation and every recompilation after a guard failed (a new shape, dtype or Python value). Eager
PyTorch never compiles: when torch._dynamo has not even been imported, nothing can have been compiled, and
the count is 0 without paying for that import (about 2 s).
"""

from __future__ import annotations

import sys


def count() -> int:
    """Graphs compiled so far in this process."""
    if "torch._dynamo" not in sys.modules:
        return 0
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])
