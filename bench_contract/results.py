"""Result rows: one tidy row per measured value, each carrying the cell's identity and provenance.

A tidy (long) table keeps the schema fixed while metrics are added: a new metric is a new value in the
`metric` column, not a new column. Every row answers what ran, where, with which versions and settings.

A task's file stores that answer once (issue #17): its Parquet columns are the measurement columns, and the
context (every CONTEXT_FIELDS column, the same on every row of a task) is one JSON object in the file's
key-value metadata under CONTEXT_KEY. Opening and decoding 6 columns instead of 49 made a file 5.6 times
cheaper to read, which is what collect of thousands of files pays for. read_task_table gives the wide table
back (SCHEMA, the context on every row), and reads files written before, with every column on every row, too.
"""

from __future__ import annotations

import functools
import itertools
import json
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from bench_contract.atomic import publish

# Columns that are the same on every row of one task, in output order.
CONTEXT_FIELDS: list[pa.Field] = [
    pa.field("schema_version", pa.int32()),
    pa.field("campaign", pa.string()),
    pa.field("cell_id", pa.string()),
    pa.field("pair_key", pa.string()),
    pa.field("framework", pa.string()),
    pa.field("benchmark", pa.string()),
    pa.field("use_case", pa.int32()),
    pa.field("model", pa.string()),
    pa.field("model_variant", pa.string()),
    pa.field("batch_size", pa.int32()),
    pa.field("precision", pa.string()),
    pa.field("precision_policy", pa.string()),
    # JSON: the dtypes each class of operation computed in during one training step, as it ran
    # (bench_contract.run.census); "" where none was taken.
    pa.field("precision_census", pa.string()),
    # The node's state at the start and end of the measured window, as JSON (bench_contract.measure.node_state):
    # GPU clocks, temperature, power limit, clock event reasons, ECC, persistence; the CPUs' governor and frequency.
    pa.field("node_state", pa.string()),
    pa.field("framework_options", pa.string()),
    pa.field("data_source", pa.string()),
    # Which data the run saw: its splits' sizes and a digest of them (bench_contract.data.datasets.Dataset.fingerprint);
    # "" where the run failed before loading it, or in a file written before it was recorded.
    pa.field("data_fingerprint", pa.string()),
    pa.field("epochs", pa.int32()),
    pa.field("seed", pa.int64()),
    pa.field("init_weights_sha256", pa.string()),
    pa.field("device_kind", pa.string()),
    pa.field("device_model", pa.string()),
    pa.field("device_count", pa.int32()),
    pa.field("device_details", pa.string()),  # JSON: GPUs through NVML (or why not), CPU model and cores
    # The CPUs the task was bound to, decided once for both frameworks (bench_contract.run.cpu_binding): how many,
    # which ("0-3,8", or "not available: <reason>") and why; and the intra-op threads the framework computed
    # with (torch.get_num_threads(); for XLA, the CPU count its pool is sized from) and where that number comes from.
    pa.field("bound_cpus", pa.int32()),
    pa.field("bound_cpu_list", pa.string()),
    pa.field("cpu_binding", pa.string()),
    pa.field("intra_op_threads", pa.int32()),
    pa.field("intra_op_threads_source", pa.string()),
    pa.field("hostname", pa.string()),
    # The profile's system the cell was submitted to (JobSpec.system, also in settings); "" where none was named.
    pa.field("system", pa.string()),
    pa.field("slurm_job_id", pa.string()),
    pa.field("slurm_array_job_id", pa.string()),
    pa.field("slurm_array_task_id", pa.string()),
    pa.field("slurm_nodelist", pa.string()),
    pa.field("framework_version", pa.string()),
    pa.field("library_versions", pa.string()),  # JSON: packages, and CUDA/cuDNN/NCCL as the framework reports them
    pa.field("packages_sha256", pa.string()),  # sha256 of the environment's sorted name==version list
    # "locked" (built from the checked-in lock file) or "site: <python>" (the profile's own interpreter, not locked),
    # as the rendered script exported it in ENVIRONMENT_KIND_VARIABLE.
    pa.field("environment_kind", pa.string()),
    pa.field("python_version", pa.string()),
    pa.field("xla_flags", pa.string()),
    pa.field("environment_variables", pa.string()),  # JSON: XLA_*, NCCL_*, CUDA_VISIBLE_DEVICES, OMP_NUM_THREADS ...
    pa.field("git_commit", pa.string()),
    pa.field("started_at", pa.string()),
    # Repeats and pairing: the trial index (0 when a cell runs once); for a paired run, the order in which
    # the paired job ran the two frameworks within each trial ("jax,torch"), empty when the run was not paired.
    pa.field("trial", pa.int32()),
    pa.field("pair_order", pa.string()),
    # `--trials auto`: the sequential rule that decided how many trials the pair ran (bench_contract.sequential:
    # "stein first=5 target=0.05"); empty for a fixed number of trials.
    pa.field("trial_rule", pa.string()),
    # DP-SGD (use cases 3 and 4): the engine that computed the per-sample gradients (JAX's vmap; PyTorch's torchfunc or
    # opacus) and how (Opacus's grad_sample_mode), JobSpec.dp_engine_columns; "" elsewhere.
    pa.field("dp_engine", pa.string()),
    pa.field("dp_engine_mode", pa.string()),
    # The fused attention kernel each framework chose for the language model (flash, cuDNN, memory-efficient, or
    # the reference path on CPU), as the backend found it in what ran; "" for a model without one.
    pa.field("attention_kernel", pa.string()),
    # JobSpec.measured_settings(): JSON of every setting that can change what is measured (spec.MEASURED_SETTINGS)
    pa.field("settings", pa.string()),
]


