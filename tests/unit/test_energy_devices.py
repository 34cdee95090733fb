"""Energy over the timed region and GPU details through NVML, against a fake pynvml (no GPU here)."""

from __future__ import annotations

import contextlib
import json
import math
import sys
import time

import numpy as np
import pytest
from fake_nvml import FakeGpu, fake_pynvml
from helpers import rows_for_test, spec, wait_until

from bench_contract.measure import device, energy
from bench_contract.results import not_available
from bench_contract.run.runner import DeviceSetup


@pytest.fixture
def nvml(monkeypatch):
    """Install a fake pynvml over the given GPUs at the import boundary; returns the module."""
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv("CUDA_DEVICE_ORDER", raising=False)

    def install(gpus, **kwargs):
        module = fake_pynvml(gpus, **kwargs)
        monkeypatch.setitem(sys.modules, "pynvml", module)
        return module

    # The fake counter's readings are scripted per test; probing its update period would consume them. None: a
    # period nobody measured, so no bound is checked; the tests of the period and of its bound set their own.
    monkeypatch.setattr(energy, "counter_update_period", lambda read, *args, **kwargs: None)

    return install


def metric_values(rows):
    return {r["metric"]: (r["value"], r["unit"], r["note"]) for r in rows.rows}


def test_counter_path_reads_the_counter_at_both_ends_of_the_region(nvml):
    gpu = FakeGpu(energy_mj=[1_000_000, 1_000_000, 1_250_000])  # probe, open, close
    nvml([gpu])
    meter = energy.meter_for("gpu", ("0",))
    with meter:
        pass
    result = meter.result()
    assert result.joules == pytest.approx(250.0) and "counter" in result.method
    rows = rows_for_test()
    result.record(rows, samples=1000)
    got = metric_values(rows)
    assert got["energy_timed"][:2] == (pytest.approx(250.0), "J")
    assert got["energy_per_sample"][0] == pytest.approx(0.25)
    assert got["samples_per_joule"][0] == pytest.approx(4.0)


def test_counter_windows_add_up_and_paused_time_is_left_out(nvml):
    gpu = FakeGpu(energy_mj=[0, 100_000, 150_000, 900_000, 1_000_000])  # probe; window 1; (paused); window 2
    nvml([gpu])
    meter = energy.meter_for("gpu", ())
    meter.resume(); meter.resume()  # idempotent: no second reading
    meter.pause()
    meter.resume(); meter.pause(); meter.pause()
    assert meter.result().joules == pytest.approx(50.0 + 100.0)


def test_sampling_fallback_integrates_power_where_the_counter_is_not_supported(nvml):
    gpu = FakeGpu(energy_mj=None, power_mw=250_000)  # 250 W, constant
    nvml([gpu])
    meter = energy.meter_for("gpu", ())
    meter.interval_s = 0.005
    with meter:  # until enough samples are in, however a loaded machine delays the sampler
        wait_until(lambda: len(meter.samples) >= energy.MIN_POWER_SAMPLES + 2, seconds=60)
    result = meter.result()
    assert "power sampling" in result.method, result.method
    # Constant power, both ends sampled: the integral is power times the window, exactly.
    assert result.joules == pytest.approx(250.0 * result.window_s, rel=1e-9)
    assert len(meter.samples) >= energy.MIN_POWER_SAMPLES


def test_sampling_refuses_a_region_too_short_for_enough_samples(nvml):
    nvml([FakeGpu(energy_mj=None)])
    meter = energy.meter_for("gpu", ())
    meter.interval_s = 10.0
    with meter:
        pass
    result = meter.result()
    assert result.joules is None and "fewer than the 10 needed" in result.method


def test_sampling_counts_only_the_samples_inside_the_windows_not_their_ends(nvml):
    """Six short windows hold twelve samples, all taken at their ends, none in between: no energy from them."""
    nvml([FakeGpu(energy_mj=None)])
    meter = energy.meter_for("gpu", ())
    meter.interval_s = 10.0  # the sampler never fires inside these windows
    for _ in range(6):
        with meter:
            pass
    assert len(meter.samples) == 12 >= energy.MIN_POWER_SAMPLES
    result = meter.result()
    assert result.joules is None and "gave 0 power samples inside its windows" in result.method, result.method


