"""The host allocator's thresholds, fixed alike in both frameworks' processes, so that a timed pass reuses the memory
the pass before it freed, whatever the heap's history.

glibc's malloc gives a freed block above its mmap threshold back to the kernel, and trims the heap's top when more
than its trim threshold lies free there; the next block of that size then faults in fresh pages. Both thresholds
move with what the process has freed so far (glibc's dynamic threshold, up to 32 MiB on 64-bit machines), so which
of a forward pass's buffers go back to the kernel between two passes depends on the process's history, not on the
model. In one process, PyTorch's small CNN at batch 128 on the CPU faulted in 9,376 pages a pass (37 MiB) when
`run_inference` timed it and none in a bare loop right after, and the harness's passes took 70% longer than the
bare loop's ([the harness's overhead](../../docs/performance.md#the-harnesss-overhead)).

`fix_thresholds` sets both with mallopt when a backend prepares its device (both backends do): blocks up to 32 MiB
come from the heap, and up to 2 GiB of free heap stays the process's, so every pass after the first reuses what the
last one freed, in any loop and either framework (XLA's CPU buffers come from the same malloc). Blocks above 32 MiB
are mapped afresh each time, in both frameworks alike. Without glibc nothing is set. The rows say which in
device_details (`cpu.allocator`).
"""

from __future__ import annotations

import ctypes

from bench_contract.results import not_available

# mallopt's parameters, from glibc's malloc.h.
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
MMAP_THRESHOLD = 32 * 2**20  # glibc's largest dynamic mmap threshold on a 64-bit machine (DEFAULT_MMAP_THRESHOLD_MAX)
TRIM_THRESHOLD = 2**31 - 1  # mallopt takes a C int: the largest, 2 GiB

_described = not_available("the backend has not prepared its device")


def fix_thresholds() -> str:
    """Set glibc's mmap and trim thresholds for this process; what was set, or why nothing was."""
    global _described
    try:
        libc = ctypes.CDLL(None)
        mallopt, libc_version = libc.mallopt, libc.gnu_get_libc_version
    except (OSError, AttributeError):
        _described = not_available("the C library is not glibc (no mallopt)")
        return _described
    libc_version.restype = ctypes.c_char_p
    if mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) != 1 or mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD) != 1:
        _described = not_available(f"glibc {libc_version().decode()} refused mallopt's thresholds")
    else:
        _described = f"glibc {libc_version().decode()} malloc: mmap threshold 32 MiB, trim threshold 2 GiB (mallopt)"
    return _described


def described() -> str:
    """What fix_thresholds set in this process, for the rows."""
    return _described