def not_available(reason: str) -> str:
    """The one spelling of a value that could not be measured or read, used in every text field."""
    return f"not available: {reason}"


# Columns added after result files were first written, with the value an older file is read with, so
# that collect keeps merging those files (they ran once, unpaired, and recorded no CPU binding).
_NOT_RECORDED = not_available("written before the CPU binding was recorded")
ADDED_COLUMN_DEFAULTS: dict[str, Any] = {
    "trial": 0, "pair_order": "", "trial_rule": "", "settings": "",
    "bound_cpus": None, "bound_cpu_list": _NOT_RECORDED, "cpu_binding": _NOT_RECORDED,
    "intra_op_threads": None, "intra_op_threads_source": _NOT_RECORDED,
    "environment_kind": not_available("written before the environment kind was recorded"),
    "system": "",
    "dp_engine": "", "dp_engine_mode": "",
    "precision_census": "", "attention_kernel": "",
    "node_state": "",
    "data_fingerprint": "",
}
# The variable a rendered script exports to tell the backend which environment it runs in, and its two kinds.
ENVIRONMENT_KIND_VARIABLE = "BENCH_ENVIRONMENT_KIND"
LOCKED = "locked"
SITE_PREFIX = "site: "

MEASUREMENT_FIELDS: list[pa.Field] = [
    pa.field("metric", pa.string()),
    pa.field("value", pa.float64()),
    pa.field("unit", pa.string()),
    pa.field("epoch", pa.int32()),  # null when the value is not per epoch
    pa.field("step", pa.int64()),  # null when the value is not per step
    # How the value was obtained (e.g. "XLA cost analysis"), or, with a null value, "not available: <reason>".
    pa.field("note", pa.string()),
]

SCHEMA = pa.schema(CONTEXT_FIELDS + MEASUREMENT_FIELDS)
# The context columns that hold a JSON object as text ("" where none was taken). A file whose value of one of them
# does not parse cannot count as a result (read_task_file): every reader of the merged dataset may then parse them.
JSON_COLUMNS = ("precision_census", "node_state", "device_details", "library_versions", "environment_variables",
                "settings", "framework_options")
CONTEXT_NAMES = [f.name for f in CONTEXT_FIELDS]
CONTEXT_SCHEMA = pa.schema(CONTEXT_FIELDS)
MEASUREMENT_SCHEMA = pa.schema(MEASUREMENT_FIELDS)
# Where a task file keeps its context: JSON of {column: value} in the Parquet key-value metadata. A file
# without it is of the earlier, wide layout (every column on every row).
CONTEXT_KEY = b"bench_contract.context"


@dataclass
class ResultRows:
    """Collects the measured values of one task and writes them as one Parquet file."""

    context: dict[str, Any]
    rows: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        missing = sorted(set(CONTEXT_NAMES) - set(self.context))
        if missing:
            raise ValueError(f"result context lacks {', '.join(missing)}")
        extra = sorted(set(self.context) - set(CONTEXT_NAMES))
        if extra:
            raise ValueError(f"result context has unknown columns {', '.join(extra)}")

    def add(self, metric: str, value: float, unit: str, *, epoch: int | None = None, step: int | None = None,
            note: str | None = None) -> None:
        value = float(value)
        if math.isnan(value):
            raise ValueError(f"metric {metric} is NaN: refusing to record a value that was not measured")
        self.rows.append({"metric": metric, "value": value, "unit": unit, "epoch": epoch, "step": step, "note": note})

    def add_unavailable(self, metric: str, unit: str, reason: str) -> None:
        """A metric that could not be measured here: a null value (never 0) and "not available: <reason>"."""
        if not reason:
            raise ValueError(f"metric {metric}: a value that is not available needs a reason")
        self.rows.append({"metric": metric, "value": None, "unit": unit, "epoch": None, "step": None,
                          "note": not_available(reason)})

    def table(self) -> pa.Table:
        """The rows as every reader sees them: SCHEMA, the context on each row (what read_task_table returns)."""
        return widen([self.task_file()])

    def task_file(self) -> TaskFile:
        """The rows as the file stores them: the context once, checked against its columns' types."""
        return TaskFile(stored_context(self.context), pa.Table.from_pylist(self.rows, schema=MEASUREMENT_SCHEMA))

    def write(self, path: str | os.PathLike[str]) -> Path:
        if not self.rows:
            raise ValueError("no measurements to write")
        return write_table_atomic(self.task_file().stored_table(), path)