def test_sampling_runs_across_windows_shorter_than_its_interval(nvml):
    """Training opens a window per timed step, often shorter than the 20 ms between power samples: one sampler
    runs across all of them, so the samples that fall inside the windows are there to count and integrate."""
    nvml([FakeGpu(energy_mj=None, power_mw=250_000)])
    meter = energy.meter_for("gpu", ())
    meter.interval_s = 0.005
    for _ in range(100):
        with meter:
            time.sleep(0.002)
        time.sleep(0.002)  # the host's work between two steps
    result = meter.result()
    assert result.joules == pytest.approx(250.0 * result.window_s, rel=1e-9), result.method
    assert "inside 100 window(s)" in result.method


def test_integrate_power_uses_trapezoids_inside_the_window():
    ramp = [(t / 10, 100.0 * t / 10) for t in range(0, 21)]  # 0..2 s, P = 100 t
    assert energy.integrate_power(ramp, 0.0, 1.0) == pytest.approx(50.0)  # integral of 100 t over [0, 1]
    assert energy.integrate_power(ramp, 1.0, 2.0) == pytest.approx(150.0)


@pytest.mark.parametrize("kind, setup, reason", [
    ("cpu", {}, "ran on the CPU"),
    ("gpu", {"driver_loaded": False}, "no NVIDIA driver"),
    ("gpu", {"no_power": True}, "neither NVML's energy counter nor its power reading"),
])
def test_energy_not_available_is_null_with_a_reason_never_zero(nvml, kind, setup, reason):
    setup = dict(setup)  # a copy: the parameters are shared by every run of the test in this process (mutmut's)
    nvml([FakeGpu(energy_mj=None, power_mw=None) if setup.pop("no_power", False) else FakeGpu()], **setup)
    meter = energy.meter_for(kind, ())
    with meter:
        pass
    rows = rows_for_test()
    meter.result().record(rows, samples=10)
    got = metric_values(rows)
    for metric in ("energy_timed", "energy_window_time", "energy_per_sample", "samples_per_joule"):
        value, _, note = got[metric]
        assert value is None and note.startswith("not available: ") and reason in note, note
    assert all(r["value"] is None or not math.isnan(r["value"]) for r in rows.rows)
    table = rows.table()
    assert table.column("value").null_count == 4  # a null in Parquet, NaN in pandas: never a 0


def test_data_parallel_energy_is_not_available(nvml):
    nvml([FakeGpu()])
    assert "data parallel" in energy.meter_for("gpu", ("0",), world_size=2).result().method


TWO = [FakeGpu(name="NVIDIA A100-SXM4-80GB", uuid="GPU-aaaa", bus_id="00000000:07:00.0"),
       FakeGpu(name="NVIDIA H100 PCIe", uuid="GPU-bbbb", bus_id="00000000:3B:00.0", mig=1, power_limit_mw=None)]


@pytest.mark.parametrize("visible, ids, name, how", [
    (None, ("1",), "NVIDIA H100 PCIe", "index"),
    ("1", ("0",), "NVIDIA H100 PCIe", "index (CUDA_DEVICE_ORDER=PCI_BUS_ID"),  # CUDA's 0 is NVML's 1
    ("GPU-bbbb,GPU-aaaa", ("1",), "NVIDIA A100-SXM4-80GB", "uuid from CUDA_VISIBLE_DEVICES"),
    ("1,0", ("GPU-aaaa",), "NVIDIA A100-SXM4-80GB", "uuid"),  # the framework's own UUID wins
    ("0,1", ("00000000:3b:00.0",), "NVIDIA H100 PCIe", "pci bus id"),
])
def test_devices_are_matched_to_nvml_through_cuda_visible_devices(nvml, monkeypatch, visible, ids, name, how):
    nvml(TWO)
    if visible is not None:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
        monkeypatch.setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    details = device.device_details("gpu", ids)
    assert [g["name"] for g in details["gpus"]] == [name]
    assert details["gpus"][0]["matched_by"].startswith(how)


def setup(kind: str, count: int = 1, **found) -> DeviceSetup:
    """What a backend's prepare found (bench_contract.run.runner.DeviceSetup), as environment_context reads it."""
    return DeviceSetup(kind=kind, count=count, framework_version="x", precision_policy="fp32", **found)


