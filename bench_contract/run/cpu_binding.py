"""The CPUs a task computes on, decided once for both frameworks and bound before the framework starts.

Both frameworks must run a CPU cell on the same cores with the same number of threads, or the comparison
measures the thread counts. They do not agree by themselves: PyTorch follows OMP_NUM_THREADS, which XLA
ignores; XLA's CPU client sizes its thread pools from the process's affinity mask (measured with jaxlib
0.10.2: a process bound to 1 of 2 CPUs starts 13 threads, unbound 17, and a large matmul's CPU time over
wall time drops from 1.95 to 1.0). So the backend's entry point binds the process with
os.sched_setaffinity before it imports its framework (`bind_task_cpus`), and PyTorch's backend also sets
torch.set_num_threads to the same count.

How many: SLURM_CPUS_PER_TASK, else OMP_NUM_THREADS (the rendered scripts export the profile's
cpus_per_task there when Slurm sets nothing), else every CPU the process may use. Which: the first that
many of the affinity Slurm gave the task, offset by SLURM_LOCALID where Slurm gave more than one task's
worth (task/none binds nothing, as on the local cluster and with the local executor), so two tasks of one
node do not share CPUs while there are enough for both.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

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


def local_task(env: Mapping[str, str]) -> int:
    text = env.get("SLURM_LOCALID", "0").strip() or "0"
    if not text.isdigit():
        raise BindingError(f"SLURM_LOCALID={text!r} is not a task index on the node")
    return int(text)


def choose_cpus(available: Iterable[int], count: int | None, local_id: int) -> tuple[tuple[int, ...], str]:
    """The CPUs of task `local_id` out of `available`: all of them when there are not more than `count`, else
    the local_id-th block of `count`, wrapping around (and then shared with another task) when there are not
    enough blocks for every task."""
    cpus = sorted(available)
    if count is None or count >= len(cpus):
        return tuple(cpus), f"all {len(cpus)} CPUs of the process's affinity"
    blocks = len(cpus) // count
    block = local_id % blocks
    shared = f", shared: {blocks} blocks for local task {local_id}" if local_id >= blocks else ""
    return (tuple(cpus[block * count:(block + 1) * count]),
            f"block {block} of {blocks} ({count} CPU{'s' if count > 1 else ''} each) of the {len(cpus)} CPUs in the affinity{shared}")


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
        cpus, how = choose_cpus(os.sched_getaffinity(0), count, local_task(env))
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
