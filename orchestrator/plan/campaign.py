"""A campaign: one request's cells, specs, scripts and job ids, recorded in results/<campaign>/manifest.json (the
campaigns of a results folder are found in campaign_folders).

Layout of a campaign folder:
    manifest.json            what was planned, rendered and submitted, with the job ids
    specs/<framework>.jsonl  the job specs, one JSON object per line: line i+1 for array task i
    scripts/<name>.sh        the exact script that was submitted (slurm_scripts/ holds the latest copy)
    init/                    the shared initial weights, written by the first task that needs them
    rows/<framework>/<cell_id>.parquet   one result file per task
    logs/                    the tasks' output
"""

from __future__ import annotations

import datetime as dt
import functools
import hashlib
import json
import math
import os
import secrets
import subprocess
from dataclasses import asdict
from pathlib import Path
from typing import Any

from bench_contract.atomic import publish_all
from bench_contract.spec import JobSpec, write_text_atomic
from orchestrator import PROJECT_ROOT
from orchestrator.errors import OrchestratorError, oserror_reason
from orchestrator.plan.campaign_config import FILE as CONFIGURATION
from orchestrator.plan.matrix import Cell
from orchestrator.plan.profile import ClusterProfile
from orchestrator.plan.render import PAIRED, RenderedScript, specs_path

MANIFEST = "manifest.json"


def now_utc() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def utc(seconds: float) -> str:
    """A time (seconds since the epoch, as time.time()) as the manifest writes times, rounded up to the second."""
    return dt.datetime.fromtimestamp(math.ceil(seconds), dt.UTC).isoformat(timespec="seconds")


def is_past(when: str) -> bool:
    """Whether a time the manifest wrote (now_utc, utc) has passed."""
    return dt.datetime.fromisoformat(when) <= dt.datetime.now(dt.UTC)


def new_campaign_id(benchmark: str, use_cases: int | str) -> str:
    """E.g. mnist-uc3-20261127T051700-ab12; several use cases are named 3+5 (catalog.use_cases_label)."""
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%S")
    return f"{benchmark}-uc{use_cases}-{stamp}-{secrets.token_hex(2)}"


