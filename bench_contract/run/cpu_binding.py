"""The CPUs a task computes on, decided once for both frameworks and bound before the framework starts.

Both frameworks must run a CPU cell on the same cores with the same number of threads, or the comparison
measures the thread counts. They do not agree by themselves: PyTorch follows OMP_NUM_THREADS, which XLA
ignores; XLA's CPU client sizes its thread pools from the process's affinity mask (measured with jaxlib
0.10.2: a process bound to 1 of 2 CPUs starts 13 threads, unbound 17, and a large matmul's CPU time over
wall time drops from 1.95 to 1.0). So the backend's entry point binds the process with
os.sched_setaffinity before it imports its framework (`bind_task_cpus`), and PyTorch's backend also sets
torch.set_num_threads to the same count.

How many: SLURM_CPUS_PER_TASK, else OMP_NUM_THREADS (the rendered scripts export the profile's
cpus_per_task there when Slurm sets nothing), else every CPU the process may use. Which: the affinity Slurm
gave the task where that is the count; where Slurm gave more (task/none binds nothing, as on the local
cluster and with the local executor), a block of that many of them: by SLURM_LOCALID, so two tasks of one job
on one node do not share CPUs while there are enough for both, turned by SLURM_JOB_ID, so that jobs sharing
an unbound node do not all take its first CPUs. In a pack (bench_contract.run.driver), each run is task 0 of a
job step of its own, so the driver says its slot in PACK_SLOT_VARIABLE, counted as the local task: two slots
side by side in one job take different blocks (seen on the local cluster: both slots' runs on one CPU, about
half again as long, before the slot was counted).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

PACK_SLOT_VARIABLE = "BENCH_PACK_SLOT"  # a pack's slot, set by its driver for each run's step

# Where the count comes from, in order; the first variable that is set decides.
COUNT_VARIABLES = (
    ("SLURM_CPUS_PER_TASK", "Slurm's --cpus-per-task"),
    ("OMP_NUM_THREADS", "the profile's cpus_per_task, exported by the rendered script"),
)


@dataclass(frozen=True)
class Binding:
    cpus: tuple[int, ...]  # the CPUs the process may run on, after binding; () where the OS cannot say
    reason: str  # why these CPUs: the count's source and how the set was chosen

    @property
    def count(self) -> int:
        return len(self.cpus)

    def cpu_list(self) -> str:
        return compact_cpu_list(self.cpus)


class BindingError(ValueError):
    """A CPU count in the environment that cannot be used."""


_binding: Binding | None = None
_error: BindingError | None = None


def requested_count(env: Mapping[str, str]) -> tuple[int | None, str]:
    """(how many CPUs the task was given, where that number comes from); (None, ...) where nothing says."""
    for name, meaning in COUNT_VARIABLES:
        text = env.get(name, "").strip()
        if not text:
            continue
        # Slurm writes a plain number; a list such as "2(x3)" belongs to SLURM_CPUS_PER_TASK's siblings only.
        if not text.isdigit() or int(text) < 1:
            raise BindingError(f"{name}={text!r} is not a positive whole number of CPUs; set it to the CPUs "
                               "each task may use (or unset it)")
        return int(text), f"{name}={text} ({meaning})"
    return None, "nothing sets a CPU count (neither " + " nor ".join(n for n, _ in COUNT_VARIABLES) + ")"


def slurm_index(env: Mapping[str, str], name: str) -> int:
    """A whole number Slurm sets (SLURM_LOCALID, SLURM_JOB_ID); 0 where it is not set (outside Slurm)."""
    text = env.get(name, "").strip() or "0"
    if not text.isdigit():
        raise BindingError(f"{name}={text!r} is not a whole number; Slurm sets it, unset it outside Slurm")
    return int(text)


def choose_cpus(available: Iterable[int], count: int | None, local_id: int,
                job_id: int = 0) -> tuple[tuple[int, ...], str]:
    """The CPUs of task `local_id` of job `job_id` out of `available`: all of them when there are not more than
    `count`, else a block of `count`. Tasks of one job take consecutive blocks, so they share no CPU while there
    are blocks enough; the first block turns with the job id, so that jobs on one unbound node (several jobs on
    a shared node; the local cluster's two nodes on one machine) spread over its CPUs instead of all taking the
    first (they may still meet: Slurm says nothing of other jobs' CPUs when it binds none)."""
    cpus = sorted(available)
    if count is None or count >= len(cpus):
        return tuple(cpus), f"all {len(cpus)} CPUs of the process's affinity"
    blocks = len(cpus) // count
    block = (job_id + local_id) % blocks
    shared = f", shared: {blocks} blocks for local task {local_id}" if local_id >= blocks else ""
    how = (f"block {block} of {blocks} ({count} CPU{'s' if count > 1 else ''} each; local task {local_id}, "
           f"job {job_id}) of the {len(cpus)} CPUs in the affinity{shared}")
    return tuple(cpus[block * count:(block + 1) * count]), how


def compact_cpu_list(cpus: Iterable[int]) -> str:
    """0,1,2,3,8,10,11 as "0-3,8,10-11", the way taskset and Slurm write CPU lists."""
    ranges: list[list[int]] = []
    for cpu in sorted(cpus):
        if ranges and cpu == ranges[-1][1] + 1:
            ranges[-1][1] = cpu
        else:
            ranges.append([cpu, cpu])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in ranges)


def set_process_affinity(cpus: tuple[int, ...]) -> None:
    """Every thread of the process, not only the calling one (Linux binds threads): an import before this one
    (pyarrow starts two) may already have started threads, and they would keep every CPU."""
    try:
        threads = [int(tid) for tid in os.listdir("/proc/self/task")]
    except OSError:
        threads = [0]
    for tid in threads:
        try:
            os.sched_setaffinity(tid, cpus)
        except ProcessLookupError:  # the thread ended since the listing
            continue


def bind_task_cpus(env: Mapping[str, str] | None = None) -> Binding | None:
    """Bind this process to the task's CPUs and remember the binding for the rows. Called by each backend's
    entry point before it imports its framework. A bad CPU count is remembered too, not raised here: the
    runner raises it (`current`) where the task can still write its failure row."""
    global _binding, _error
    if _binding is not None or _error is not None:  # once per process (parity's entry point imports run's)
        return _binding
    env = os.environ if env is None else env
    try:
        count, source = requested_count(env)
        if not hasattr(os, "sched_setaffinity"):
            _binding = Binding((), f"{source}: not bound, this OS has no CPU affinity (os.sched_setaffinity)")
            return _binding
        local = slurm_index(env, "SLURM_LOCALID") + slurm_index(env, PACK_SLOT_VARIABLE)
        cpus, how = choose_cpus(os.sched_getaffinity(0), count, local, slurm_index(env, "SLURM_JOB_ID"))
        set_process_affinity(cpus)
    except BindingError as exc:
        _error = exc
        return None
    _binding = Binding(cpus, f"{source}: {how}")
    return _binding


def current() -> Binding:
    """The binding this process made, or, where it made none (a test that calls the runner in its own
    process), the affinity it has, said as such. Raises the remembered error of a bad CPU count."""
    if _error is not None:
        raise _error
    if _binding is not None:
        return _binding
    cpus = tuple(sorted(os.sched_getaffinity(0))) if hasattr(os, "sched_getaffinity") else ()
    return Binding(cpus, "not bound: the process's affinity as it was (no backend entry point ran)")
