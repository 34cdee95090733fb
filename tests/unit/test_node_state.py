"""The node's state at both ends of a run's measured window (bench_contract.measure.node_state): the GPUs'
clocks, heat and clock event reasons from NVML (a fake pynvml here), the CPUs' governor and frequency from a fake
cpufreq folder; a GPU slowed down for heat is flagged `throttled`, one held at its power cap is not; and the verdict
says so."""

import dataclasses
import json

import pytest
from fake_nvml import FakeGpu, fake_pynvml
from helpers import result_context
from test_verdict import ENOUGH, row

from bench_contract.measure import node_state
from bench_contract.measure.node_state import NodeState
from bench_contract.results import ResultRows
from orchestrator.results.verdict import verdict


@pytest.fixture
def cpufreq(tmp_path, monkeypatch):
    """Two bound CPUs under the performance governor, at 2.0 and 2.4 GHz of 3.0."""
    monkeypatch.setattr(node_state, "bound_cpus", lambda: [0, 1])
    for cpu, khz in ((0, 2_000_000), (1, 2_400_000)):
        folder = tmp_path / f"cpu{cpu}" / "cpufreq"
        folder.mkdir(parents=True)
        (folder / "scaling_governor").write_text("performance\n")
        (folder / "scaling_cur_freq").write_text(f"{khz}\n")
        (folder / "cpuinfo_max_freq").write_text("3000000\n")
    return tmp_path


class Meter:
    """What NodeState takes from an energy meter: its NVML session and GPUs."""

    def __init__(self, gpus):
        self.nvml, self.handles = fake_pynvml(gpus), gpus


def window(meter=None, cpufreq=None) -> tuple[dict, dict]:
    state = NodeState.start(meter, cpufreq=cpufreq) if cpufreq else NodeState.start(meter)
    rows = ResultRows(result_context())
    state.record(rows)
    found = {r["metric"]: (r["value"], r["note"]) for r in rows.rows}
    return json.loads(rows.context["node_state"]), found


def test_a_cpu_run_records_the_governor_frequency_and_load_and_no_throttle_flag(cpufreq):
    state, found = window(cpufreq=cpufreq)
    for end in ("start", "end"):
        cpu = state[end]["cpu"]
        assert (cpu["governor"], cpu["frequency_mhz"], cpu["max_frequency_mhz"]) == ("performance", 2200.0, 3000.0)
        assert cpu["load_average"] >= 0
    assert found["throttled"][0] is None and found["throttled"][1].startswith("not available")


def test_without_cpufreq_the_frequency_is_not_available_with_the_reason(tmp_path, monkeypatch):
    monkeypatch.setattr(node_state, "bound_cpus", lambda: [0])
    state, _ = window(cpufreq=tmp_path)
    assert state["start"]["cpu"]["governor"].startswith("not available: no cpufreq")


@pytest.mark.parametrize("gpu, throttled, note", [
    (FakeGpu(), 0.0, "no slowdown"),
    # Held at its power cap at full load: how a GPU runs within its limit, not a slowdown.
    (FakeGpu(clock_event_reasons=[0x4]), 0.0, "no slowdown"),
    (FakeGpu(clock_event_reasons=[0, 0x40]), 1.0, "GPU 0 at the end: hardware thermal slowdown"),
    (FakeGpu(clock_event_reasons=[0x8 | 0x4]), 1.0, "GPU 0 at the start: hardware slowdown"),
    # Nothing in force at either end, but NVML counted 0.25 s held back for heat in between.
    (FakeGpu(thermal_violation_ns=[10**9, 10**9 + 250_000_000]), 1.0, "GPU 0 held back for heat 0.25 s"),
])
def test_a_gpu_slowed_down_for_heat_or_by_its_hardware_is_flagged_throttled(cpufreq, gpu, throttled, note):
    gpu = dataclasses.replace(gpu, reads={})  # its readings from the first: mutmut runs a test again in one process
    state, found = window(Meter([gpu]), cpufreq)
    assert found["throttled"][0] == throttled and found["throttled"][1].startswith(note)
    start = state["start"]["gpus"][0]
    assert (start["sm_clock_mhz"], start["sm_clock_max_mhz"], start["temperature_c"]) == (345, 1980, 41)
    assert (start["power_limit_w"], start["ecc"], start["persistence_mode"]) == (700.0, "enabled", "enabled")


def test_a_query_a_gpu_does_not_answer_is_not_available_not_a_failure(cpufreq):
    state, found = window(Meter([FakeGpu(ecc=None, thermal_violation_ns=None)]), cpufreq)
    assert state["start"]["gpus"][0]["ecc"].startswith("not available: NVML")
    assert state["held_back_s"] == [{"power": 0.0, "thermal": None}] and found["throttled"][0] == 0.0


def test_the_verdict_calls_a_row_with_a_throttled_run_not_reliable():
    said = verdict(row(torch_throttled_runs=2.0), ENOUGH, nodes=1)
    assert not said.reliable and "PyTorch's GPU was throttled in 2 of 3 runs" in said.text
    assert verdict(row(torch_throttled_runs=0.0, jax_throttled_runs=float("nan")), ENOUGH, nodes=1).reliable


def test_collect_counts_the_throttled_runs_of_each_side_into_the_verdict(tmp_path):
    from helpers import run_cli, task_file

    task_file(tmp_path, "jax", 32, 2000.0, metrics={"throttled": 0.0})
    task_file(tmp_path, "torch", 32, 1000.0, metrics={"throttled": 1.0})
    proc = run_cli("collect", "--results-dir", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert "PyTorch's GPU was throttled in 1 of 1 runs" in proc.stdout and "JAX's GPU was throttled" not in proc.stdout