def git_commit() -> str:
    """The project's commit, with '-dirty' when the work tree has changes; "not available: ..." outside a git
    checkout (the spelling of every unknown provenance field, bench_contract.results.not_available)."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=10, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=10, check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "not available: not a git checkout, or git failed"
    return head + ("-dirty" if dirty else "")


def project_version() -> str:
    """The version pyproject.toml declares (its one definition), as installed; read from the file itself where the
    project runs from a checkout that was never installed."""
    from importlib import metadata

    try:
        return metadata.version("jaxtorch-bench")
    except metadata.PackageNotFoundError:
        import tomllib

        return tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())["project"]["version"]


def job_spec(cell: Cell, campaign: str, campaign_dir: Path, commit: str, trial: int = 0,
             xla_flags: str = "") -> JobSpec:
    settings = dict(cell.settings.as_dict)  # every run setting is a spec field of the same name
    if settings["data_dir"]:
        settings["data_dir"] = absolute(settings["data_dir"])  # the job may start elsewhere
    # Paths by string formatting, not pathlib: this runs once per cell, and the names hold no separators.
    return JobSpec(
        campaign=campaign,
        cell_id=cell.cell_id,
        pair_key=cell.pair_key,
        framework=cell.framework,
        benchmark=cell.benchmark,
        use_case=cell.use_case,
        model=cell.model,
        batch_size=cell.batch_size,
        precision=cell.precision,
        **settings,
        trial=trial,
        # The trial is in the name, so that trials of one cell never overwrite each other.
        results_path=f"{campaign_dir}{os.sep}rows{os.sep}{cell.framework}{os.sep}{cell.cell_id}-trial{trial}.parquet",
        # Shared by every cell of this model and seed, whatever the framework or batch size.
        init_weights_path=f"{campaign_dir}{os.sep}init{os.sep}{cell.benchmark}-{weights_label(cell)}-seed{cell.settings.seed}.npz",
        git_commit=commit,
        xla_flags=xla_flags,
        system=cell.system,
    )


@functools.cache
def absolute(path: str) -> str:
    """Resolved once per request, not once per cell: every cell of a request shares its data folder."""
    return str(Path(path).resolve())


def weights_label(cell: Cell) -> str:
    variant = cell.settings.model_variant
    return cell.model if variant == "full" else f"{cell.model}-{variant}"


def write_campaign(
    campaign: str,
    campaign_dir: Path,
    scripts: list[RenderedScript],
    scripts_dir: Path,
    profile: ClusterProfile,
    *,
    command: str,
    commit: str,
    executor: str,
    created_at: str,
    previous: dict[str, Any] | None = None,
    configuration: str = "",
) -> dict[str, Any]:
    """Write specs, scripts, the campaign's configuration file (`configuration`, plan.campaign_config; none where
    it is "") and the manifest, all or nothing. Everything was validated before: this only writes.

    Every file is written whole before any is put in place, the manifest last (bench_contract.atomic.publish_all):
    a disk that fills up mid-way leaves no part of a new campaign, nor of a new latest copy in scripts_dir, and a
    campaign planned again stays as it was; the error says so in one sentence.

    `previous` is the manifest of the same campaign planned before (the same command run again): its job
    ids and history are carried over, so that only the cells without a result are submitted again."""
    first = scripts[0].cells[0]
    manifest: dict[str, Any] = {
        "campaign": campaign,
        "benchmark": first.benchmark,
        "use_case": first.use_case,
        **several_use_cases(scripts),
        "created_at": created_at,
        "command": command,
        "git_commit": commit,
        "executor": executor,
        "profile": asdict(profile),
        "scripts": {},
        "cells": [],
        "submissions": {},
    }
    files: list[tuple[Path, str, int | None]] = []
    for script in scripts:
        for framework in sorted({c.framework for c in script.cells}):  # a paired script runs two frameworks
            manifest["cells"] += write_specs(script, framework, campaign, campaign_dir, commit, profile, files)
        manifest["scripts"][script.key] = write_script(script, campaign_dir, scripts_dir, files)
    if previous is not None:
        manifest.update({key: previous[key] for key in ("created_at", "submissions", "resubmissions", "arrays")
                         if key in previous})
        manifest["replanned_at"] = now_utc()
    if configuration:
        files.append((campaign_dir / CONFIGURATION, configuration, None))
    files.append((campaign_dir / MANIFEST, manifest_text(manifest), None))  # last: it makes the campaign whole
    try:
        publish_all(files, folders=[campaign_dir / "logs"])
    except OSError as exc:
        kept = (f"campaign {campaign} stays as it was planned before" if previous is not None
                else f"nothing of campaign {campaign} was kept")
        raise OrchestratorError(f"could not write the campaign: {oserror_reason(exc)}; {kept}, and {scripts_dir} "
                                "is unchanged") from None
    return manifest


def several_use_cases(scripts: list[RenderedScript]) -> dict[str, list[int]]:
    """{"use_cases": [3, 5]} for a campaign of several use cases (--use-case 3,5), whose "use_case" is the first;
    {} for one, whose manifest stays as it always was."""
    numbers = sorted({cell.use_case for script in scripts for cell in script.cells})
    return {"use_cases": numbers} if len(numbers) > 1 else {}


def write_specs(script: RenderedScript, framework: str, campaign: str, campaign_dir: Path, commit: str,
                profile: ClusterProfile, files: list[tuple[Path, str, int | None]]) -> list[dict[str, Any]]:
    """Add the framework's specs file to `files` and return the manifest's entries of its cells, in the same order.
    The cell at `index` of this framework, trial `trial`, is line index * trials + trial (render.spec_line)."""
    cells, lines = [], []
    for index, cell in enumerate(c for c in script.cells if c.framework == framework):
        for trial in range(script.trials):
            # The profile's XLA flags for this model; only JAX reads XLA_FLAGS.
            flags = profile.xla_flags.get(cell.model, "") if cell.framework == "jax" else ""
            spec = job_spec(cell, campaign, campaign_dir, commit, trial, flags)
            lines.append(spec.to_line())
            cells.append({
                "framework": cell.framework,
                "script": script.key,  # the key of the script and submission that run it
                "system": cell.system,
                "array_index": script.task_index(index, trial),
                "trial": trial,
                "cell_id": cell.cell_id,
                "pair_key": cell.pair_key,
                "model": cell.model,
                "batch_size": cell.batch_size,
                "precision": cell.precision,
                "results": spec.results_path,
            })
    # One file per framework, not one per cell: on a network file system each file costs a round trip.
    files.append((specs_path(campaign_dir, framework, script.system), "\n".join(lines) + "\n", None))
    return cells


def write_script(script: RenderedScript, campaign_dir: Path, scripts_dir: Path,
                 files: list[tuple[Path, str, int | None]]) -> dict[str, Any]:
    """Add the script to `files`, in the campaign and, as the latest copy, in scripts_dir; return its manifest
    entry."""
    copy = campaign_dir / "scripts" / script.name
    latest = scripts_dir / script.name
    files += [(copy, script.text, 0o755), (latest, script.text, 0o755)]
    frameworks = sorted({c.framework for c in script.cells})
    return {
        **({} if script.framework == PAIRED else {"specs": str(specs_path(campaign_dir, script.framework,
                                                                          script.system))}),
        "system": script.system,
        "name": script.name,
        "path": str(latest),
        "campaign_copy": str(copy),
        "sha256": hashlib.sha256(script.text.encode()).hexdigest(),
        "array_tasks": script.tasks,
        "trials": script.trials,
        "specs_files": {fw: str(specs_path(campaign_dir, fw, script.system)) for fw in frameworks},
    }


def write_collect_script(campaign_dir: Path, name: str, text: str) -> Path:
    """The --collect-after script, kept in the campaign beside the arrays' scripts."""
    path = campaign_dir / "scripts" / name
    write_text_atomic(path, text)
    return path


