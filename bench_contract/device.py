"""What hardware and software a task ran on: GPU model through NVML, else the CPU model, plus Slurm ids."""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import socket
from importlib import metadata


def nvml_gpu_names() -> list[str]:
    """Names of the GPUs this process may use, from NVML; empty where there is no NVIDIA driver."""
    try:
        import pynvml  # the nvidia-ml-py package
    except ImportError:
        return []
    try:
        pynvml.nvmlInit()
    except Exception:  # NVMLError_LibraryNotFound / DriverNotLoaded: a machine without an NVIDIA GPU
        return []
    try:
        names = []
        for index in _visible_gpu_indices(pynvml.nvmlDeviceGetCount()):
            name = pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(index))
            names.append(name.decode() if isinstance(name, bytes) else name)
        return names
    finally:
        pynvml.nvmlShutdown()


def _visible_gpu_indices(count: int) -> list[int]:
    # NVML numbers every GPU in the machine; Slurm restricts a job through CUDA_VISIBLE_DEVICES.
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return list(range(count))
    indices = []
    for part in visible.split(","):
        part = part.strip()
        if part.isdigit() and int(part) < count:
            indices.append(int(part))
    return indices


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def device_model(kind: str) -> str:
    """The model name for the device kind the framework actually runs on ("gpu" or "cpu")."""
    if kind == "gpu":
        names = nvml_gpu_names()
        if names:
            # A job sees one model in practice; several distinct ones are recorded together, not hidden.
            return " + ".join(sorted(set(names)))
        return "unknown GPU (NVML unavailable)"
    return cpu_model()


def slurm_ids() -> dict[str, str]:
    env = os.environ
    return {
        "slurm_job_id": env.get("SLURM_JOB_ID", ""),
        "slurm_array_job_id": env.get("SLURM_ARRAY_JOB_ID", ""),
        "slurm_array_task_id": env.get("SLURM_ARRAY_TASK_ID", ""),
    }


def package_versions(names: list[str]) -> str:
    """JSON of the installed versions of the named distributions (absent ones are left out)."""
    versions = {}
    for name in names:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return json.dumps(versions, sort_keys=True)


def environment_context(*, device_kind: str, device_count: int, framework_version: str, libraries: list[str]) -> dict:
    """The environment columns of a result row."""
    return {
        "device_kind": device_kind,
        "device_model": device_model(device_kind),
        "device_count": device_count,
        "hostname": socket.gethostname(),
        **slurm_ids(),
        "framework_version": framework_version,
        "library_versions": package_versions(libraries + ["numpy", "pyarrow", "nvidia-ml-py", "scikit-learn"]),
        "python_version": platform.python_version(),
        "xla_flags": os.environ.get("XLA_FLAGS", ""),
        "started_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }


def peak_host_rss_bytes() -> int:
    """Peak resident set size of this process (Linux reports ru_maxrss in KiB)."""
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
