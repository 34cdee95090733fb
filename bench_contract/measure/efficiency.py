"""What a cell's timed region is measured with besides the clock: GPU energy (NVML) and FLOPs against the peak.

The backend builds one `Efficiency` for its devices; run_training and run_inference open its energy meter
around the timed steps and, when they are done, record energy and utilisation with the FLOPs per step the
backend's ops report.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from bench_contract.measure.energy import EnergyMeter
from bench_contract.measure.flops import Flops, Peak, record_utilisation


@dataclass
class Efficiency:
    meter: EnergyMeter
    peak: Callable[[], Peak]  # the peak FLOP/s of one device at the cell's precision; called after the timed steps
    devices: int = 1  # devices the global step runs on (the MFU denominator is devices x peak)
    _peak: Peak | None = field(default=None, repr=False)  # measured_peak's, once measured

    def measured_peak(self) -> Peak:
        """The peak, called once: a CPU's is timed, and every utilisation of the cell divides by the same one."""
        if self._peak is None:
            self._peak = self.peak()
        return self._peak

    @classmethod
    def unmeasured(cls, reason: str) -> "Efficiency":
        return cls(EnergyMeter(unavailable=reason), lambda: Peak(None, f"not available: {reason}"))

    def record(self, rows, flops: Flops, times_s: list[float], samples_per_step: float,
               energy_samples: int | None = None) -> None:
        """Energy per sample over `energy_samples` (the samples of the meter's window; by default the timed
        steps'), and utilisation over the timed steps."""
        samples = samples_per_step * len(times_s) if energy_samples is None else energy_samples
        self.meter.result().record(rows, samples)
        record_utilisation(rows, flops, self.measured_peak(), times_s, self.devices)