def record_collect_job(campaign_dir: Path, manifest: dict[str, Any], script: Path, job_id: str,
                       after: list[str]) -> None:
    """The --collect-after job in the manifest ("collect_job"): its id, script and the array jobs it waits for."""
    manifest["collect_job"] = {"job_id": job_id, "script": str(script), "after": after, "submitted_at": now_utc()}
    save_manifest(campaign_dir, manifest)


def manifest_text(manifest: dict[str, Any]) -> str:
    """Indented JSON, except that each cell takes one line: readable, and fast for 10,000 cells (json's
    indenting encoder is pure Python; the compact one is not)."""
    head = json.dumps({k: v for k, v in manifest.items() if k != "cells"}, indent=2, sort_keys=True)
    encode = json.JSONEncoder(sort_keys=True).encode
    cells = ",\n".join("    " + encode(cell) for cell in manifest.get("cells", []))
    return head.removesuffix("\n}") + (',\n  "cells": [\n' + cells + "\n  ]\n}\n" if cells else ',\n  "cells": []\n}\n')


# The reason of an array recorded before its sbatch call: should the command be stopped or killed while sbatch
# works, the array is unknown, and the next run looks it up by its job name.
CALLING_SBATCH = "sbatch was called and its answer never recorded (the command was stopped or killed meanwhile)"


def record_array(manifest: dict[str, Any], entry: dict[str, Any]) -> dict[str, Any]:
    """One sbatch call's outcome, recorded in the manifest's "arrays": {"script", "offset", "count", "job_name",
    "state": "submitted" (with "job_id"), "refused" or "unknown" (with "reason"), "at"}. The intent recorded before
    the call (unknown, CALLING_SBATCH) is replaced by the outcome, keeping its time. A submitted array also goes
    into "submissions" at once: its job id and the ids of its tasks. Returns the recorded entry."""
    arrays = manifest.setdefault("arrays", [])
    intent = next((a for a in arrays if a.get("reason") == CALLING_SBATCH and a["state"] == "unknown"
                   and a.get("job_name") == entry.get("job_name")), None) if entry.get("job_name") else None
    entry = {**entry, "at": intent["at"] if intent else now_utc()}
    if intent and "answer_by" in intent and entry["state"] == "unknown":  # the call's sbatch may still answer until
        entry.setdefault("answer_by", intent["answer_by"])
    if intent is not None:
        arrays.remove(intent)
    arrays.append(entry)
    if entry["state"] == "submitted":
        add_submitted(manifest, entry)
    return entry


def settle_array(manifest: dict[str, Any], entry: dict[str, Any], job_id: str | None) -> None:
    """An array whose submission was unknown, as Slurm has it now: found (submitted, with its job id) or not."""
    entry.update(state="submitted" if job_id else "not found", reconciled_at=now_utc())
    if job_id:
        entry["job_id"] = job_id
        add_submitted(manifest, entry)


def add_submitted(manifest: dict[str, Any], entry: dict[str, Any]) -> None:
    """Put a submitted array (a whole script, or one part of it) into the script's submission: every part's
    job id, offset and size in "arrays", each task's id at its array index ("" where nothing was submitted)."""
    key, job_id, offset, count = entry["script"], entry["job_id"], entry["offset"], entry["count"]
    n = manifest["scripts"][key]["array_tasks"]
    sub = manifest["submissions"].setdefault(key, {"job_id": job_id, "task_ids": [], "submitted_at": entry["at"]})
    ids = sub["task_ids"] + [""] * (n - len(sub["task_ids"]))
    for cell, task_id in numbered_tasks(entry).items():
        ids[cell] = task_id
    sub["task_ids"] = ids
    if "indices" in entry:  # a resubmission: some indices of a part, beside the arrays submitted before
        sub.setdefault("arrays", []).append({"job_id": job_id, "offset": offset, "indices": entry["indices"]})
        return
    parts = [a for a in sub.setdefault("arrays", []) if a["offset"] != offset]
    sub["arrays"] = sorted(parts + [{"job_id": job_id, "offset": offset, "count": count}], key=lambda a: a["offset"])
    sub["job_id"] = sub["arrays"][0]["job_id"]


