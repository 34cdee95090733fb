"""The node's state at the start and the end of a run's measured window (issue 31): what makes two runs of the same
cell differ although nothing in their settings does.

- On a GPU, per GPU from NVML: the SM clock and its maximum, the temperature, the enforced power limit, the clock
  event ("throttle") reasons in force, ECC and persistence mode; and, over the window, the time NVML counted the GPU
  as held back by its thermal or power policy (nvmlDeviceGetViolationStatus).
- On the host: the bound CPUs' frequency governor and current frequency (Linux's cpufreq), and the load average.

The rows keep both snapshots as JSON in the context column `node_state`, and the metric `throttled`: 1 where a GPU
was slowed down for heat or by its hardware (HW_SLOWDOWNS: a thermal slowdown, the hardware slowdown signal, the
power brake) at either end or for part of the window, 0 where it was not, with the reasons in its note; "not
available" on a CPU, whose throttling NVML cannot see (its frequencies are in node_state). A GPU held at its power
cap is not "throttled": at full load that is how a GPU runs within its limit; the cap and the time at it are in
node_state. The verdict flags a row with a throttled run (orchestrator.results.verdict).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench_contract.measure.host import bound_cpus
from bench_contract.measure.nvml import optional

# nvmlClocksEventReason* bits (nvml.h; "ClocksThrottleReason" before CUDA 12.2), by value: pynvml renamed the
# constants between versions, the bits stayed.
CLOCK_EVENT_REASONS = {
    0x1: "gpu idle", 0x2: "applications clocks setting", 0x4: "software power cap", 0x8: "hardware slowdown",
    0x10: "sync boost", 0x20: "software thermal slowdown", 0x40: "hardware thermal slowdown",
    0x80: "hardware power brake slowdown", 0x100: "display clock setting",
}
HW_SLOWDOWNS = 0x8 | 0x20 | 0x40 | 0x80  # heat or the hardware's own signal: the run measured a slowed GPU
# nvmlPerfPolicyType_t: the policies whose violation time the window records
PERF_POLICIES = {"power": 0, "thermal": 1}
CPUFREQ = Path("/sys/devices/system/cpu")


@dataclass
class NodeState:
    """Snapshots at start() and at record(); the GPUs are NVML handles (an energy meter's), none on a CPU."""

    nvml: Any = None
    handles: list[Any] = field(default_factory=list)
    cpufreq: Path = CPUFREQ
    at_start: dict[str, Any] = field(default_factory=dict)
    held_at_start: list[dict[str, float | None]] = field(default_factory=list)

    @classmethod
    def start(cls, meter=None, cpufreq: Path = CPUFREQ) -> "NodeState":
        """From the energy meter's NVML session and GPUs (bench_contract.measure.energy.EnergyMeter), if any."""
        nvml = getattr(meter, "nvml", None)
        state = cls(nvml, list(getattr(meter, "handles", None) or []) if nvml is not None else [], cpufreq)
        state.at_start, state.held_at_start = state.snapshot(), state.held_back()
        return state

    def snapshot(self) -> dict[str, Any]:
        out: dict[str, Any] = {"cpu": cpu_state(bound_cpus(), self.cpufreq)}
        if self.handles:
            out["gpus"] = [gpu_state(self.nvml, h) for h in self.handles]
        return out

    def held_back(self) -> list[dict[str, float | None]]:
        """Per GPU, NVML's counted time (s) held back by each of PERF_POLICIES so far; None where not supported."""
        return [{name: violation_s(self.nvml, h, policy) for name, policy in PERF_POLICIES.items()}
                for h in self.handles]

    def record(self, rows) -> None:
        """The end snapshot, both snapshots and the window's held-back time in node_state, and `throttled`."""
        at_end = self.snapshot()
        held = [{name: None if before[name] is None or after[name] is None else after[name] - before[name]
                 for name in PERF_POLICIES} for before, after in zip(self.held_at_start, self.held_back())]
        rows.context["node_state"] = json.dumps({"start": self.at_start, "end": at_end, "held_back_s": held},
                                                sort_keys=True)
        if not self.handles:
            rows.add_unavailable("throttled", "flag", "a CPU's throttling is not read (its frequency is in node_state)")
            return
        reasons = slowdowns([self.at_start, at_end], held)
        rows.add("throttled", float(bool(reasons)), "flag", note="; ".join(reasons) or "no slowdown")


def slowdowns(snapshots: list[dict[str, Any]], held: list[dict[str, float | None]]) -> list[str]:
    """The slowdowns of any GPU in the snapshots (HW_SLOWDOWNS), and thermal time held back over the window."""
    found = []
    for when, snapshot in zip(("start", "end"), snapshots):
        for index, gpu in enumerate(snapshot.get("gpus", [])):
            mask = gpu.get("clock_event_reasons_mask")
            if isinstance(mask, int) and mask & HW_SLOWDOWNS:
                found.append(f"GPU {index} at the {when}: {', '.join(reason_names(mask & HW_SLOWDOWNS))}")
    for index, window in enumerate(held):
        if window.get("thermal"):
            found.append(f"GPU {index} held back for heat {window['thermal']:.3g} s of the window")
    return found


def reason_names(mask: int) -> list[str]:
    return [name for bit, name in CLOCK_EVENT_REASONS.items() if mask & bit]


def gpu_state(nvml: Any, handle: Any) -> dict[str, Any]:
    """One GPU's clocks, temperature, power limit, clock event reasons, ECC and persistence mode; a query the GPU
    does not answer is "not available: ..." (a MIG instance answers fewer)."""
    reasons = optional(clock_event_reasons, nvml, handle)
    return {
        "sm_clock_mhz": optional(lambda: nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM)),
        "sm_clock_max_mhz": optional(lambda: nvml.nvmlDeviceGetMaxClockInfo(handle, nvml.NVML_CLOCK_SM)),
        "temperature_c": optional(lambda: nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU)),
        "power_limit_w": optional(lambda: nvml.nvmlDeviceGetEnforcedPowerLimit(handle) / 1000.0),
        "clock_event_reasons_mask": reasons,
        "clock_event_reasons": reason_names(reasons) if isinstance(reasons, int) else reasons,
        "ecc": optional(lambda: "enabled" if nvml.nvmlDeviceGetEccMode(handle)[0] else "disabled"),
        "persistence_mode": optional(lambda: "enabled" if nvml.nvmlDeviceGetPersistenceMode(handle) else "disabled"),
    }