def test_gpu_details_name_memory_versions_count_mig_and_power(nvml, monkeypatch):
    nvml(TWO, driver="550.54.15", cuda=12040)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,0")
    details = device.device_details("gpu", ())
    a, b = details["gpus"][1], details["gpus"][0]
    assert (b["name"], b["uuid"], b["pci_bus_id"], b["nvml_index"]) == ("NVIDIA H100 PCIe", "GPU-bbbb", "00000000:3B:00.0", 1)
    assert a["memory_total_bytes"] == 80 * 2**30 and a["power_limit_w"] == 700.0 and a["mig_mode"] == "disabled"
    assert b["mig_mode"] == "enabled" and b["power_limit_w"].startswith("not available: NVML")
    assert (details["gpu_count"], details["node_gpu_count"]) == (2, 2)
    assert (details["driver_version"], details["cuda_driver_version"]) == ("550.54.15", "12.4")
    assert details["cpu"]["cpu_model"] == device.cpu_model() and details["cpu"]["usable_cpus"] >= 1
    context = device.environment_context(setup("gpu", count=2), 2, [])
    assert context["device_model"] == "NVIDIA A100-SXM4-80GB + NVIDIA H100 PCIe"
    assert json.loads(context["device_details"]) == json.loads(json.dumps(details | {"devices_seen": 2}))


def test_gpu_details_have_the_compute_capability_and_the_clocks_or_say_why_not(nvml):
    nvml([FakeGpu(), FakeGpu(name="NVIDIA A100-SXM4-80GB", uuid="GPU-aaaa", bus_id="00000000:07:00.0",
                           compute_capability=(8, 0), clocks_mhz=None)])
    h100, a100 = device.device_details("gpu", ())["gpus"]
    assert (h100["compute_capability"], h100["sm_clock_max_mhz"], h100["memory_clock_max_mhz"],
            h100["sm_clock_at_start_mhz"]) == ("9.0", 1980, 2619, 345)
    assert a100["compute_capability"] == "8.0" and a100["sm_clock_max_mhz"].startswith("not available: NVML")


def test_the_frameworks_own_description_of_its_gpu_is_recorded_beside_nvmls(nvml):
    """NVML has no multiprocessor count, and NVML's name and the framework's must be seen side by side."""
    nvml([FakeGpu()])
    own = {"name": "NVIDIA H100 80GB HBM3", "multiprocessors": 132, "compute_capability": "9.0"}
    context = device.environment_context(setup("gpu", device_ids=("0",), framework_device=own), 1, [])
    details = json.loads(context["device_details"])
    assert details["framework_device"] == own and details["gpus"][0]["name"] == own["name"]


def test_cpu_run_records_cpu_and_why_there_are_no_gpu_details(nvml):
    nvml(TWO)
    details = device.device_details("cpu")
    assert details["gpus"] == not_available("the framework ran on the CPU, not on an NVIDIA GPU")
    assert details["cpu"]["logical_cpus"] >= 1
    nvml([], driver_loaded=False)
    assert device.device_details("gpu")["gpus"].startswith("not available: NVML could not start")


class LoggingMeter(energy.EnergyMeter):
    """A counter meter that logs when its window opens and closes, into the same log as the fake ops."""

    def __init__(self, log):
        super().__init__(unavailable="logging only")
        self.log = log

    def resume(self):
        if not self._log_open():
            self.log.append("open")
            self._open = True

    def pause(self):
        if self._log_open():
            self.log.append("close")
            self._open = False

    def _log_open(self):
        return getattr(self, "_open", False)


class FakeOps:
    """Training and inference ops over numpy that log what they do."""

    parameter_count = 1

    def __init__(self, log, host_s=0.0, step_s=0.0):
        self.log, self.host_s, self.step_s = log, host_s, step_s

    def to_device(self, x, y=None):
        self.log.append("to_device")
        time.sleep(self.host_s)  # host-side data work: reading, stacking, the transfer
        return x if y is None else (x, y)

    def train_step(self, batch):
        self.log.append("step")
        time.sleep(self.step_s)
        return 0.5

    def forward(self, x):
        self.log.append("step")
        return np.zeros((len(x), 2), np.float32)

    @contextlib.contextmanager
    def passes(self, x):
        yield lambda: self.forward(x)

    def compile(self, x):
        return {}

    def synchronize(self, out):
        pass

    def compilations(self):
        return 0  # numpy never compiles

    compiles_lazily = False

    def loss_scale(self):
        return None  # no loss scaling

    def loss_value(self, out):
        self.log.append("loss")
        return out

    def to_numpy(self, out):
        return out

    def predict(self, x):
        self.log.append("eval")
        return np.zeros(len(x), np.int64)

    def flops_per_step(self, batch):
        from bench_contract.measure.flops import Flops

        return Flops(100.0, "fake")


