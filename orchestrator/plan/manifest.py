"""A campaign's manifest, results/<campaign>/manifest.json: what was planned (its cells and scripts), rendered and
submitted (each sbatch call's outcome, each script's task ids, each resubmission), as one typed model. It is read
(load_manifest) and written (save_manifest, manifest_text) here only, and the updates that keep its parts in step
(an array's outcome and its tasks' ids) are the model's own methods.

The model is plain dataclasses, like the cell's configuration in bench_contract.config: the orchestrator's lock has
pydantic, but a manifest of 10,000 cells is read on every `watch` poll, and these few flat records need no more
than a type check per field. A manifest of another version (VERSION) is not read: one sentence says which version
wrote it and, for an earlier one, the command that plans its cells anew; a damaged one says so in the same way
(DamagedManifest). Neither is ever planned or submitted over.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import math
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench_contract.spec import write_text_atomic
from orchestrator.errors import OrchestratorError

MANIFEST = "manifest.json"
# The manifest's own layout. 1: manifests without a version field (a first use case beside the list of them,
# resubmissions without their executor, task numbering patched after recording). 2: this model.
VERSION = 2
DRY_RUN = "dry-run"  # the executor a dry run records: nothing of it was meant to run

# An array's record before its sbatch call: should the command be stopped or killed while sbatch works, the array
# is unknown, and the next run looks it up by its job name.
CALLING_SBATCH = "sbatch was called and its answer never recorded (the command was stopped or killed meanwhile)"
# The states of an array's record: SUBMITTED (with its job id), refused, UNKNOWN (no answer yet), "not found"
# (looked up by name: never accepted), "cancelled" (found, and cancelled by its executor).
SUBMITTED, UNKNOWN = "submitted", "unknown"
# How an array's tasks are numbered where sbatch's rule (task i of a part runs cell offset + i) does not hold:
IN_ORDER = "in order"  # submitit's resubmission: its k-th cell runs as task k
ONE_JOB = "one job"  # submitit's single task: a plain job, whose only task id is the job id

OMIT_EMPTY = {"omit_empty": True}  # a field left out of the file while it is empty, as it always was


def now_utc() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def utc(seconds: float) -> str:
    """A time (seconds since the epoch, as time.time()) as the manifest writes times, rounded up to the second."""
    return dt.datetime.fromtimestamp(math.ceil(seconds), dt.UTC).isoformat(timespec="seconds")


def is_past(when: str) -> bool:
    """Whether a time the manifest wrote (now_utc, utc) has passed."""
    return dt.datetime.fromisoformat(when) <= dt.datetime.now(dt.UTC)


@dataclass
class CellEntry:
    """One task's cell: which script runs it at which array index, and where its result goes."""

    framework: str
    script: str  # the key of the script and submission that run it (the framework, or "paired", with a system)
    system: str
    array_index: int
    trial: int
    cell_id: str
    pair_key: str
    model: str
    batch_size: int
    precision: str
    results: str


@dataclass
class ScriptEntry:
    """One rendered array script: the latest copy in --scripts-dir, the campaign's own copy (what is submitted),
    its checksum, its array tasks, and the specs files its tasks read (one per framework it runs)."""

    name: str
    path: str
    campaign_copy: str
    sha256: str
    array_tasks: int
    trials: int
    system: str
    specs_files: dict[str, str]
    specs: str = field(default="", metadata=OMIT_EMPTY)  # a one-framework script's specs file
    # A pack script's pairs per array task (--pack); 0 for one pair per task. Its runs' record: packs/ (driver).
    pack: int = field(default=0, metadata=OMIT_EMPTY)

    @property
    def job_name(self) -> str:
        """The name its task logs start with: the script's name without .sh."""
        return self.name.removesuffix(".sh")


