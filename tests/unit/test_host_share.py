"""Whether a run's CPUs were its own while it measured (bench_contract.measure.host): the share of the bound
CPUs' time other processes used, from /proc/stat less the process's own CPU time, on a fake /proc/stat and clock;
and the verdict that calls a run on shared CPUs not reliable."""

import os

import pytest
from helpers import result_context
from test_verdict import ENOUGH, row

from bench_contract.measure import host
from bench_contract.measure.host import SHARED_CPUS, HostShare
from bench_contract.results import ResultRows
from orchestrator.results.verdict import verdict


def stat_text(busy: dict[int, int], idle: int = 5000) -> str:
    """/proc/stat with cpuN lines whose user field holds `busy` ticks (the others but idle 0)."""
    lines = ["cpu  1 2 3 4 5 6 7 8 9 10"]
    lines += [f"cpu{cpu} {ticks} 0 0 {idle} 0 0 0 0 0 0" for cpu, ticks in busy.items()]
    return "\n".join(lines + ["intr 1 2 3", "ctxt 99"]) + "\n"


class Clock:
    def __init__(self):
        self.wall = self.cpu = 0.0

    def advance(self, wall: float, own_cpu: float) -> None:
        self.wall += wall
        self.cpu += own_cpu


@pytest.fixture
def machine(tmp_path, monkeypatch):
    """Two bound CPUs, a /proc/stat the test writes, and a clock and CPU time the test moves."""
    stat, clock = tmp_path / "stat", Clock()
    monkeypatch.setattr(host, "PROC_STAT", stat)
    monkeypatch.setattr(host, "bound_cpus", lambda: [0, 1])
    monkeypatch.setattr(host.time, "perf_counter", lambda: clock.wall)
    monkeypatch.setattr(host.time, "process_time", lambda: clock.cpu)
    monkeypatch.setattr(host.time, "sleep", lambda seconds: clock.advance(seconds, 0.0))
    return stat, clock


def measured(clock: Clock, wall: float, own_cpu: float, during=lambda: None) -> dict:
    """The rows of a window of `wall` seconds in which this process used `own_cpu` seconds of CPU (and `during`
    ran, to change /proc/stat), as {metric: (value, note)}."""
    share = HostShare.start()
    clock.advance(wall, own_cpu)
    during()
    rows = ResultRows(result_context())
    share.record(rows, threads=2)
    return {r["metric"]: (r["value"], r["note"]) for r in rows.rows}


def test_other_processes_share_of_the_bound_cpus_is_their_busy_time_less_our_own(machine):
    stat, clock = machine
    ticks = os.sysconf("SC_CLK_TCK")
    stat.write_text(stat_text({0: 1000, 1: 1000, 2: 7000}))
    # 2 s of wall time; the bound CPUs were busy 1.5 s each (3 s), this process used 1 s: others used 2 of 4 s.
    later = stat_text({0: 1000 + int(1.5 * ticks), 1: 1000 + int(1.5 * ticks), 2: 9000})
    found = measured(clock, wall=2.0, own_cpu=1.0, during=lambda: stat.write_text(later))
    assert found["host_cpu_others"][0] == pytest.approx(0.5)
    assert found["host_cpu_own"][0] == pytest.approx(0.25)  # 1 s of CPU over 2 s on 2 threads
    assert "involuntary_switches_per_s" in found and "load_average" in found


def test_a_window_too_short_for_the_ticks_is_extended_to_a_second_and_without_proc_stat_not_available(machine):
    """A run timed for under a second recorded "not available", so sharing went unflagged where it hurts most."""
    stat, clock = machine
    ticks = os.sysconf("SC_CLK_TCK")
    stat.write_text(stat_text({0: 10, 1: 10}))
    # 0.25 s measured with 0.25 s of our CPU, then idle to 1 s: the bound CPUs were busy 0.75 s in all, so others
    # used 0.5 of the 2 CPU-seconds.
    later = stat_text({0: 10 + int(0.5 * ticks), 1: 10 + int(0.25 * ticks)})
    found = measured(clock, wall=0.25, own_cpu=0.25, during=lambda: stat.write_text(later))
    value, note = found["host_cpu_others"]
    assert value == pytest.approx(0.25) and note.startswith("over 1 s: the 0.25 s measured, then 0.75 s with this")
    assert found["host_cpu_own"][0] == pytest.approx(0.5)  # our own share stays the measured window's
    stat.unlink()
    value, note = measured(clock, wall=2.0, own_cpu=1.0)["host_cpu_others"]
    assert value is None and "no /proc/stat" in note


@pytest.mark.parametrize("others, reliable", [(SHARED_CPUS * 0.9, True), (SHARED_CPUS * 1.1, False)])
def test_a_run_whose_cpus_were_shared_is_not_reliable(others, reliable):
    found = verdict(row(torch_host_cpu_others=others), ENOUGH, nodes=1)
    assert found.reliable is reliable
    assert ("PyTorch's CPUs were shared: other processes used 11% of them" in found.text) is not reliable
