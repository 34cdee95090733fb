"""The largest batch that fits: doubling, then binary search, each try a fresh backend process.

A search cell's spec has `batch_search` set. Its job runs this driver (through the backend's entry point, in
the framework's own environment); the driver runs the same cell at one batch size after another, each in a
new process of the same backend, so no try inherits the allocator state or the compiled programs of the one
before. A try that runs out of memory is a data point, never a crash: the search records it and goes on.

Tries use synthetic data of the benchmark's shapes, sized to give two steps (training) or the batch itself
(inference): memory depends on shapes, not on values, and a try never walks a whole real epoch.

`--memory-limit` puts an artificial ceiling on each try, so that a device with plenty of memory still has a limit
to find; without it the device's own memory is the limit. On a CPU it caps the try's address space (RLIMIT_AS,
like `ulimit -v`). On a GPU the memory a batch fills is the GPU's, and CUDA reserves far more address space than
memory (a process under such a cap cannot even start CUDA, and every try would look out of memory): there the cap
goes to the try's spec, and its backend sets its allocator's limit to that share of the GPU's memory
(`device_memory_fraction`).
"""

from __future__ import annotations

import dataclasses
import math
import os
import resource
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bench_contract.measure.device import gpus_on_node
from bench_contract.measure.efficiency import Efficiency
from bench_contract.results import CONTEXT_NAMES, ResultRows, read_task_file
from bench_contract.run.failure import failure_path, read_failure
from bench_contract.run.progress import ProgressReporter
from bench_contract.spec import JobSpec

# What each framework (and the host allocator) says when an allocation fails: the try ran out of memory. Looked
# for in the error that ended the try only (fatal_error), never in its whole log.
OUT_OF_MEMORY_SIGNS = (
    "RESOURCE_EXHAUSTED",  # XLA, on GPU and CPU
    "out of memory",  # CUDA ("CUDA out of memory"), XLA ("Out of memory allocating ...")
    "OutOfMemoryError",  # torch.cuda.OutOfMemoryError
    "can't allocate memory",  # PyTorch's CPU allocator
    "Cannot allocate memory",  # ENOMEM from the C library
    "MemoryError",  # numpy and Python
    "std::bad_alloc",
    # XLA's CPU kernels (YNNPACK) report a failed workspace allocation only as this generic error; under an
    # address-space cap it appears at sizes between the last that fit and XLA's own RESOURCE_EXHAUSTED.
    "YNNPACK operation failed",
)
KILLED = -9  # SIGKILL: the kernel's (or a cgroup's) out-of-memory killer
# Bisection stops when the first size that failed is within 1/RESOLUTION of the last that fit: each try is a
# whole process, and a limit known to about 3% is what a user plans with. Both ends are recorded.
RESOLUTION = 32
TAIL_LINES = 5


@dataclass(frozen=True)
class Attempt:
    batch_size: int
    fits: bool
    reason: str  # "fits", or why not: "out of memory: <the line that said so>"


class SearchError(RuntimeError):
    """A try failed for a reason other than memory: the search cannot say anything about the limit."""


