"""Whether the CPUs a run was bound to were its own while it measured (issue 31). On this 2-core machine, with
another job running, the PyTorch digits MLP trained at 0.8 GFLOP/s against JAX's 35: its two intra-op threads
waited for each other at every operation whenever one was descheduled, and the demo printed "JAX 31.18x". Such a
run looks like any other in its own timings; what gives it away is the machine around it.

Over the measured window (HostShare.start ... record) this records, from Linux's /proc/stat and the process's own
counters:
- `host_cpu_others`: the share of the bound CPUs' time that other processes used: the bound CPUs' busy time
  (user, nice, system, irq, softirq, steal) less this process's CPU time, over the window times the bound CPUs.
  Near 0 on a quiet node; a run above SHARED_CPUS is flagged by the verdict;
- `host_cpu_own`: this process's CPU time over the window times its intra-op threads (how busy it kept them; above
  1 where a framework runs more threads than its intra-op pool, as XLA does);
- `involuntary_switches_per_s`: how often the kernel took a CPU from this process's threads;
- `load_average`: the node's 1-minute load average at the window's end, beside the node's CPU count.
Elsewhere (no /proc/stat) the first is "not available" with the reason; the others are taken where they exist. A
window shorter than MIN_WINDOW_S is extended to it for the first, this process idle meanwhile (its note says so): a
run timed for a fraction of a second is where CPU sharing hurts most, and it must not go unflagged.
"""

from __future__ import annotations

import os
import resource
import time
from dataclasses import dataclass
from pathlib import Path

# Others using more than this share of the bound CPUs' time during the measurement make its numbers doubtful: a
# framework whose threads synchronise at every operation waits for the slowest, so 10% taken from one CPU can cost
# it far more than 10% (the 31x of the module's docstring).
SHARED_CPUS = 0.10
# /proc/stat counts in clock ticks (10 ms): a window of a second holds 100 per CPU, enough for a share to 1%; a
# shorter one is not measured (a test's window of 20 ms gave shares of 0 and 1 for the same quiet machine).
MIN_WINDOW_S = 1.0
PROC_STAT = Path("/proc/stat")
IDLE_FIELDS = (3, 4)  # idle and iowait, among user nice system idle iowait irq softirq steal


def bound_cpus() -> list[int]:
    return sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []


def busy_ticks(cpus: list[int]) -> int | None:
    """The busy clock ticks of `cpus` since boot (every field of /proc/stat's cpuN line but idle and iowait, and
    not guest time, which user already counts), or None where /proc/stat cannot be read."""
    try:
        lines = PROC_STAT.read_text().splitlines()
    except OSError:
        return None
    wanted, total = {f"cpu{c}" for c in cpus}, 0
    for line in lines:
        fields = line.split()
        if fields and fields[0] in wanted:
            ticks = [int(v) for v in fields[1:9]]
            total += sum(t for k, t in enumerate(ticks) if k not in IDLE_FIELDS)
    return total


@dataclass
class HostShare:
    cpus: list[int]
    wall: float
    own_cpu: float
    switches: int
    busy: int | None

    @classmethod
    def start(cls) -> "HostShare":
        cpus = bound_cpus()
        return cls(cpus, time.perf_counter(), time.process_time(), involuntary_switches(), busy_ticks(cpus))

    def record(self, rows, threads: int | None) -> None:
        """The window's rows (the module's docstring), from start() until now."""
        wall = time.perf_counter() - self.wall
        own = time.process_time() - self.own_cpu
        switches = involuntary_switches() - self.switches
        self.record_others(rows, wall)
        if threads and wall > 0:
            rows.add("host_cpu_own", own / (wall * threads), "fraction")
        if wall > 0:
            rows.add("involuntary_switches_per_s", switches / wall, "1/s")
        if hasattr(os, "getloadavg"):
            rows.add("load_average", os.getloadavg()[0], f"processes (node of {os.cpu_count()} CPUs)")

    def record_others(self, rows, measured_s: float) -> None:
        """host_cpu_others over the window, extended to MIN_WINDOW_S where the measurement was shorter."""
        if self.busy is None or busy_ticks(self.cpus) is None or not self.cpus:
            rows.add_unavailable("host_cpu_others", "fraction", "no /proc/stat to read the bound CPUs' busy time")
            return
        if measured_s < MIN_WINDOW_S:
            time.sleep(MIN_WINDOW_S - measured_s)
        wall = time.perf_counter() - self.wall
        others = (busy_ticks(self.cpus) - self.busy) / os.sysconf("SC_CLK_TCK") - (time.process_time() - self.own_cpu)
        note = None if measured_s >= MIN_WINDOW_S else (
            f"over {wall:.2g} s: the {measured_s:.2g} s measured, then {wall - measured_s:.2g} s with this process idle "
            f"(/proc/stat's 10 ms ticks resolve a share to 1% over {MIN_WINDOW_S:g} s)")
        rows.add("host_cpu_others", min(1.0, max(0.0, others / (wall * len(self.cpus)))), "fraction", note=note)


def involuntary_switches() -> int:
    """Involuntary context switches of this process's threads so far (getrusage, the process as a whole)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_nivcsw