def windows(log):
    """Per window, the events inside it; and the events outside any window."""
    inside, outside, current = [], [], None
    for event in log:
        if event == "open":
            current = []
        elif event == "close":
            inside.append(current)
            current = None
        elif current is not None:
            current.append(event)
        else:
            outside.append(event)
    assert current is None, "a window was left open"
    return inside, outside


# A short training run: batch 4, two epochs, three warm-up steps and six timed ones.
TIMED = {"batch_size": 4, "epochs": 2, "warmup_steps": 3, "timed_steps": 6}


def tiny_training_data():
    from bench_contract.data.datasets import Dataset

    x, y = np.zeros((20, 3), np.float32), np.zeros(20, np.int64)
    return Dataset("digits", "synthetic", x, y, x[:4], y[:4], x[:4], y[:4], 2)


def test_training_energy_is_one_window_over_the_pipelined_steps_and_nothing_else():
    from bench_contract.measure.efficiency import Efficiency
    from bench_contract.measure.flops import Peak
    from bench_contract.run.training import run_training

    log = []
    rows = rows_for_test()
    run_training(spec(**TIMED), tiny_training_data(), FakeOps(log), rows,
                 efficiency=Efficiency(LoggingMeter(log), lambda: Peak(1e3, "fake")))
    inside, outside = windows(log)
    # One window, holding the 6 (timed_steps) pipelined steps after training: the 10 training steps (warm-up and
    # timed), the batches' preparation, the loss reads and the evaluations are outside it.
    assert inside == [["step"] * 6]
    assert (outside.count("to_device"), outside.count("loss"), outside.count("step"), outside.count("eval")) == \
        (10, 10, 10, 3)


def test_training_energy_is_divided_by_the_pipelined_samples_and_timed_over_them_alone(nvml):
    """With a real meter (fake NVML counter, one joule between two reads): the host's 20 ms before every training
    step is not in the window, which holds the 6 pipelined steps of 2 ms."""
    from bench_contract.measure.efficiency import Efficiency
    from bench_contract.measure.flops import Peak
    from bench_contract.run.training import run_training

    nvml([FakeGpu(energy_mj=[1000 * i for i in range(100)])])  # every read 1 J later
    rows = rows_for_test()
    run_training(spec(**TIMED), tiny_training_data(), FakeOps([], host_s=0.02, step_s=0.002), rows,
                 efficiency=Efficiency(energy.meter_for("gpu", ()), lambda: Peak(1e3, "fake")))
    got = metric_values(rows)
    assert 6 * 0.002 <= got["energy_window_time"][0] < 0.1  # the 10 x 20 ms of host work would exceed it
    assert "each of 1 window(s)" in got["energy_timed"][2]
    assert got["energy_timed"][0] == pytest.approx(1.0)
    assert got["energy_per_sample"][0] == pytest.approx(1.0 / (6 * 4))  # 6 pipelined steps of batch 4


def test_the_counters_update_period_is_the_time_between_two_changes():
    reads = []

    def read():  # each read takes 10 ms; the value moves at reads 3 and 13, 100 ms apart
        reads.append(1)
        return [5, 5, 5, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 7][min(len(reads) - 1, 13)]

    assert energy.counter_update_period(read, lambda: 0.01 * len(reads)) == pytest.approx(0.1)
    reads.clear()
    still = energy.counter_update_period(lambda: reads.append(1) or 5, lambda: 0.01 * len(reads), timeout_s=0.3)
    assert still == 0.3  # never moved: as slow as the probe was long, the bound errs on the safe side


