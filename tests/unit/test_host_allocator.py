"""The host allocator's thresholds (bench_contract.measure.allocator): freed memory stays the process's, so a pass
reuses what the last one freed; the rows say what was set."""

import json
import subprocess
import sys

from helpers import REPO_ROOT

# Two rounds of what a forward pass does to the heap: three 16 MiB buffers written and freed. The first 16 MiB block
# is mapped (above glibc's first threshold, 128 KiB) and its free raises the dynamic thresholds (mmap 16 MiB, trim
# 32 MiB); the three of the first round then come from the heap, and freeing them leaves 48 MiB free at its top,
# over the trim threshold, which glibc gives back. The second round faults all 12,288 pages in again, unless the
# thresholds were fixed first. Run in a process of its own: the thresholds are the process's.
ROUNDS = """
import json, resource, sys
import numpy as np
from bench_contract.measure import allocator
if sys.argv[1] == "fixed":
    allocator.fix_thresholds()
faults = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_minflt
np.ones(2**22, np.float32)  # one mapped block freed: the dynamic thresholds rise to its size
counts = []
for _ in range(2):
    before = faults()
    buffers = [np.ones(2**22, np.float32) for _ in range(3)]
    del buffers
    counts.append(faults() - before)
print(json.dumps({"faults": counts, "allocator": allocator.described()}))
"""
PAGES = 3 * 16 * 2**20 // 4096  # the second round's pages, at 4 KiB


def rounds(mode: str) -> dict:
    proc = subprocess.run([sys.executable, "-c", ROUNDS, mode], capture_output=True, text=True, check=True,
                          cwd=REPO_ROOT, env={"PYTHONPATH": str(REPO_ROOT), "PATH": "/usr/bin:/bin"})
    return json.loads(proc.stdout)


def test_a_second_round_of_buffers_reuses_the_memory_the_first_freed():
    fixed = rounds("fixed")
    assert fixed["faults"][1] < PAGES // 100, fixed  # none of its pages faulted in again (a few of Python's own)
    assert fixed["allocator"].startswith("glibc ") and "mmap threshold 32 MiB" in fixed["allocator"]


def test_without_the_thresholds_the_heap_history_decides():
    """What the fix is for, shown on this machine's glibc: the same rounds fault their pages in again. Where the
    kernel backs the heap with huge pages (THP `always`), a fault is 2 MiB and the count is 512 times smaller."""
    unfixed = rounds("unfixed")
    assert unfixed["faults"][1] > PAGES // 512 // 2, unfixed
    assert unfixed["allocator"].startswith("not available")


def test_the_rows_device_details_name_the_allocator():
    from bench_contract.measure import allocator
    from bench_contract.measure.device import device_details

    assert device_details("cpu")["cpu"]["allocator"] == allocator.described()
