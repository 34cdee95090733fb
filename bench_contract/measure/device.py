"""What hardware and software a task ran on: GPUs through NVML, else the CPU, plus Slurm ids and provenance.

Every text field is filled: a value that cannot be read says so as "not available: <reason>"
(`results.not_available`), never an empty string, so a reader can tell "unknown" from "none".
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import platform
import re
import socket
from importlib import metadata
from dataclasses import dataclass
from typing import Any

from bench_contract.measure import allocator
from bench_contract.measure.nvml import NvmlUnavailable, gpu_details, resolve, session
from bench_contract.results import not_available


def nvml_gpu_names(device_ids: list[str] | tuple[str, ...] = ()) -> list[str]:
    """Names of the GPUs this process uses (all it may see when device_ids is empty); empty without NVML."""
    try:
        with session() as nvml:
            return [d["name"] for d in gpu_details(nvml, resolve(nvml, list(device_ids)))["gpus"]]
    except NvmlUnavailable:
        return []


def nvml_memory_total(device_id: str = "0") -> int | None:
    """Memory of one GPU this process may use (a CUDA ordinal, UUID or PCI bus id), in bytes; None without NVML."""
    try:
        with session() as nvml:
            return int(gpu_details(nvml, resolve(nvml, [device_id]))["gpus"][0]["memory_total_bytes"])
    except NvmlUnavailable:
        return None


def gpus_on_node() -> int:
    """How many GPUs this task was given, as NVML or the scheduler (CUDA_VISIBLE_DEVICES) says: a framework
    that runs on the CPU on such a node measures the wrong device."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").strip()
    given = 0 if visible in ("", "-1", "NoDevFiles") else len([v for v in visible.split(",") if v.strip()])
    return max(len(nvml_gpu_names()), given)


def refuse_cpu_beside_gpu(framework_title: str, device: str, kind: str, cause: str) -> None:
    """`--device auto` on a node with GPUs, and a framework that sees none: a failure, not a CPU measurement
    (the other framework would run on the GPU). `--device cpu` stays possible on purpose."""
    if device != "auto" or kind != "cpu":
        return
    gpus = gpus_on_node()
    if gpus:
        raise RuntimeError(f"{framework_title} sees no GPU on a node with {gpus} GPU{'s' if gpus > 1 else ''}: "
                           f"{cause} (or run with --device cpu to measure the CPU on purpose)")


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def cpu_details() -> dict[str, Any]:
    # os.cpu_count() is the machine's; the affinity mask is what Slurm (or taskset) gave this process.
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {"cpu_model": cpu_model(), "logical_cpus": os.cpu_count(), "usable_cpus": usable,
            "allocator": allocator.described()}


def device_details(kind: str, device_ids: list[str] | tuple[str, ...] = ()) -> dict[str, Any]:
    """The GPUs the framework uses, read through NVML (name, memory, driver and CUDA versions, MIG mode, power
    limit), and the CPU; on a CPU run, or where NVML fails, the GPU part says why it is not available."""
    details: dict[str, Any] = {"cpu": cpu_details(),
                               "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES", "not set")}
    if kind != "gpu":
        details["gpus"] = not_available(f"the framework ran on the {kind.upper()}, not on an NVIDIA GPU")
        return details
    try:
        with session() as nvml:
            details.update(gpu_details(nvml, resolve(nvml, list(device_ids))))
    except NvmlUnavailable as exc:
        details["gpus"] = not_available(str(exc))
    except Exception as exc:  # an NVMLError while reading one device: recorded, the run goes on
        details["gpus"] = not_available(f"NVML: {exc}")
    return details


UNKNOWN_GPU = "unknown GPU"  # the start of a GPU model no one could name: such runs are never compared (certificate)


def device_model(kind: str, details: dict[str, Any], framework_gpu_name: str | None = None) -> str:
    """The model name for the device kind the framework actually runs on ("gpu" or "cpu"). A GPU's is NVML's,
    else the framework's own (CUDA's device name, which NVML's is too: "NVIDIA H100 80GB HBM3"): without either,
    an A100 and an H100 would both be "unknown" and pool into one comparison."""
    if kind == "gpu":
        if isinstance(details.get("gpus"), list) and details["gpus"]:
            # A job sees one model in practice; several distinct ones are recorded together, not hidden.
            return " + ".join(sorted({gpu["name"] for gpu in details["gpus"]}))
        return framework_gpu_name or f"{UNKNOWN_GPU} (NVML unavailable, and the framework named none)"
    return details["cpu"]["cpu_model"]