@pytest.mark.parametrize("windows_, seconds, reported", [(1, 2.0, True), (1, 1.0, False), (45, 0.1, False)])
def test_counter_energy_is_refused_where_its_steps_could_be_more_than_5_percent_of_it(windows_, seconds, reported):
    """On an H200 the counter moved every 100 ms: 45 per-step windows in 0.1 s gave 1,500-4,500 W on a 700 W GPU."""
    times = iter(np.repeat(np.arange(windows_) * 10.0, 2) + np.tile([0.0, seconds / windows_], windows_))
    readings = iter(np.arange(2 * windows_) * 1000.0)  # mJ
    meter = energy.EnergyMeter(nvml=None, handles=[], clock=lambda: float(next(times)), counter_period_s=0.1)
    meter.method, meter._read_counter_mj = "counter", lambda: float(next(readings))
    assert meter.min_window_s == pytest.approx(2.0)
    for _ in range(windows_):
        meter.resume()
        meter.pause()
    result = meter.result()
    assert (result.joules is not None) == reported, result.method
    if not reported:
        assert "moves once every 100 ms" in result.method and "at most 5% is reported" in result.method


def test_inference_times_at_least_as_long_as_the_energy_counter_needs(monkeypatch):
    from bench_contract.measure.efficiency import Efficiency
    from bench_contract.measure.flops import Peak
    from bench_contract.run.inference import run_inference

    meter = energy.EnergyMeter(unavailable="stand-in")
    monkeypatch.setattr(energy.EnergyMeter, "min_window_s", property(lambda self: 0.05))
    rows = rows_for_test()
    run_inference(spec(**TIMED, use_case=5, min_duration_s=0.0), np.zeros((4, 3), np.float32), FakeOps([], step_s=0.0),
                  rows, efficiency=Efficiency(meter, lambda: Peak(1e3, "fake")))
    assert metric_values(rows)["timed_duration"][0] >= 0.05


def test_training_on_the_cpu_records_energy_window_time_as_not_available():
    from bench_contract.run.training import run_training

    rows = rows_for_test()
    run_training(spec(**TIMED), tiny_training_data(), FakeOps([]), rows)
    value, unit, note = metric_values(rows)["energy_window_time"]
    assert value is None and unit == "s" and note == "not available: the backend gave no energy meter or peak"


def test_inference_energy_window_holds_exactly_the_timed_passes():
    from bench_contract.measure.efficiency import Efficiency
    from bench_contract.measure.flops import Peak
    from bench_contract.run.inference import run_inference

    log = []
    rows = rows_for_test()
    run_inference(spec(**TIMED, use_case=5, min_duration_s=0.0), np.zeros((4, 3), np.float32), FakeOps(log), rows,
                  efficiency=Efficiency(LoggingMeter(log), lambda: Peak(1e3, "fake")))
    inside, outside = windows(log)
    assert inside == [["step"] * 6]  # the timed passes, and nothing else
    assert outside == ["to_device"] + ["step"] * (1 + 3)  # the batch, the first call after compilation, the warm-up
    got = metric_values(rows)
    assert got["flops_per_step"][0] == 100.0 and got["energy_timed"][0] is None


def test_a_counter_that_did_not_advance_is_not_available_rather_than_zero(nvml):
    nvml([FakeGpu(energy_mj=[5_000, 5_000, 5_000])])
    meter = energy.meter_for("gpu", ())
    with meter:
        pass
    result = meter.result()
    assert result.joules is None and "did not advance" in result.method


def test_a_device_the_framework_names_itself_is_recorded_as_it_names_it():
    """A TPU (JAX's device_kind) is never recorded as the host CPU; an unused Apple GPU is noted. Not exercised
    on such hardware here: this checks what the backends pass on is what the rows carry."""
    ctx = device.environment_context(setup("tpu", model="TPU v5 lite"), 4, [])
    assert ctx["device_kind"] == "tpu" and ctx["device_model"] == "TPU v5 lite"
    assert "ran on the TPU" in json.loads(ctx["device_details"])["gpus"]
    mps = ("Apple GPU (torch.backends.mps): seen, not used",)
    ctx = device.environment_context(setup("cpu", unused_accelerators=mps), 1, [])
    assert json.loads(ctx["device_details"])["unused_accelerators"] == ["Apple GPU (torch.backends.mps): seen, not used"]