def search(fits: Callable[[int], Attempt], start: int, limit: int) -> tuple[int, list[Attempt]]:
    """The largest b in [start, limit] with fits(b) (fitting assumed monotone in b), to within 1/RESOLUTION;
    0 when not even start fits.

    Doubles from start until a try fails or the limit is reached, then bisects between the last size that fit
    and the first that did not, until they are max(1, fit // RESOLUTION) apart.
    """
    attempts: list[Attempt] = []

    def attempt(b: int) -> bool:
        result = fits(b)
        attempts.append(result)
        return result.fits

    if not attempt(start):
        return 0, attempts
    good, bad = start, None
    while bad is None:
        if good >= limit:
            return good, attempts
        candidate = min(good * 2, limit)
        if attempt(candidate):
            good = candidate
        else:
            bad = candidate
    while bad - good > max(1, good // RESOLUTION):
        middle = (good + bad) // 2
        if attempt(middle):
            good = middle
        else:
            bad = middle
    return good, attempts


def classify(returncode: int, fatal: str) -> str | None:
    """"out of memory: ..." when a failed try ran out of memory, None when it failed for another reason.

    `fatal` is the error that ended the try (fatal_error), not its whole log: XLA on a GPU prints warnings
    such as "Allocator (GPU_0_bfc) ran out of memory trying to allocate ..." and goes on, so such a line in a
    try that then failed for another reason says nothing about the limit."""
    if returncode == KILLED:
        return "out of memory: killed by SIGKILL (the out-of-memory killer)"
    for line in reversed(fatal.splitlines()):
        if any(sign in line for sign in OUT_OF_MEMORY_SIGNS):
            return f"out of memory: {line.strip().removeprefix('out of memory: ')[:300]}"
    return None


def fatal_error(failure: dict | None, stderr: str) -> str:
    """The error that ended a failed try: the reason in the failure row its runner wrote (every exception gets
    one, an out-of-memory error named as such: bench_contract.run.failure), or, when the process died without
    writing one (killed, or aborted in native code: "terminate called after throwing ... std::bad_alloc"), the
    last TAIL_LINES lines of its stderr, where such a death is reported."""
    if failure is not None:
        return failure["failure_reason"]
    return "\n".join(stderr.splitlines()[-TAIL_LINES:])


def caps_device_memory(spec: JobSpec) -> bool:
    """Whether the search's memory cap is the GPU's (the tries run on a GPU) rather than the address space's."""
    return bool(spec.memory_limit_bytes) and spec.device != "cpu" and gpus_on_node() > 0


def try_memory_cap(spec) -> int:
    """The bytes a capped batch-search try may allocate on its GPU; 0 for any other spec. validate's ParitySpec,
    which backends prepare too, has neither field: reading them crashed validate on the H200."""
    return getattr(spec, "memory_limit_bytes", 0) if getattr(spec, "search_try", False) else 0


def device_memory_fraction(spec, total_bytes: int) -> float | None:
    """The share of a GPU's memory (total_bytes) a try may allocate: its cap over the total, at most 1; None
    where the spec is not a capped try (the backends then leave their allocators alone)."""
    cap = try_memory_cap(spec)
    return min(1.0, cap / total_bytes) if cap else None


def try_spec(spec: JobSpec, batch_size: int, folder: Path, device_cap: bool = False) -> JobSpec:
    """The cell at one batch size, as an ordinary (non-search) spec with synthetic data and two steps; with
    device_cap, carrying the search's memory cap for its backend to set on the GPU."""
    train = 2 * batch_size
    # load_dataset keeps a tenth each for validation and test: size the set so training has two full batches.
    samples = math.ceil(train / 0.8) + 10
    return dataclasses.replace(
        spec, batch_size=batch_size, batch_search=False, search_try=True,
        memory_limit_bytes=spec.memory_limit_bytes if device_cap else 0, data_source="synthetic",
        synthetic_samples=samples, epochs=1, warmup_steps=1, timed_steps=1, min_duration_s=0.0, loop_batch_size=1,
        results_path=str(folder / f"try-{batch_size}.parquet"),
    )


def try_efficiency(spec: JobSpec) -> Efficiency | None:
    """In a try, no energy meter and no peak calibration: the calibrations' arrays would count against the
    memory the try is probing. None outside a try (the backend builds its own)."""
    if not spec.search_try:
        return None
    return Efficiency.unmeasured("a batch-search try measures whether the batch fits, nothing else")


def limit_address_space(limit_bytes: int) -> Callable[[], None] | None:
    if not limit_bytes:
        return None

    def apply() -> None:  # runs in the child, between fork and exec
        resource.setrlimit(resource.RLIMIT_AS, (limit_bytes, limit_bytes))

    return apply


def backend_try(spec: JobSpec, folder: Path, progress: ProgressReporter | None = None) -> Callable[[int], Attempt]:
    """A function that runs the cell at a batch size in a fresh process of this backend and says if it fit.

    Each try is a line of progress; while one runs, its heartbeat is kept fresh (bench_contract.run.progress)."""
    progress = progress or search_progress(spec)
    tries = 0
    device_cap = caps_device_memory(spec)
    address_cap = None if device_cap else limit_address_space(spec.memory_limit_bytes)

    def fits(batch_size: int) -> Attempt:
        nonlocal tries
        tries += 1
        one = try_spec(spec, batch_size, folder, device_cap)
        path = folder / f"try-{batch_size}.json"
        path.write_text(one.to_json())
        progress.note(f"try {tries}: batch size {batch_size}")
        with progress.kept_alive():
            proc = subprocess.run([sys.executable, "-m", f"{spec.framework}_backend.run", str(path)],
                                  capture_output=True, text=True, check=False,
                                  preexec_fn=address_cap, env=os.environ.copy())
        if proc.returncode == 0:
            progress.note(f"try {tries}: batch size {batch_size} fits")
            return Attempt(batch_size, True, "fits")
        reason = classify(proc.returncode, fatal_error(read_failure(failure_path(one.results_path)), proc.stderr))
        if reason is None:
            tail = "\n".join(proc.stderr.splitlines()[-TAIL_LINES:])
            raise SearchError(f"the try at batch size {batch_size} failed for a reason other than memory "
                              f"(exit code {proc.returncode}):\n{tail}")
        progress.note(f"try {tries}: batch size {batch_size} does not fit ({reason})")
        return Attempt(batch_size, False, reason)

    return fits


def search_progress(spec: JobSpec) -> ProgressReporter:
    progress = ProgressReporter.for_spec(spec, writer=True)  # a search cell is one process on one device
    progress.start("batch search", detail=f"doubling from batch size {spec.batch_size} up to "
                                          f"{spec.batch_search_limit}, then bisecting")
    return progress


def run_search(spec: JobSpec) -> ResultRows:
    """Search, and return the rows of the search cell: one per attempt and the largest batch that fits."""
    progress = search_progress(spec)
    with tempfile.TemporaryDirectory(prefix="batch-search-") as tmp:
        folder = Path(tmp)
        largest, attempts = search(backend_try(spec, folder, progress), spec.batch_size, spec.batch_search_limit)
        progress.note(f"largest batch size that fits: {largest} ({len(attempts)} tries)")
        fitting = [a.batch_size for a in attempts if a.fits]
        if not fitting:
            raise SearchError(f"not even batch size {spec.batch_size} fits: {attempts[0].reason}")
        # The rows carry the provenance the largest fitting try recorded (device, versions, Slurm ids).
        task = read_task_file(folder / f"try-{largest}.parquet")
        context = {name: task.value(name) for name in CONTEXT_NAMES}
    context.update(cell_id=spec.cell_id, batch_size=spec.batch_size, data_source="synthetic")
    rows = ResultRows(context)
    for i, a in enumerate(attempts):
        rows.add("batch_search_attempt", a.batch_size, "samples", step=i)
        rows.add("batch_search_attempt_fits", float(a.fits), "bool", step=i)
    rows.add("max_batch_size", largest, "samples")
    failed = [a.batch_size for a in attempts if not a.fits]
    if failed:  # the smallest size that did not fit: the limit lies in [max_batch_size, this)
        rows.add("min_batch_size_out_of_memory", min(failed), "samples")
    rows.add("batch_search_limit", spec.batch_search_limit, "samples")
    rows.add("batch_search_limit_reached", float(largest >= spec.batch_search_limit), "bool")
    rows.add("memory_limit", spec.memory_limit_bytes, "bytes")
    rows.add("out_of_memory_attempts", sum(not a.fits for a in attempts), "attempts")
    return rows
