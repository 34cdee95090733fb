"""A task that cannot finish still says why: one failure row, published atomically like a result file.

The failure row lives apart from the results, so it can never be merged or compared as a measurement:

    <campaign>/rows/<framework>/<cell>.parquet      the cell's measurements (success)
    <campaign>/failures/<framework>/<cell>.parquet  why its last attempt failed (one row)

It carries the same identity and provenance columns as a result row (those known when the task failed;
the rest are null) plus the failure's own columns. A later attempt that succeeds removes it.
"""

from __future__ import annotations

import datetime as dt
import os
import platform
import socket
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from bench_contract.atomic import publish
from bench_contract.results import CONTEXT_FIELDS, CONTEXT_NAMES

FAILURE_FIELDS: list[pa.Field] = [
    pa.field("status", pa.string()),  # "failed" (an error in the task) or "terminated" (a signal from outside)
    pa.field("failure_reason", pa.string()),  # one line: "exception: ...", "out of memory: ...", "terminated by ..."
    pa.field("phase", pa.string()),  # what the task was doing: preparing the device, loading data, running, ...
    pa.field("steps_done", pa.int64()),  # training steps finished before the failure; null when none are counted
    pa.field("steps_total", pa.int64()),  # the steps the cell would have run; null outside training
    pa.field("signal", pa.string()),  # SIGTERM, SIGUSR1, ... when a signal ended the task
    pa.field("exit_code", pa.int32()),  # the code the task exits with
    pa.field("error", pa.string()),  # the end of the traceback, for a person
    pa.field("failed_at", pa.string()),
]
FAILURE_SCHEMA = pa.schema(CONTEXT_FIELDS + FAILURE_FIELDS)
ERROR_CHARS = 4000  # a traceback's end is what explains it; a whole one can be megabytes of frames


def failure_path(results_path: str | os.PathLike[str]) -> Path:
    """Where the failure row of the task that writes `results_path` goes: <campaign>/failures/<fw>/<cell>.parquet
    for the campaign layout (<campaign>/rows/<fw>/<cell>.parquet), else <stem>.failure.parquet beside it."""
    path = Path(results_path)
    if path.parent.parent.name == "rows":
        return path.parent.parent.parent / "failures" / path.parent.name / path.name
    return path.with_name(f"{path.stem}.failure.parquet")


def out_of_memory(exc: BaseException) -> bool:
    """Python's MemoryError, PyTorch's OutOfMemoryError (CUDA and CPU allocator), XLA's RESOURCE_EXHAUSTED."""
    if isinstance(exc, MemoryError) or type(exc).__name__ == "OutOfMemoryError":
        return True
    text = str(exc).lower()
    return any(words in text for words in ("resource_exhausted", "out of memory", "can't allocate memory",
                                           "cannot allocate memory"))


def exception_reason(exc: BaseException) -> str:
    first_line = (str(exc).strip().splitlines() or [""])[0][:300]
    kind = "out of memory" if out_of_memory(exc) else "exception"
    return f"{kind}: {type(exc).__name__}: {first_line}" if first_line else f"{kind}: {type(exc).__name__}"


def write_failure(results_path: str | os.PathLike[str], context: dict[str, Any], *, status: str, reason: str,
                  phase: str, exit_code: int, steps_done: int | None = None, steps_total: int | None = None,
                  signal: str | None = None, error: str = "") -> Path:
    """Publish the one-row failure file of this task (replacing an older attempt's)."""
    row: dict[str, Any] = {name: context.get(name) for name in CONTEXT_NAMES}
    for name, value in (("hostname", socket.gethostname()), ("python_version", platform.python_version()),
                        ("slurm_job_id", os.environ.get("SLURM_JOB_ID", "")),
                        ("slurm_array_job_id", os.environ.get("SLURM_ARRAY_JOB_ID", "")),
                        ("slurm_array_task_id", os.environ.get("SLURM_ARRAY_TASK_ID", ""))):
        if row.get(name) is None:
            row[name] = value
    row.update(status=status, failure_reason=reason, phase=phase, steps_done=steps_done, steps_total=steps_total,
               signal=signal, exit_code=exit_code, error=error[-ERROR_CHARS:],
               failed_at=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"))
    table = pa.Table.from_pylist([row], schema=FAILURE_SCHEMA)
    # One row gains nothing from dictionary encoding, and a task failing for memory should allocate little.
    return publish(failure_path(results_path), lambda tmp: pq.write_table(table, tmp, use_dictionary=False))


def clear_failure(results_path: str | os.PathLike[str]) -> None:
    """After a success: an earlier attempt's failure row no longer describes the cell."""
    failure_path(results_path).unlink(missing_ok=True)


def read_failure(path: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The failure row as a dict, or None when the file is absent or unreadable (never half a file: it is
    published atomically, but a person may have put anything there)."""
    try:
        rows = pq.read_table(path).to_pylist()
    except (OSError, pa.ArrowException):
        return None
    return rows[0] if len(rows) == 1 and "failure_reason" in rows[0] else None
