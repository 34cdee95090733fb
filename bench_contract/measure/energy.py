"""GPU energy over the timed region, through NVML.

The first choice is the GPU's own energy counter (`nvmlDeviceGetTotalEnergyConsumption`, millijoules since the
driver loaded, Volta and later), read when the region opens and when it closes. Where the counter is not
supported (NVMLError_NotSupported), a thread samples `nvmlDeviceGetPowerUsage` (milliwatts) from the first
window's opening until the result is read, every window's two ends are sampled too, and power is integrated
over each window (trapezoids); fewer than MIN_POWER_SAMPLES samples strictly inside the windows is refused,
because energy from the samples at a window's two ends is a guess. Where neither works (a CPU run, no NVIDIA
driver), the result is "not available" with the reason, never 0.

A region may be opened and closed many times (`resume`/`pause`): training opens a window for each timed step,
so that the host's work between steps (the next batch, the loss read, the rows) stays out of it. The energy and
the wall time of all its windows are summed.
"""

from __future__ import annotations

import threading
import time
from bisect import bisect_left, bisect_right
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bench_contract.measure.nvml import NvmlUnavailable, resolve, start

POWER_INTERVAL_S = 0.02  # NVML refreshes power every 20-100 ms depending on the GPU
MIN_POWER_SAMPLES = 10
# NVML's energy counter moves in steps: on an H200 (driver 580) once every 100 ms, measured by gpu_check's probe.
# Read at both ends of a window of D seconds it is off by less than one step's energy, so by less than T/D of the
# window's energy (T the update period); N windows, less than N*T/D. Energy is reported only where that bound is
# at most MAX_COUNTER_ERROR: one window of at least T/MAX_COUNTER_ERROR seconds (2 s on that H200). Per-step
# windows of a millisecond each gave 1,500 to 4,500 W on a 700 W GPU there.
MAX_COUNTER_ERROR = 0.05
COUNTER_PROBE_S = 0.5  # how long the update period is looked for; a counter slower than that counts as that slow


def counter_update_period(read: Callable[[], float], clock: Callable[[], float] = time.perf_counter,
                          timeout_s: float = COUNTER_PROBE_S) -> float:
    """Seconds between two successive changes of an energy counter (`read`), watched for at most timeout_s; a
    counter that did not change twice in that time is taken to be that slow (an upper bound, so refusals err on
    the safe side)."""
    start, last, changes = clock(), read(), []
    while clock() - start < timeout_s and len(changes) < 2:
        value = read()
        if value != last:
            changes.append(clock())
            last = value
    return changes[1] - changes[0] if len(changes) == 2 else timeout_s


@dataclass(frozen=True)
class EnergyResult:
    joules: float | None
    window_s: float
    method: str  # how it was measured, or "not available: <reason>" (then joules is None)

    def record(self, rows, samples: int) -> None:
        """Add energy_timed, energy_window_time, energy_per_sample and samples_per_joule to the rows."""
        if self.joules is None:
            reason = self.method.removeprefix("not available: ")
            for metric, unit in (("energy_timed", "J"), ("energy_window_time", "s"),
                                 ("energy_per_sample", "J/sample"), ("samples_per_joule", "samples/J")):
                rows.add_unavailable(metric, unit, reason)
            return
        rows.add("energy_timed", self.joules, "J", note=self.method)
        rows.add("energy_window_time", self.window_s, "s", note=self.method)
        rows.add("energy_per_sample", self.joules / samples, "J/sample", note=self.method)
        rows.add("samples_per_joule", samples / self.joules, "samples/J", note=self.method)