def slurm_ids() -> dict[str, str]:
    env = os.environ
    outside = not_available("not run under Slurm")
    ids = {
        "slurm_job_id": env.get("SLURM_JOB_ID", outside),
        "slurm_array_job_id": env.get("SLURM_ARRAY_JOB_ID", outside),
        "slurm_array_task_id": env.get("SLURM_ARRAY_TASK_ID", outside),
        "slurm_nodelist": env.get("SLURM_JOB_NODELIST", outside),
    }
    if "SLURM_JOB_ID" in env and "SLURM_ARRAY_JOB_ID" not in env:
        for key in ("slurm_array_job_id", "slurm_array_task_id"):
            ids[key] = not_available("the Slurm job is not an array job")
    return ids


def package_versions(names: list[str]) -> dict[str, str]:
    """Installed versions of the named distributions; an absent one says so."""
    versions = {}
    for name in names:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = not_available("not installed in this environment")
    return versions


# Not a package of the environment: the project itself, which the backends see through its egg-info in the
# project root on PYTHONPATH (the orchestrator's editable install), wherever they run.
PROJECT_DISTRIBUTION = "jaxtorch-bench"
# The installers: a venv made by `python -m venv` (an older build, a site's) has pip and setuptools whether or not
# its lock pins them, in versions that follow the venv, not the lock; they are left out of both hashes.
INSTALLERS = ("pip", "setuptools")


def normalized_name(name: str) -> str:
    """A distribution's name as PEP 503 (and so every lock file) writes it: ml_dtypes and ML.Dtypes are ml-dtypes."""
    return re.sub(r"[-_.]+", "-", name).lower()


def packages_sha256(pins) -> str:
    """sha256 of the sorted `name==version` lines of (name, version) pins, names normalised, the project itself
    and the installers left out: the same packages give the same hash, read from an environment or its lock."""
    left_out = {PROJECT_DISTRIBUTION, *INSTALLERS}
    lines = sorted({f"{normalized_name(name)}=={version}" for name, version in pins})
    lines = [line for line in lines if line.split("==", 1)[0] not in left_out]
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()


def installed_packages_sha256() -> str:
    """packages_sha256 of the environment's installed distributions: for an environment built from a lock file
    it equals the lock's (orchestrator.run.locks.Lock.packages_sha256)."""
    return packages_sha256((d.metadata["Name"] or "", d.version) for d in metadata.distributions())


# Environment variables that change what a framework does, recorded as they were in the process. The allocator's
# among them (GLIBC_TUNABLES, MALLOC_*, LD_PRELOAD of another malloc, PyTorch's THP_MEM_ALLOC_ENABLE) change how
# fast a CPU run is, and the speed-up between the frameworks with it (docs/measurement.md, page faults).
RECORDED_VARIABLES = ("XLA_FLAGS", "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
                      "TF_CPP_MIN_LOG_LEVEL", "PYTORCH_CUDA_ALLOC_CONF", "TORCH_CUDNN_V8_API_ENABLED",
                      "CUBLAS_WORKSPACE_CONFIG", "JAX_PLATFORMS", "JAX_ENABLE_X64", "GLIBC_TUNABLES", "LD_PRELOAD",
                      "THP_MEM_ALLOC_ENABLE")
RECORDED_PREFIXES = ("XLA_PYTHON_CLIENT_", "NCCL_", "MALLOC_")


# Variables that turn TF32 on for float32 matmuls behind every setting of the framework: NGC's PyTorch images set
# TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1 (cuBLAS then computes float32 products in TF32 whatever torch's flags say), and
# NVIDIA_TF32_OVERRIDE forces cuBLAS's and cuDNN's choice (1 on, 0 off) for both frameworks. A backend clears them
# before it imports its framework, so that the cell's precision policy alone decides; what it found is recorded.
TF32_OVERRIDES = ("TORCH_ALLOW_TF32_CUBLAS_OVERRIDE", "NVIDIA_TF32_OVERRIDE")
CLEARED_VARIABLES: dict[str, str] = {}  # name -> the value this process found and cleared


