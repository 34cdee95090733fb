"""What the cluster has, asked of Slurm where no --profile is given (issue 32): a researcher who copies the README's
example on a GPU cluster gets GPU jobs, not CPU jobs that say "on one GPU" in their header.

`sinfo --noheader --format=%P|%G` lists each partition (the default one marked '*') with its nodes' generic
resources. Where a partition has GPUs (a `gpu` GRES, typed or not: `gpu:4`, `gpu:a100:4(S:0-1)`), the plan asks
for one GPU per task on it (the default partition where it has GPUs, else the first such partition by name) and
the JAX environment is the CUDA build (GPU_RECIPE); elsewhere, or where Slurm cannot be asked, it is the built-in
CPU profile. Either way the plan says what it found and where from, once (Discovery.said).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass, replace
from pathlib import Path

from orchestrator.plan.profile import ClusterProfile, load_profile

GPU_RECIPE = "cuda12"  # the JAX build for a discovered GPU partition (a profile's jax_recipe says cuda13 where wanted)
SINFO_TIMEOUT_S = 30
GRES_GPU = re.compile(r"^gpu(?::[^:(]+)?:(\d+)")  # gpu:4, gpu:a100:4, gpu:a100:4(S:0-1); not gpu alone


@dataclass(frozen=True)
class Discovery:
    partition: str | None  # the partition with GPUs the plan runs on; None: a CPU plan
    gpus_per_node: int
    said: str  # what was found and from where, in one sentence

    def profile(self, base: ClusterProfile) -> ClusterProfile:
        if self.partition is None:
            return base
        return replace(base, name="discovered", partition=self.partition, gpus_per_task=1, jax_recipe=GPU_RECIPE)


def profile_for(path: str | Path | None, ask_slurm: bool = True, partition: str | None = None,
                gpus_per_task: int | None = None) -> tuple[ClusterProfile, str]:
    """The profile a command plans with, and what discovery said ("" where a profile was given, or Slurm was not
    asked: the local executor runs on this machine). The command line's --partition is the partition discovery
    looks at, and its --gpus-per-task 0 plans for CPUs: what the plan says is what it asks for."""
    if path is not None or not ask_slurm:
        return load_profile(path), ""
    found = discover(partition)
    if gpus_per_task == 0 and found.partition is not None:
        found = Discovery(None, 0, found.said.partition(": planned")[0] + "; --gpus-per-task 0: planned for CPUs")
    return found.profile(load_profile(None)), found.said


class SinfoUnanswered(Exception):
    """sinfo did not answer or failed; its words say which."""


class SinfoAbsent(SinfoUnanswered):
    """No sinfo on PATH."""


def sinfo_partitions() -> list[tuple[str, bool, int]]:
    """Each partition with its GPUs per node, as sinfo's `%P|%G` lines give them (gpu_partitions)."""
    sinfo = shutil.which("sinfo")
    if sinfo is None:
        raise SinfoAbsent("no sinfo on PATH")
    try:
        proc = subprocess.run([sinfo, "--noheader", "--format=%P|%G"], capture_output=True, text=True, check=False,
                              timeout=SINFO_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SinfoUnanswered(f"sinfo did not answer ({exc})") from None
    if proc.returncode != 0:
        why = (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
        raise SinfoUnanswered(f"sinfo failed ({why})")
    return gpu_partitions(proc.stdout)


def partition_gpus(name: str) -> int | None:
    """GPUs per node that sinfo shows in partition `name`; None where sinfo cannot say (absent, failing, or no
    such partition)."""
    try:
        return {partition: gpus for partition, _, gpus in sinfo_partitions()}.get(name)
    except SinfoUnanswered:
        return None


def discover(partition: str | None = None) -> Discovery:
    try:
        return choose(sinfo_partitions(), partition)
    except SinfoAbsent:
        return Discovery(None, 0, "no profile given and no sinfo on PATH to ask Slurm for GPUs: planned for CPUs "
                                  "(give --profile for a GPU cluster)")
    except SinfoUnanswered as exc:
        return Discovery(None, 0, f"no profile given, and {exc}: planned for CPUs")


def gpu_partitions(text: str) -> list[tuple[str, bool, int]]:
    """(partition, is the default, GPUs per node) of each partition in sinfo's `%P|%G` lines; a partition listed on
    several lines (nodes with different GRES) takes its largest count."""
    found: dict[str, tuple[bool, int]] = {}
    for line in text.splitlines():
        name, bar, gres = line.strip().partition("|")
        if not name or not bar:  # not an answer in this format: the partition's GRES is not known from it
            continue
        default = name.endswith("*")
        name = name.rstrip("*")
        gpus = sum(int(m.group(1)) for part in gres.split(",") if (m := GRES_GPU.match(part.strip())))
        was_default, most = found.get(name, (False, 0))
        found[name] = (default or was_default, max(most, gpus))
    return [(name, default, gpus) for name, (default, gpus) in sorted(found.items())]


def choose(partitions: list[tuple[str, bool, int]], asked: str | None = None) -> Discovery:
    """The partition the plan runs on and its GPUs: the one asked for (--partition), else the default partition
    where it has GPUs, else the first that has."""
    chosen = next((p for p in partitions if p[0] == asked), None)
    if chosen is not None:
        name, _, gpus = chosen
        if not gpus:
            return Discovery(None, 0, f"no profile given, and sinfo shows no GPU in partition {name} (--partition): "
                                      "planned for CPUs")
        return Discovery(name, gpus, f"no profile given; sinfo shows {gpus} GPU(s) per node in partition {name} "
                                     f"(--partition): planned for one GPU per task there, with JAX's {GPU_RECIPE} build")
    with_gpus = [p for p in partitions if p[2] > 0]
    if not with_gpus:
        listed = ", ".join(name for name, _, _ in partitions) or "none"
        return Discovery(None, 0, f"no profile given, and sinfo shows no GPU in any partition ({listed}): planned "
                                  "for CPUs")
    name, default, gpus = next((p for p in with_gpus if p[1]), with_gpus[0])
    where = "the default partition" if default else "the first partition with GPUs"
    return Discovery(name, gpus, f"no profile given; sinfo shows {gpus} GPU(s) per node in partition {name} ({where}): "
                                 f"planned for one GPU per task there, with JAX's {GPU_RECIPE} build")
