"""What the cluster has, asked of Slurm where no --profile is given (issue 32): a researcher who copies the README's
example on a GPU cluster gets GPU jobs, not CPU jobs that say "on one GPU" in their header.

`sinfo --noheader --format=%P|%G|%c|%m|%l` lists each partition (the default one marked '*') with its nodes'
generic resources, CPUs and memory (MB) per node, and the partition's time limit; nodes of different shapes are on
lines of their own. Where a partition has GPUs (a `gpu` GRES, typed or not: `gpu:4`, `gpu:a100:4(S:0-1)`), the plan
asks for one GPU per task on it (the default partition where it has GPUs, else the first such partition by name),
with one GPU's share of a node's CPUs and memory (NodeShape, the smallest node's where they differ), and the JAX
environment is the CUDA build (GPU_RECIPE); elsewhere, or where Slurm cannot be asked, it is the built-in CPU
profile. Either way the plan says what it found and where from, once (Discovery.said).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass, replace
from pathlib import Path

from orchestrator.plan.profile import TIME_LIMIT, ClusterProfile, load_profile, slurm_seconds

GPU_RECIPE = "cuda12"  # the JAX build for a discovered GPU partition (a profile's jax_recipe says cuda13 where wanted)
SINFO_TIMEOUT_S = 30
# Each partition's GRES, then per node its CPUs, its memory in MB and the partition's time limit.
SINFO_FORMAT = "%P|%G|%c|%m|%l"
GRES_GPU = re.compile(r"^gpu(?::([^:(]+))?:(\d+)")  # gpu:4, gpu:a100:4, gpu:a100:4(S:0-1); not gpu alone
# A GPU's share of a node's memory, less this part: slurmstepd, the page cache charged to the job and a node whose
# usable memory is a little under its RealMemory leave the rest to whoever runs beside it.
MEMORY_HEADROOM = 0.05


@dataclass(frozen=True)
class NodeShape:
    """The GPU nodes of one partition as sinfo shows them: per GPU, the smallest share of a node's CPUs and memory
    over the node shapes it lists (a task sized so fits on every node), the GPU type where the GRES names one, and
    the partition's time limit (None: infinite or not shown)."""

    partition: str
    gpus: int  # per node; with several shapes, those of the first listed
    cpus: int
    memory_mb: int
    cpus_share: int  # CPUs per GPU, the smallest over the shapes
    memory_mb_share: int  # MB per GPU, the smallest over the shapes
    shapes: int = 1  # how many node shapes (sinfo lines with GPUs) the partition has
    gpu_type: str | None = None
    max_time_s: int | None = None
    max_time: str = ""  # as sinfo writes it (2-00:00:00), for the script's header

    @property
    def cpus_per_gpu(self) -> int:
        return max(1, self.cpus_share)

    @property
    def memory_per_gpu(self) -> str | None:
        """One GPU's share of a node's memory, less MEMORY_HEADROOM, in whole GB (Slurm's G: 1024 MB) where it
        comes to one or more, else in MB; None where that is nothing."""
        share = int(self.memory_mb_share * (1 - MEMORY_HEADROOM))
        if share < 1:
            return None
        return f"{share // 1024}G" if share >= 1024 else f"{share}M"

    def said(self) -> str:
        """Where the shares come from, in words: "sinfo: 8 GPUs, 112 CPUs and 1000000 MB per node"."""
        typed = f" ({self.gpu_type})" if self.gpu_type else ""
        if self.shapes == 1:
            return (f"sinfo: {self.gpus} GPU{'s' if self.gpus != 1 else ''}{typed}, {self.cpus} CPUs and "
                    f"{self.memory_mb} MB per node")
        return (f"sinfo: {self.shapes} shapes of GPU{typed} nodes, the smallest shares of which are taken, "
                f"{self.cpus_share} CPUs and {self.memory_mb_share} MB per GPU")


@dataclass(frozen=True)
class Discovery:
    partition: str | None  # the partition with GPUs the plan runs on; None: a CPU plan
    gpus_per_node: int
    said: str  # what was found and from where, in one sentence
    node: NodeShape | None = None  # its nodes' shape, where sinfo showed their CPUs and memory

    def profile(self, base: ClusterProfile, gpus_per_task: int | None = None) -> ClusterProfile:
        """The built-in profile on the partition found: one GPU per task (the command line's --gpus-per-task
        replaces it later), and each GPU's share of a node's CPUs and memory where sinfo showed them."""
        if self.partition is None:
            return base
        shares = {}
        if self.node:
            cpus = min(self.node.cpus, self.node.cpus_per_gpu * (gpus_per_task or 1))
            shares = {"cpus_per_task": cpus, "mem_per_gpu": self.node.memory_per_gpu}
        return replace(base, name="discovered", partition=self.partition, gpus_per_task=1, jax_recipe=GPU_RECIPE,
                       **shares)

    def with_node(self, text: str) -> Discovery:
        """This discovery with its partition's node shape from sinfo's lines `text`, and the shares it gives in
        its sentence."""
        node = node_shapes(text).get(self.partition) if self.partition else None
        if node is None:
            return self
        memory = f" and {node.memory_per_gpu} of memory" if node.memory_per_gpu else ""
        said = f"{self.said}, {node.cpus_per_gpu} CPUs{memory} per GPU (one GPU's share of a node; {node.said()})"
        return replace(self, node=node, said=said)


def profile_for(path: str | Path | None, ask_slurm: bool = True, partition: str | None = None,
                gpus_per_task: int | None = None) -> tuple[ClusterProfile, str]:
    """The profile a command plans with, and what discovery said ("" where a profile was given, or Slurm was not
    asked: the local executor runs on this machine). The command line's --partition is the partition discovery
    looks at, and its --gpus-per-task 0 plans for CPUs: what the plan says is what it asks for."""
    profile, found = discovered_profile(path, ask_slurm, partition, gpus_per_task)
    return profile, found.said if found else ""