@dataclass
class ArrayRecord:
    """One sbatch call's outcome (sbatch's own or submitit's), recorded as soon as it is known: the cells it covers
    (`offset` and `count`, or a resubmission's `indices` of the part at `offset`), its job name, by which Slurm
    finds it again, and its state (SUBMITTED with its job id, refused, UNKNOWN, not found, cancelled)."""

    script: str
    offset: int
    count: int
    executor: str
    job_name: str = field(default="", metadata=OMIT_EMPTY)
    indices: list[int] | None = None
    numbering: str = field(default="", metadata=OMIT_EMPTY)  # IN_ORDER or ONE_JOB; "" for sbatch's own
    state: str = UNKNOWN
    at: str = ""  # when the call was made (its intent's time)
    job_id: str = field(default="", metadata=OMIT_EMPTY)
    reason: str = field(default="", metadata=OMIT_EMPTY)
    # Until when a killed call's sbatch may still be accepted (sbatch_call.intent): no lookup says "not found" sooner.
    answer_by: str = field(default="", metadata=OMIT_EMPTY)
    reconciled_at: str = field(default="", metadata=OMIT_EMPTY)

    def local_indices(self) -> list[int]:
        """Its cells' array indices less its offset (a resubmission's `indices`, else 0 to count - 1)."""
        return self.indices if self.indices is not None else list(range(self.count))

    def cells(self) -> list[int]:
        """The array indices of the cells it covers."""
        return [self.offset + i for i in self.local_indices()]

    def task_ids(self) -> dict[int, str]:
        """Array index -> task id of each cell of a submitted array, by its numbering (sbatch's where none)."""
        if self.numbering == ONE_JOB:
            return {self.cells()[0]: self.job_id}
        if self.numbering == IN_ORDER:
            return {cell: f"{self.job_id}_{k}" for k, cell in enumerate(self.cells())}
        return {self.offset + i: f"{self.job_id}_{i}" for i in self.local_indices()}


@dataclass
class ArrayPart:
    """A submitted array of a script's submission: a part of the whole script (`count` tasks from `offset`), or a
    resubmission of some of its `indices`."""

    job_id: str
    offset: int
    count: int | None = None
    indices: list[int] | None = None


@dataclass
class ScriptSubmission:
    """What a script's tasks are now: the task id at each array index ("" where none was submitted), the arrays
    that hold them, and the tasks that failed while a command waited (None: not waited for; {}: none failed)."""

    job_id: str
    task_ids: list[str]
    submitted_at: str = field(default="", metadata=OMIT_EMPTY)
    arrays: list[ArrayPart] = field(default_factory=list, metadata=OMIT_EMPTY)
    failed: dict[int, str] | None = None


@dataclass
class ResubmissionRecord:
    """One resubmission of a script's tasks: the array indices, the jobs that run them, and how."""

    script: str
    indices: list[int]
    job_ids: list[str]
    executor: str
    rerun_completed: bool
    submitted_at: str


@dataclass
class CollectJob:
    """The --collect-after job: its id, script, and the array jobs it starts after."""

    job_id: str
    script: str
    after: list[str]
    submitted_at: str


@dataclass
class Manifest:
    campaign: str
    benchmark: str
    use_cases: list[int]
    created_at: str
    command: str
    git_commit: str
    executor: str  # the executor's name, or DRY_RUN
    profile: dict[str, Any]  # the cluster profile the jobs got, as its fields (asdict of plan.profile.ClusterProfile)
    scripts: dict[str, ScriptEntry]
    cells: list[CellEntry]
    submissions: dict[str, ScriptSubmission] = field(default_factory=dict)
    arrays: list[ArrayRecord] = field(default_factory=list, metadata=OMIT_EMPTY)
    resubmissions: list[ResubmissionRecord] = field(default_factory=list, metadata=OMIT_EMPTY)
    collect_job: CollectJob | None = None
    submission_error: str = field(default="", metadata=OMIT_EMPTY)  # why the rest was not submitted
    replanned_at: str = field(default="", metadata=OMIT_EMPTY)  # planned again by the same command
    version: int = VERSION

    @property
    def dry_run(self) -> bool:
        return self.executor == DRY_RUN

    def record_array(self, entry: ArrayRecord) -> ArrayRecord:
        """One sbatch call's outcome into `arrays`. The intent recorded before the call (UNKNOWN, CALLING_SBATCH) is
        replaced by the outcome, keeping its time (and its answer_by while the outcome is unknown). A submitted
        array also goes into `submissions` at once. Returns the recorded entry."""
        intent = next((a for a in self.arrays if a.reason == CALLING_SBATCH and a.state == UNKNOWN
                       and a.job_name == entry.job_name), None) if entry.job_name else None
        entry = dataclasses.replace(entry, at=intent.at if intent else now_utc())
        if intent is not None:
            if entry.state == UNKNOWN and not entry.answer_by:  # the call's sbatch may still answer until then
                entry.answer_by = intent.answer_by
            self.arrays.remove(intent)
        self.arrays.append(entry)
        if entry.state == SUBMITTED:
            self.add_submitted(entry)
        return entry

    def settle_array(self, entry: ArrayRecord, job_id: str | None) -> None:
        """An array whose submission was unknown, as Slurm has it now: found (submitted, with its job id) or not."""
        entry.state, entry.reconciled_at = (SUBMITTED if job_id else "not found"), now_utc()
        if job_id:
            entry.job_id = job_id
            self.add_submitted(entry)

    def add_submitted(self, entry: ArrayRecord) -> None:
        """Put a submitted array (a whole script, a part of it, or a resubmission) into the script's submission:
        the array in its `arrays`, each of its tasks' ids at its cell's array index."""
        n = self.scripts[entry.script].array_tasks
        sub = self.submissions.setdefault(entry.script, ScriptSubmission(entry.job_id, [], entry.at))
        sub.task_ids += [""] * (n - len(sub.task_ids))
        for cell, task_id in entry.task_ids().items():
            sub.task_ids[cell] = task_id
        if entry.indices is not None:  # a resubmission: some indices of a part, beside the arrays submitted before
            sub.arrays.append(ArrayPart(entry.job_id, entry.offset, indices=entry.indices))
            return
        parts = [a for a in sub.arrays if a.offset != entry.offset] + [ArrayPart(entry.job_id, entry.offset,
                                                                                 entry.count)]
        sub.arrays = sorted(parts, key=lambda a: a.offset)
        sub.job_id = sub.arrays[0].job_id

    def lost_arrays(self) -> dict[tuple[str, int], ArrayRecord]:
        """(script key, array index) -> the array covering that cell whose submission is still unknown: sbatch's
        answer was lost, and no lookup by its job name has settled it (reconcile). Such a cell may be queued."""
        return {(entry.script, cell): entry for entry in self.arrays if entry.state == UNKNOWN
                for cell in entry.cells()}

    def slurm_job_ids(self) -> list[str]:
        """Every Slurm array job of the campaign: each part of a split array, and each resubmission."""
        return [part.job_id for sub in self.submissions.values() for part in sub.arrays or [sub]
                if part.job_id.isdigit()]

    def cells_of(self, scripts: set[str]) -> list[CellEntry]:
        return [cell for cell in self.cells if cell.script in scripts]