def clock_event_reasons(nvml: Any, handle: Any) -> int:
    """The reasons' bit mask, by the newer name where pynvml has it."""
    read = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or nvml.nvmlDeviceGetCurrentClocksThrottleReasons
    return int(read(handle))


def violation_s(nvml: Any, handle: Any, policy: int) -> float | None:
    try:
        return nvml.nvmlDeviceGetViolationStatus(handle, policy).violationTime / 1e9  # ns
    except Exception:  # noqa: BLE001  not every GPU and driver counts it
        return None


def cpu_state(cpus: list[int], cpufreq: Path = CPUFREQ) -> dict[str, Any]:
    """The bound CPUs' governors and mean current and maximum frequency (MHz) from cpufreq, and the load average;
    "not available: ..." where cpufreq is not there (most virtual machines, containers without /sys)."""
    governors = sorted({read_text(cpufreq / f"cpu{c}" / "cpufreq" / "scaling_governor") for c in cpus} - {None})
    current = [read_number(cpufreq / f"cpu{c}" / "cpufreq" / "scaling_cur_freq") for c in cpus]
    maximum = [read_number(cpufreq / f"cpu{c}" / "cpufreq" / "cpuinfo_max_freq") for c in cpus]
    missing = "not available: no cpufreq for the bound CPUs (a virtual machine or a container without it)"
    return {
        "governor": ",".join(governors) or missing,
        "frequency_mhz": mean_mhz(current) or missing,
        "max_frequency_mhz": mean_mhz(maximum) or missing,
        "load_average": os.getloadavg()[0] if hasattr(os, "getloadavg") else "not available: no getloadavg",
    }


def mean_mhz(khz: list[float | None]) -> float | None:
    known = [v for v in khz if v is not None]
    return round(sum(known) / len(known) / 1000.0, 1) if known else None


def read_text(path: Path) -> str | None:
    try:
        return path.read_text().strip() or None
    except OSError:
        return None


def read_number(path: Path) -> float | None:
    text = read_text(path)
    try:
        return float(text) if text is not None else None
    except ValueError:
        return None
