"""A stand-in for nvidia-ml-py's `pynvml` module, put into sys.modules by tests: NVML as documented, on
GPUs this machine does not have. Each fake GPU holds what NVML would report; a missing counter or power
reading raises NVMLError_NotSupported, as NVML does on GPUs without them."""

from __future__ import annotations

import types
from dataclasses import dataclass, field


class NVMLError(Exception):
    pass


class NVMLError_NotSupported(NVMLError):
    pass


class NVMLError_DriverNotLoaded(NVMLError):
    pass


@dataclass
class FakeGpu:
    name: str = "NVIDIA H100 80GB HBM3"
    uuid: str = "GPU-00000000-0000-0000-0000-000000000000"
    bus_id: str = "00000000:3B:00.0"
    memory_total: int = 80 * 2**30
    mig: int | None = 0  # None: MIG not supported
    power_limit_mw: int | None = 700_000
    energy_mj: list[int] | None = field(default_factory=lambda: [1_000_000])  # successive counter readings
    power_mw: int | None = 300_000
    energy_reads: int = 0
    compute_capability: tuple[int, int] = (9, 0)
    clocks_mhz: dict[str, int] | None = field(default_factory=lambda: {"sm max": 1980, "mem max": 2619, "sm": 345})
    temperature_c: int = 41
    # successive readings of the clock event reasons' mask and of the thermal policy's violation time (ns)
    clock_event_reasons: list[int] = field(default_factory=lambda: [0])
    thermal_violation_ns: list[int] | None = field(default_factory=lambda: [0])
    ecc: int | None = 1  # None: ECC not supported (consumer GPUs)
    persistence: int = 1
    reads: dict[str, int] = field(default_factory=dict)

    def next_reading(self, name: str, values: list[int] | None) -> int:
        """The next of successive readings (the last one repeats); NotSupported for None."""
        if values is None:
            raise NVMLError_NotSupported("Not Supported")
        count = self.reads[name] = self.reads.get(name, -1) + 1
        return values[min(count, len(values) - 1)]

    def next_energy(self) -> int:
        if self.energy_mj is None:
            raise NVMLError_NotSupported("Not Supported")
        value = self.energy_mj[min(self.energy_reads, len(self.energy_mj) - 1)]
        self.energy_reads += 1
        return value


def fake_pynvml(gpus: list[FakeGpu], *, driver_loaded: bool = True, driver: str = "550.54.15",
                cuda: int = 12040) -> types.ModuleType:
    """A module with the pynvml functions the contract calls, over the given GPUs in NVML (PCI) order."""
    m = types.ModuleType("pynvml")
    m.NVMLError, m.NVMLError_NotSupported, m.NVMLError_DriverNotLoaded = (
        NVMLError, NVMLError_NotSupported, NVMLError_DriverNotLoaded)
    m.NVML_DEVICE_MIG_ENABLE = 1
    m.NVML_CLOCK_SM, m.NVML_CLOCK_MEM = 1, 2
    m.inits = 0

    def init():
        if not driver_loaded:
            raise NVMLError_DriverNotLoaded("Driver Not Loaded")
        m.inits += 1

    def shutdown():
        m.inits -= 1

    def by_uuid(uuid):
        for gpu in gpus:
            if gpu.uuid == uuid:
                return gpu
        raise NVMLError("Not Found")

    def by_bus(bus):
        for gpu in gpus:
            if gpu.bus_id.lower() == bus.lower():
                return gpu
        raise NVMLError("Not Found")

    def supported(value):
        if value is None:
            raise NVMLError_NotSupported("Not Supported")
        return value

    m.nvmlInit, m.nvmlShutdown = init, shutdown
    m.nvmlDeviceGetCount = lambda: len(gpus)
    m.nvmlDeviceGetHandleByIndex = lambda i: gpus[i]
    m.nvmlDeviceGetHandleByUUID = by_uuid
    m.nvmlDeviceGetHandleByPciBusId = by_bus
    m.nvmlDeviceGetIndex = lambda g: gpus.index(g)
    m.nvmlDeviceGetName = lambda g: g.name.encode()  # older nvidia-ml-py returns bytes
    m.nvmlDeviceGetUUID = lambda g: g.uuid
    m.nvmlDeviceGetPciInfo = lambda g: types.SimpleNamespace(busId=g.bus_id.encode())
    m.nvmlDeviceGetMemoryInfo = lambda g: types.SimpleNamespace(total=g.memory_total, used=0, free=g.memory_total)
    m.nvmlDeviceGetMigMode = lambda g: [supported(g.mig), supported(g.mig)]
    m.nvmlDeviceGetEnforcedPowerLimit = lambda g: supported(g.power_limit_mw)
    m.nvmlDeviceGetTotalEnergyConsumption = lambda g: g.next_energy()
    m.nvmlDeviceGetPowerUsage = lambda g: supported(g.power_mw)
    m.nvmlDeviceGetCudaComputeCapability = lambda g: g.compute_capability
    clock_names = {m.NVML_CLOCK_SM: "sm", m.NVML_CLOCK_MEM: "mem"}
    m.nvmlDeviceGetMaxClockInfo = lambda g, kind: supported(g.clocks_mhz)[f"{clock_names[kind]} max"]
    m.nvmlDeviceGetClockInfo = lambda g, kind: supported(g.clocks_mhz)[clock_names[kind]]
    m.NVML_TEMPERATURE_GPU = 0
    m.nvmlDeviceGetTemperature = lambda g, sensor: g.temperature_c
    # The older name only, as nvidia-ml-py before CUDA 12.2 has it (the contract looks for the newer one first).
    m.nvmlDeviceGetCurrentClocksThrottleReasons = lambda g: g.next_reading("reasons", g.clock_event_reasons)
    m.nvmlDeviceGetViolationStatus = lambda g, policy: types.SimpleNamespace(
        referenceTime=0, violationTime=g.next_reading("thermal", g.thermal_violation_ns) if policy == 1 else 0)
    m.nvmlDeviceGetEccMode = lambda g: [supported(g.ecc), supported(g.ecc)]
    m.nvmlDeviceGetPersistenceMode = lambda g: g.persistence
    m.nvmlSystemGetDriverVersion = lambda: driver
    m.nvmlSystemGetCudaDriverVersion = lambda: cuda
    return m