# --- the file ------------------------------------------------------------------------------------------------

def manifest_text(manifest: Manifest) -> str:
    """Indented JSON, except that each cell takes one line: readable, and fast for 10,000 cells (json's
    indenting encoder is pure Python; the compact one is not)."""
    head = json.dumps(to_json(manifest, leave_out="cells"), indent=2, sort_keys=True)
    encode = json.JSONEncoder(sort_keys=True).encode
    cells = ",\n".join("    " + encode(vars(cell)) for cell in manifest.cells)  # flat records of plain values
    return head.removesuffix("\n}") + (',\n  "cells": [\n' + cells + "\n  ]\n}\n" if cells else ',\n  "cells": []\n}\n')


def save_manifest(campaign_dir: Path, manifest: Manifest) -> None:
    """Write the manifest whole or not at all (a reader never sees half of it)."""
    write_text_atomic(campaign_dir / MANIFEST, manifest_text(manifest))


class DamagedManifest(OrchestratorError):
    """A campaign's manifest that cannot be read (cut short, damaged, not a manifest, or of another version): every
    command that needs it says so in one sentence, and none plans or submits over it, since which cells it
    submitted is unknown here."""


def load_manifest(campaign_dir: Path) -> Manifest:
    """The campaign's manifest; DamagedManifest where it does not parse, is of another version, or does not hold
    what this version writes."""
    try:
        data = json.loads((campaign_dir / MANIFEST).read_text())
    except ValueError as exc:  # JSONDecodeError, or UnicodeDecodeError for bytes that are not text
        raise damaged(campaign_dir, str(exc)) from None
    if not isinstance(data, dict):
        raise damaged(campaign_dir, f"a JSON {type(data).__name__}, not an object")
    version = data.get("version", 1)
    if version != VERSION:
        raise other_version(campaign_dir, version)
    try:
        return from_json(Manifest, data)
    except ManifestFieldError as exc:
        raise damaged(campaign_dir, str(exc)) from None


def damaged(campaign_dir: Path, why: str) -> DamagedManifest:
    """The one sentence for a damaged manifest: which, why, what may still be queued, and what makes it anew."""
    return DamagedManifest(f"campaign {campaign_dir.name}'s manifest {campaign_dir / MANIFEST} cannot be read ({why}), "
                           f"so which of its cells were submitted is unknown and {not_over_it(campaign_dir)}")


def other_version(campaign_dir: Path, version: object) -> DamagedManifest:
    """The one sentence for a manifest of another version: which wrote it, and what to do."""
    where = f"campaign {campaign_dir.name}'s manifest {campaign_dir / MANIFEST}"
    if isinstance(version, int) and not isinstance(version, bool) and version > VERSION:
        return DamagedManifest(f"{where} was written by a later version of jaxtorch-bench (manifest version {version}, "
                               f"this one reads {VERSION}): run that version on it")
    return DamagedManifest(f"{where} was written by an earlier version of jaxtorch-bench (manifest version "
                           f"{version}, this one reads {VERSION}), so {not_over_it(campaign_dir)}")