# How an array's tasks are numbered where sbatch's rule (task i of a part runs cell offset + i) does not hold:
IN_ORDER = "in order"  # submitit's resubmission: its k-th cell runs as task k
ONE_JOB = "one job"  # submitit's single task: a plain job, whose only task id is the job id


def numbered_tasks(entry: dict[str, Any]) -> dict[int, str]:
    """Array index -> task id of each cell of a submitted array, by its "numbering" (sbatch's where none)."""
    job_id, offset = entry["job_id"], entry["offset"]
    local = entry["indices"] if "indices" in entry else range(entry["count"])
    cells = [offset + i for i in local]
    if entry.get("numbering") == ONE_JOB:
        return {cells[0]: job_id}
    if entry.get("numbering") == IN_ORDER:
        return {cell: f"{job_id}_{k}" for k, cell in enumerate(cells)}
    return {offset + i: f"{job_id}_{i}" for i in local}


def save_manifest(campaign_dir: Path, manifest: dict[str, Any]) -> None:
    write_text_atomic(campaign_dir / MANIFEST, manifest_text(manifest))


class DamagedManifest(OrchestratorError):
    """A campaign's manifest that cannot be read (cut short, damaged, or not a manifest): every command that needs it
    says so in one sentence, and none plans or submits over it, since which cells it submitted is unknown."""


def load_manifest(campaign_dir: Path) -> dict[str, Any]:
    """The campaign's manifest; DamagedManifest where it does not parse (cut short, damaged) or is no JSON object."""
    try:
        manifest = json.loads((campaign_dir / MANIFEST).read_text())
    except ValueError as exc:  # JSONDecodeError, or UnicodeDecodeError for bytes that are not text
        raise damaged(campaign_dir, str(exc)) from None
    if not isinstance(manifest, dict):
        raise damaged(campaign_dir, f"a JSON {type(manifest).__name__}, not an object")
    return manifest


def damaged(campaign_dir: Path, why: str) -> DamagedManifest:
    """The one sentence for a damaged manifest: which, why, what may still be queued, and what makes it anew."""
    name, again = campaign_dir.name, planned_by(campaign_dir)
    return DamagedManifest(
        f"campaign {name}'s manifest {campaign_dir / MANIFEST} cannot be read ({why}), so which of its cells were "
        f"submitted is unknown and nothing is planned or submitted over it; its arrays, named <script>:{name}:<cell> "
        f"in Slurm, may still be queued (`squeue --me --format='%i %j' | grep {name}`): once none is, move "
        f"{campaign_dir} aside, and " + (f"`{again}` plans its cells anew" if again else
                                          "the command that planned it plans its cells anew"))


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


PRODUCED_BY = "# Produced by `"  # the scripts' header line that names the command (templates/sbatch.sh.j2)


DRY_RUN = "dry-run"  # the executor a dry run records: nothing of it was meant to run


def is_dry_run(manifest: dict[str, Any]) -> bool:
    return manifest.get("executor") == DRY_RUN


def lost_arrays(manifest: dict[str, Any]) -> dict[tuple[str, int], dict[str, Any]]:
    """(script key, array index) -> the array entry covering that cell whose submission is still unknown: sbatch's
    answer was lost, and no lookup by its job name has settled it (reconcile). Such a cell may be queued."""
    lost = {}
    for entry in manifest.get("arrays", []):
        if entry.get("state") != "unknown":
            continue
        offset = entry["offset"]
        cells = [offset + i for i in entry["indices"]] if "indices" in entry else range(offset, offset + entry["count"])
        lost.update({(entry["script"], cell): entry for cell in cells})
    return lost


def slurm_job_ids(manifest: dict[str, Any]) -> list[str]:
    """Every Slurm array job of the campaign: each part of a split array, and each resubmission."""
    # An array split to fit MaxArraySize has one job id per part; task_ids already name every task.
    return [part["job_id"] for sub in manifest.get("submissions", {}).values()
            for part in sub.get("arrays") or [sub] if part["job_id"].isdigit()]