def write_table_atomic(table: pa.Table, path: str | os.PathLike[str]) -> Path:
    """Write to a temporary name in the same folder, then rename: readers see all of the file or none."""
    return publish(path, lambda tmp: pq.write_table(table, tmp))


def unreadable_reason(path: str | os.PathLike[str]) -> str | None:
    """The words for what is wrong with a file whose footer or schema is wrong (missing, empty, truncated, not
    Parquet, no rows, a schema from elsewhere), or None when those look whole. It reads only the footer: it names
    why read_task_file failed, and is no verdict on its own (result_problem is)."""
    path = Path(path)
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return "no file"
    if size == 0:
        return "an empty file"
    try:
        meta = pq.ParquetFile(path).metadata
    except Exception as exc:  # noqa: BLE001  pyarrow raises several kinds for a damaged file
        return f"not a whole Parquet file ({type(exc).__name__}: {exc})"
    if meta.num_rows == 0:
        return "a Parquet file with no rows"
    try:
        context = json.loads((meta.metadata or {}).get(CONTEXT_KEY, b"{}"))
    except ValueError:
        return "not a result file (its context is not JSON)"
    names = set(meta.schema.names) | (set(context) if isinstance(context, dict) else set())
    missing = sorted({"cell_id", "metric", "value"} - names)
    if missing:
        return f"not a result file (no {', '.join(missing)} column)"
    return None


class UnreadableTaskFile(ValueError):
    """A task file that cannot count as a result; the message says why, in words for the user."""


@dataclass(frozen=True)
class TaskFile:
    """One task's rows as its file holds them: `context` once and `rows` in MEASUREMENT_SCHEMA; or, for a file
    of the earlier wide layout, `context` None and `rows` in SCHEMA (the context on every row)."""

    context: dict[str, Any] | None
    rows: pa.Table

    @property
    def num_rows(self) -> int:
        return self.rows.num_rows

    def value(self, name: str) -> Any:
        """A context column's value (in a wide file, its first row's: a task writes one context)."""
        return self.context[name] if self.context is not None else self.rows.column(name)[0].as_py()

    def stored_table(self) -> pa.Table:
        """The table a task file holds: the measurement columns, the context as JSON in the metadata."""
        return self.rows.replace_schema_metadata({CONTEXT_KEY: json.dumps(self.context).encode()})


def stored_context(context: dict[str, Any]) -> dict[str, Any]:
    """The context with each value as its column holds it (an int for an int32 column, not numpy's int64),
    so that JSON keeps it; a value of the wrong type is refused as a one-row table of SCHEMA refuses it."""
    return pa.Table.from_pylist([context], schema=CONTEXT_SCHEMA).to_pylist()[0]


def read_task_file(path: str | os.PathLike[str]) -> TaskFile:
    """A task file of either layout, its columns in the schema's types (columns added since it was written take
    ADDED_COLUMN_DEFAULTS); UnreadableTaskFile says why a file cannot count as a result."""
    path = Path(path)
    try:
        # One read of the bytes, then parsing from memory: fewer system calls on a network file system.
        table = pq.ParquetFile(pa.BufferReader(path.read_bytes())).read(use_threads=False)
    except Exception as exc:  # noqa: BLE001  pyarrow raises several kinds for a truncated or foreign file
        raise UnreadableTaskFile(unreadable_reason(path) or f"unreadable: {exc}") from None
    if table.num_rows == 0:
        raise UnreadableTaskFile(unreadable_reason(path) or "unreadable: no rows")
    stored = (table.schema.metadata or {}).get(CONTEXT_KEY)
    if stored is None:  # the wide layout, written before #17
        task = TaskFile(None, conformed(with_added_columns(table), SCHEMA))
    else:
        task = TaskFile(context_of(stored), conformed(table, MEASUREMENT_SCHEMA))
    for name in JSON_COLUMNS:
        problem = json_object_problem(task.value(name))
        if problem:
            raise UnreadableTaskFile(f"its {name} is not readable: {problem}")
    return task