def not_over_it(campaign_dir: Path) -> str:
    """The end of the sentences above: nothing goes over the campaign, its arrays may be queued, and the command
    that plans its cells anew once the folder is moved aside."""
    name, again = campaign_dir.name, planned_by(campaign_dir)
    return (f"nothing is planned or submitted over it; its arrays, named <script>:{name}:<cell> in Slurm, may still "
            f"be queued (`squeue --me --format='%i %j' | grep {name}`): once none is, move {campaign_dir} aside, and "
            + (f"`{again}` plans its cells anew" if again else "the command that planned it plans its cells anew"))


PRODUCED_BY = "# Produced by `"  # the scripts' header line that names the command (templates/sbatch.sh.j2)


def planned_by(campaign_dir: Path) -> str | None:
    """The command that planned a campaign, from the header of its scripts' copies ("# Produced by `...`")."""
    for script in sorted((campaign_dir / "scripts").glob("*.sh")):
        try:
            head = script.read_text(errors="replace")[:4096]
        except OSError:
            continue
        for line in head.splitlines():
            if line.startswith(PRODUCED_BY):
                return line.removeprefix(PRODUCED_BY).removesuffix("`")
    return None


# --- the records as JSON -----------------------------------------------------------------------------------------

class ManifestFieldError(ValueError):
    """A field missing, or of the wrong type: the manifest is not one this version writes."""


def to_json(record: Any, leave_out: str = "") -> Any:
    """A record as JSON's values: every field (but `leave_out`), except None and empty OMIT_EMPTY fields, which the
    file leaves out."""
    if dataclasses.is_dataclass(record):
        return {f.name: to_json(value) for f in dataclasses.fields(record) if f.name != leave_out
                and (value := getattr(record, f.name)) is not None and not (f.metadata.get("omit_empty") and not value)}
    if isinstance(record, dict):
        return {str(key): to_json(value) for key, value in record.items()}
    if isinstance(record, list):
        return [to_json(value) for value in record]
    return record


def from_json(cls: type, data: object, where: str = "") -> Any:
    """A record of `cls` from JSON's values, each field checked against its type; ManifestFieldError names the
    first that is missing or wrong. Keys the model does not know are left out."""
    if not isinstance(data, dict):
        raise ManifestFieldError(f"{where or 'the manifest'} is not an object")
    plain = _PLAIN.get(cls)
    if plain is not None and all(type(data.get(name)) is kind for name, kind in plain):
        return cls(**{name: data[name] for name, _ in plain})  # a cell: every field there, of its type
    values = {}
    for name, kind, required in _fields(cls):
        if name in data:
            values[name] = _value(kind, data[name], f"{where}{name}")
        elif required:
            raise ManifestFieldError(f"{where}{name} is missing")
    return cls(**values)


_FIELDS: dict[type, list[tuple[str, Any, bool]]] = {}


def _fields(cls: type) -> list[tuple[str, Any, bool]]:
    """(name, type, required) of each field, resolved once per class (a manifest may hold 10,000 cells)."""
    if cls not in _FIELDS:
        hints = typing.get_type_hints(cls)
        _FIELDS[cls] = [(f.name, hints[f.name], f.default is dataclasses.MISSING
                         and f.default_factory is dataclasses.MISSING) for f in dataclasses.fields(cls)]
    return _FIELDS[cls]


PLAIN = (str, int, bool)  # the types JSON reads as they are
# Records of plain required fields only (a manifest's 10,000 cells): checked in one pass, field by field only
# when that pass finds something missing or wrong, to say which.
_PLAIN = {cls: [(name, kind) for name, kind, _ in _fields(cls)] for cls in (CellEntry,)}


def _value(kind: Any, value: object, where: str) -> Any:
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin is types.UnionType:  # X | None
        return None if value is None else _value(args[0], value, where)
    if dataclasses.is_dataclass(kind):
        return from_json(kind, value, f"{where}.")
    if origin is list and isinstance(value, list):
        if args[0] in PLAIN and all(type(item) is args[0] for item in value):  # task ids, indices
            return list(value)
        return [_value(args[0], item, f"{where}[{i}]") for i, item in enumerate(value)]
    if origin is dict and isinstance(value, dict):
        keys = args[0]
        try:
            return {keys(key): _value(args[1], item, f"{where}.{key}") for key, item in value.items()}
        except ValueError:  # a key that is not a number where numbers are the keys
            raise ManifestFieldError(f"{where} has a key that is not {keys.__name__}") from None
    if kind is Any or (kind in (str, int, bool) and type(value) is kind):
        return value
    raise ManifestFieldError(f"{where} is {json.dumps(value)[:40]}, not {getattr(kind, '__name__', kind)}")