class EnergyMeter:
    """Energy of the process's GPUs over the windows between resume() and pause(); also a context manager
    for one window. Without GPUs (or NVML), every call is cheap and the result says why nothing was measured."""

    def __init__(self, *, unavailable: str | None = None, nvml: Any = None, handles: list[Any] = (),
                 clock: Callable[[], float] = time.perf_counter, interval_s: float = POWER_INTERVAL_S,
                 counter_period_s: float | None = None) -> None:
        self.unavailable, self.nvml, self.handles = unavailable, nvml, list(handles)
        # How often the energy counter moves (counter_update_period): meter_for measures it; None where nobody did.
        self.counter_period_s = counter_period_s
        self.clock, self.interval_s = clock, interval_s
        self.window_s = 0.0
        self.counter_mj = 0.0
        self.windows: list[tuple[float, float]] = []
        self.samples: list[tuple[float, float]] = []  # (time, watts summed over the GPUs)
        self._open_at: float | None = None
        self._counter_at_open = 0.0
        self._sampler: threading.Thread | None = None
        self._stop = threading.Event()
        self.method = None
        if self.unavailable is None:
            self.method = self._choose_method()

    def _choose_method(self) -> str:
        not_supported = getattr(self.nvml, "NVMLError_NotSupported", ())
        try:
            self._read_counter_mj()
            return "counter"
        except not_supported:
            pass  # before Volta: no counter, but power readings may exist
        except Exception as exc:
            self.unavailable = f"NVML's energy counter could not be read: {exc}"
            return None
        try:
            self._read_power_w()
            return "power sampling"
        except Exception as exc:
            self.unavailable = f"the GPU supports neither NVML's energy counter nor its power reading ({exc})"
            return None

    def _read_counter_mj(self) -> float:
        return float(sum(self.nvml.nvmlDeviceGetTotalEnergyConsumption(h) for h in self.handles))

    def _read_power_w(self) -> float:
        return sum(self.nvml.nvmlDeviceGetPowerUsage(h) for h in self.handles) / 1000.0

    @property
    def min_window_s(self) -> float:
        """The shortest single window whose energy this meter reports (MAX_COUNTER_ERROR); 0 where any will do."""
        if self.method != "counter" or not self.counter_period_s:
            return 0.0
        return self.counter_period_s / MAX_COUNTER_ERROR

    def counter_error_bound(self) -> float | None:
        """Upper bound of the counter's relative error over the windows: N windows x T / their total time."""
        if not self.counter_period_s or self.window_s <= 0:
            return None
        return len(self.windows) * self.counter_period_s / self.window_s

    @property
    def running(self) -> bool:
        return self._open_at is not None

    def resume(self) -> None:
        """Open a window (no-op if one is open)."""
        if self.unavailable is not None or self.running:
            return
        if self.method == "counter":
            self._counter_at_open = self._read_counter_mj()
            self._open_at = self.clock()
            return
        self._open_at = self.clock()
        self.samples.append((self._open_at, self._read_power_w()))  # both ends of a window are sampled
        if self._sampler is None:
            # One sampler for all the windows, running until result(): a window as short as one training step
            # still gets the samples that fall inside it, where a sampler started per window would fire only
            # after it had closed. Samples between windows are neither counted nor integrated.
            self._stop.clear()
            self._sampler = threading.Thread(target=self._sample, name="power-sampler", daemon=True)
            self._sampler.start()

    def pause(self) -> None:
        """Close the open window (no-op if none is open)."""
        if self.unavailable is not None or not self.running:
            return
        if self.method == "counter":
            closed_at = self.clock()
            self.counter_mj += self._read_counter_mj() - self._counter_at_open
        else:
            closed_at = self.clock()
            self.samples.append((closed_at, self._read_power_w()))
        self.windows.append((self._open_at, closed_at))
        self.window_s += closed_at - self._open_at
        self._open_at = None

    def _sample(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.samples.append((self.clock(), self._read_power_w()))

    def __enter__(self) -> "EnergyMeter":
        self.resume()
        return self

    def __exit__(self, *exc) -> None:
        self.pause()

    def _stop_sampling(self) -> None:
        if self._sampler is not None:
            self._stop.set()
            self._sampler.join()
            self._sampler = None

    def result(self) -> EnergyResult:
        self.pause()
        self._stop_sampling()
        if self.unavailable is not None:
            return EnergyResult(None, self.window_s, f"not available: {self.unavailable}")
        if not self.windows:
            return EnergyResult(None, 0.0, "not available: the timed region was never entered")
        gpus = f"{len(self.handles)} GPU{'s' if len(self.handles) != 1 else ''}"
        if self.method == "counter":
            if self.counter_mj <= 0:
                return EnergyResult(None, self.window_s, (
                    f"not available: NVML's energy counter did not advance over the timed region "
                    f"({self.window_s:.3f} s), too short for its resolution; time more steps"))
            bound = self.counter_error_bound()
            if bound is not None and bound > MAX_COUNTER_ERROR:
                return EnergyResult(None, self.window_s, (
                    f"not available: NVML's energy counter moves once every {self.counter_period_s * 1000:.0f} ms "
                    f"on this GPU; read at the ends of {len(self.windows)} window(s) of {self.window_s:.3f} s in all, "
                    f"its error could reach {bound:.0%} (at most {MAX_COUNTER_ERROR:.0%} is reported)"))
            period = f", counter moving every {self.counter_period_s * 1000:.0f} ms" if self.counter_period_s else ""
            return EnergyResult(self.counter_mj / 1000.0, self.window_s,
                                f"NVML total-energy counter, read at both ends of each of {len(self.windows)} "
                                f"window(s), {gpus}{period}")
        # The two ends of every window are sampled for the integral, but they say nothing about the power in
        # between: only samples strictly inside a window count towards the minimum.
        samples = sorted(self.samples)  # the sampler's and the windows' ends, appended by two threads
        times = [t for t, _ in samples]
        inside = sum(max(0, bisect_left(times, b) - bisect_right(times, a)) for a, b in self.windows)
        if inside < MIN_POWER_SAMPLES:
            return EnergyResult(None, self.window_s, (
                f"not available: the timed region ({self.window_s:.3f} s) gave {inside} power samples "
                f"inside its windows, fewer than the {MIN_POWER_SAMPLES} needed (the energy counter is not "
                "supported on this GPU)"))
        joules = sum(integrate_power(samples[bisect_left(times, a):bisect_right(times, b)], a, b)
                     for a, b in self.windows)
        return EnergyResult(joules, self.window_s,
                            f"NVML power sampling every {self.interval_s * 1000:.0f} ms, trapezoids, "
                            f"{inside} samples inside {len(self.windows)} window(s), {gpus} "
                            "(no energy counter on this GPU)")


def integrate_power(samples: list[tuple[float, float]], start: float, end: float) -> float:
    """Joules between start and end from (time, watts) samples, trapezoids between the samples inside."""
    points = sorted((t, w) for t, w in samples if start <= t <= end)
    return sum((t1 - t0) * (w0 + w1) / 2 for (t0, w0), (t1, w1) in zip(points, points[1:]))


def meter_for(device_kind: str, device_ids: tuple[str, ...] = (), world_size: int = 1) -> EnergyMeter:
    """The meter for the devices this process runs on."""
    if device_kind != "gpu":
        return EnergyMeter(unavailable=f"the framework ran on the {device_kind.upper()}; NVML measures NVIDIA GPUs only")
    if world_size > 1:
        # Only rank 0 writes, and the other ranks' GPUs are not gathered: a per-sample figure would be wrong.
        return EnergyMeter(unavailable=f"data parallel over {world_size} processes: other ranks' GPU energy is not gathered")
    try:
        nvml = start()  # left initialised for the rest of the process: the handles live as long as NVML does
    except NvmlUnavailable as exc:
        return EnergyMeter(unavailable=str(exc))
    try:
        handles = [gpu.handle for gpu in resolve(nvml, list(device_ids))]
    except Exception as exc:  # an NVMLError while matching the devices
        nvml.nvmlShutdown()
        return EnergyMeter(unavailable=f"NVML could not match the framework's GPUs: {exc}")
    meter = EnergyMeter(nvml=nvml, handles=handles)
    if meter.method == "counter":
        meter.counter_period_s = counter_update_period(meter._read_counter_mj)
    return meter