@functools.lru_cache(maxsize=1024)  # the cells of a campaign share most values: each distinct text is parsed once
def json_object_problem(text: str | None) -> str | None:
    """Why a JSON_COLUMNS value is not a JSON object, or None when it is one (or empty: none was taken)."""
    if not text:
        return None
    try:
        value = json.loads(text)
    except ValueError as exc:
        return f"not JSON ({exc})"
    return None if isinstance(value, dict) else f"JSON, but not an object ({type(value).__name__})"


def context_of(stored: bytes) -> dict[str, Any]:
    """The context a file stored as JSON, in CONTEXT_NAMES order; a column it predates takes its default, and
    one it has that this schema lacks (a newer writer) is left out, as the wide reader leaves out such a column."""
    try:
        context = json.loads(stored)
    except ValueError as exc:
        raise UnreadableTaskFile(f"not a result file: its context is not JSON ({exc})") from None
    if not isinstance(context, dict):
        raise UnreadableTaskFile("not a result file: its context is not a JSON object")
    missing = [name for name in CONTEXT_NAMES if name not in context and name not in ADDED_COLUMN_DEFAULTS]
    if missing:
        raise UnreadableTaskFile(f"not a result file of this schema (missing {', '.join(missing[:5])})")
    return {name: context.get(name, ADDED_COLUMN_DEFAULTS.get(name)) for name in CONTEXT_NAMES}


def with_added_columns(table: pa.Table) -> pa.Table:
    """A wide table written before some columns existed, with each such column at its default."""
    present = set(table.column_names)
    for name, default in ADDED_COLUMN_DEFAULTS.items():
        if name not in present:
            table = table.append_column(name, pa.array([default] * table.num_rows, SCHEMA.field(name).type))
    return table


def conformed(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """The table's columns of `schema`, in its order and types, without the file's metadata."""
    if not table.schema.equals(schema):
        present = set(table.column_names)  # a list built anew on each access: once, not once per column
        missing = [name for name in schema.names if name not in present]
        if missing:
            raise UnreadableTaskFile(f"not a result file of this schema (missing {', '.join(missing[:5])})")
        try:
            table = table.select(schema.names).cast(schema)
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as exc:
            raise UnreadableTaskFile(f"columns of the wrong type: {exc}") from None
    return table.replace_schema_metadata(None)


def widen(files: Sequence[TaskFile]) -> pa.Table:
    """The rows of the task files, in order, in SCHEMA: each run of files of the narrow layout is widened in
    one vectorised step (their contexts as one table, each row repeated over its file's rows)."""
    pieces = []
    for narrow, run in itertools.groupby(files, key=lambda file: file.context is not None):
        run = list(run)
        pieces.append(widen_narrow(run) if narrow else contiguous([file.rows for file in run]))
    return pa.concat_tables(pieces) if pieces else SCHEMA.empty_table()


def contiguous(tables: list[pa.Table]) -> pa.Table:
    """The tables as one, each column in one chunk: a Parquet writer given a chunk per file of 42 rows took 1.7
    times the CPU of the whole collect (10,000 files of the wide layout)."""
    return pa.concat_tables(tables).combine_chunks()


def widen_narrow(files: list[TaskFile]) -> pa.Table:
    try:  # column by column: ten times faster than from_pylist's row by row (2 against 17 ms for 512 files)
        contexts = pa.Table.from_pydict({name: [file.context[name] for file in files] for name in CONTEXT_NAMES},
                                        schema=CONTEXT_SCHEMA)
    except (pa.ArrowException, TypeError, ValueError, OverflowError) as exc:
        raise UnreadableTaskFile(f"context values of the wrong type: {exc}") from None
    repeated = contexts.take(np.repeat(np.arange(len(files)), [file.num_rows for file in files]))
    measurements = contiguous([file.rows for file in files])
    return pa.Table.from_arrays([*repeated.columns, *measurements.columns], schema=SCHEMA)


def read_task_table(path: str | os.PathLike[str]) -> pa.Table:
    """One task file as a table of SCHEMA (the context on every row), whichever layout it was written in."""
    return widen([read_task_file(path)])


def result_problem(path: str | os.PathLike[str]) -> str | None:
    """The one definition of a readable result, which status, resubmit and collect share: None when the file reads
    whole as collect reads it (every page, each column in its schema type, its context widened), else why it cannot
    count ("no file" when there is none). A footer alone is not enough: a damaged data page or a column of the wrong
    type shows only when the rows are read."""
    try:
        read_task_table(path)
    except UnreadableTaskFile as exc:
        return str(exc)
    return None