def discovered_profile(path: str | Path | None, ask_slurm: bool = True, partition: str | None = None,
                       gpus_per_task: int | None = None) -> tuple[ClusterProfile, Discovery | None]:
    """profile_for's profile, with what discovery found (None where a profile was given or Slurm was not asked)."""
    if path is not None or not ask_slurm:
        return load_profile(path), None
    found = discover(partition)
    if gpus_per_task == 0 and found.partition is not None:
        found = Discovery(None, 0, found.said.partition(": planned")[0] + "; --gpus-per-task 0: planned for CPUs")
    return found.profile(load_profile(None), gpus_per_task), found


class SinfoUnanswered(Exception):
    """sinfo did not answer or failed; its words say which."""


class SinfoAbsent(SinfoUnanswered):
    """No sinfo on PATH."""


def sinfo_partitions() -> list[tuple[str, bool, int]]:
    """Each partition with its GPUs per node, as sinfo's lines give them (gpu_partitions)."""
    return gpu_partitions(sinfo_text())


def sinfo_text() -> str:
    """sinfo's SINFO_FORMAT lines: each partition's nodes, one line per shape."""
    sinfo = shutil.which("sinfo")
    if sinfo is None:
        raise SinfoAbsent("no sinfo on PATH")
    try:
        proc = subprocess.run([sinfo, "--noheader", f"--format={SINFO_FORMAT}"], capture_output=True, text=True,
                              check=False, timeout=SINFO_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SinfoUnanswered(f"sinfo did not answer ({exc})") from None
    if proc.returncode != 0:
        why = (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
        raise SinfoUnanswered(f"sinfo failed ({why})")
    return proc.stdout


def partition_gpus(name: str) -> int | None:
    """GPUs per node that sinfo shows in partition `name`; None where sinfo cannot say (absent, failing, or no
    such partition)."""
    try:
        return {partition: gpus for partition, _, gpus in sinfo_partitions()}.get(name)
    except SinfoUnanswered:
        return None


def discover(partition: str | None = None) -> Discovery:
    try:
        text = sinfo_text()
        return choose(gpu_partitions(text), partition).with_node(text)
    except SinfoAbsent:
        return Discovery(None, 0, "no profile given and no sinfo on PATH to ask Slurm for GPUs: planned for CPUs "
                                  "(give --profile for a GPU cluster)")
    except SinfoUnanswered as exc:
        return Discovery(None, 0, f"no profile given, and {exc}: planned for CPUs")


def gpu_partitions(text: str) -> list[tuple[str, bool, int]]:
    """(partition, is the default, GPUs per node) of each partition in sinfo's lines (`%P|%G`, then any further
    fields); a partition listed on several lines (nodes with different GRES) takes its largest count."""
    found: dict[str, tuple[bool, int]] = {}
    for line in text.splitlines():
        name, bar, rest = line.strip().partition("|")
        if not name or not bar:  # not an answer in this format: the partition's GRES is not known from it
            continue
        default = name.endswith("*")
        name = name.rstrip("*")
        was_default, most = found.get(name, (False, 0))
        found[name] = (default or was_default, max(most, gres_gpus(rest.partition("|")[0])[0]))
    return [(name, default, gpus) for name, (default, gpus) in sorted(found.items())]


def gres_gpus(gres: str) -> tuple[int, str | None]:
    """GPUs in one sinfo GRES field, and their type where it names one (the first typed entry's)."""
    matches = [m for part in gres.split(",") if (m := GRES_GPU.match(part.strip()))]
    return sum(int(m.group(2)) for m in matches), next((m.group(1) for m in matches if m.group(1)), None)


def leading_number(field: str) -> int | None:
    """sinfo's count in a field ("112", or "56+" where it summarises nodes of at least that many); None if none."""
    found = re.match(r"\d+", field.strip())
    return int(found.group()) if found else None


def node_lines(text: str) -> list[tuple[str, int, str | None, int, int, str]]:
    """(partition, GPUs, GPU type, CPUs, memory MB, time limit) of each line of sinfo's SINFO_FORMAT output that has
    GPUs and shows its nodes' CPUs and memory."""
    lines = []
    for line in text.splitlines():
        fields = line.strip().split("|")
        if len(fields) < 5:
            continue
        gpus, gpu_type = gres_gpus(fields[1])
        cpus, memory = leading_number(fields[2]), leading_number(fields[3])
        if gpus and cpus and memory:
            lines.append((fields[0].rstrip("*"), gpus, gpu_type, cpus, memory, fields[4].strip()))
    return lines


def node_shapes(text: str) -> dict[str, NodeShape]:
    """Each GPU partition's NodeShape: per GPU, the fewest CPUs and the least memory of its node shapes."""
    shapes: dict[str, NodeShape] = {}
    for name, gpus, gpu_type, cpus, memory, limit in node_lines(text):
        known = shapes.get(name)
        if known is None:
            shapes[name] = NodeShape(name, gpus, cpus, memory, cpus // gpus, memory // gpus, 1, gpu_type,
                                     time_seconds(limit), limit)
            continue
        shapes[name] = replace(known, cpus_share=min(known.cpus_share, cpus // gpus),
                               memory_mb_share=min(known.memory_mb_share, memory // gpus), shapes=known.shapes + 1,
                               gpu_type=known.gpu_type or gpu_type)
    return shapes


def time_seconds(limit: str) -> int | None:
    """Seconds of sinfo's time limit (2-00:00:00, 30:00); None for infinite or anything else."""
    return slurm_seconds(limit) if re.fullmatch(TIME_LIMIT, limit) else None


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