def clear_tf32_overrides() -> None:
    """Remove TF32_OVERRIDES from this process's environment (its native libraries read them through getenv, which
    os.environ's removal reaches), keeping what was found for recorded_environment."""
    for name in TF32_OVERRIDES:
        if name in os.environ:
            CLEARED_VARIABLES[name] = os.environ.pop(name)


def recorded_environment() -> dict[str, str]:
    env = os.environ
    recorded = {name: env[name] for name in sorted(env)
                if name in RECORDED_VARIABLES or name.startswith(RECORDED_PREFIXES)}
    return recorded | {name: f"{value} (cleared)" for name, value in CLEARED_VARIABLES.items()}


@dataclass(frozen=True)
class DeviceSetup:
    """What a backend found of the device it runs on (its setup_device), recorded by environment_context."""

    kind: str  # "gpu" or "cpu": what the framework really runs on
    # Devices of that kind the framework sees in this process, recorded in device_details as devices_seen. The
    # process computes on one of them: device_count is the topology's (Topology.device_count).
    count: int
    framework_version: str
    precision_policy: str
    # The GPUs this process uses as the framework names them (UUID, PCI bus id or CUDA ordinal), for NVML.
    device_ids: tuple[str, ...] = ()
    # CUDA, cuDNN and NCCL versions as the framework reports them, or "not available: <reason>".
    runtime_versions: dict[str, str] | None = None
    # The device's model as the framework names it, for what NVML and /proc/cpuinfo do not describe (a TPU).
    model: str | None = None
    # The framework's own description of its GPU (name, multiprocessors, compute capability, memory), recorded in
    # device_details beside NVML's: NVML gives no multiprocessor count, the two names must agree, and the
    # framework's name (CUDA's device name) is the model where NVML is not available.
    framework_device: dict[str, Any] | None = None
    # Accelerators the framework sees but this cell does not use (an Apple GPU beside the CPU), by name.
    unused_accelerators: tuple[str, ...] = ()
    # The intra-op threads the framework computes with on the CPU, and how that number is set or derived
    # (bench_contract.run.cpu_binding bound the process first); None and "" where the backend does not say.
    intra_op_threads: int | None = None
    threads_source: str = ""


def environment_context(setup: DeviceSetup, device_count: int, libraries: list[str]) -> dict:
    """The environment columns of a result row, from what the backend's setup found (each field is described on
    DeviceSetup). device_count: the devices the cell computes on (Topology.device_count); the devices of its kind
    the framework sees in this process (setup.count, of which a process uses one) go into device_details as
    devices_seen, and its native libraries' versions into library_versions beside the Python packages."""
    details = device_details(setup.kind, setup.device_ids) | {"devices_seen": setup.count}
    if setup.framework_device:
        details["framework_device"] = setup.framework_device
    if setup.unused_accelerators:
        details["unused_accelerators"] = list(setup.unused_accelerators)
    versions = package_versions(libraries + ["numpy", "pyarrow", "nvidia-ml-py", "scikit-learn"])
    versions.update(setup.runtime_versions or {})
    return {
        "device_kind": setup.kind,
        "device_model": setup.model or device_model(setup.kind, details, (setup.framework_device or {}).get("name")),
        "device_count": device_count,
        "device_details": json.dumps(details, sort_keys=True),
        "hostname": socket.gethostname(),
        **slurm_ids(),
        "framework_version": setup.framework_version,
        "library_versions": json.dumps(versions, sort_keys=True),
        "packages_sha256": installed_packages_sha256(),
        "python_version": platform.python_version(),
        "xla_flags": os.environ.get("XLA_FLAGS", "not set"),
        "environment_variables": json.dumps(recorded_environment(), sort_keys=True),
        "started_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }


def peak_host_rss_bytes() -> int:
    """Peak resident set size of this process (Linux reports ru_maxrss in KiB)."""
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
