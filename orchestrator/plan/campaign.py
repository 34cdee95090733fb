"""A campaign written: one request's cells, specs and scripts, and its manifest (plan.manifest, the typed record of
what was planned and submitted; the campaigns of a results folder are found in campaign_folders).

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
import os
import secrets
import subprocess
from dataclasses import asdict
from pathlib import Path

from bench_contract.atomic import publish_all
from bench_contract.spec import JobSpec, write_text_atomic
from orchestrator import PROJECT_ROOT
from orchestrator.errors import OrchestratorError, oserror_reason
from orchestrator.plan.campaign_config import FILE as CONFIGURATION
from orchestrator.plan.manifest import MANIFEST, CellEntry, Manifest, ScriptEntry, manifest_text, now_utc
from orchestrator.plan.matrix import Cell
from orchestrator.plan.profile import ClusterProfile
from orchestrator.plan.render import PAIRED, RenderedScript, specs_path


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
        tuned=json.loads(cell.tuned) if cell.tuned else {},
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
    previous: Manifest | None = None,
    configuration: str = "",
) -> Manifest:
    """Write specs, scripts, the campaign's configuration file (`configuration`, plan.campaign_config; none where
    it is "") and the manifest, all or nothing. Everything was validated before: this only writes.

    Every file is written whole before any is put in place, the manifest last (bench_contract.atomic.publish_all):
    a disk that fills up mid-way leaves no part of a new campaign, nor of a new latest copy in scripts_dir, and a
    campaign planned again stays as it was; the error says so in one sentence.

    `previous` is the manifest of the same campaign planned before (the same command run again): its job
    ids and history are carried over, so that only the cells without a result are submitted again."""
    files: list[tuple[Path, str, int | None]] = []
    cells: list[CellEntry] = []
    entries: dict[str, ScriptEntry] = {}
    for script in scripts:
        for framework in sorted({c.framework for c in script.cells}):  # a paired script runs two frameworks
            cells += write_specs(script, framework, campaign, campaign_dir, commit, profile, files)
        entries[script.key] = write_script(script, campaign_dir, scripts_dir, files)
    manifest = Manifest(
        campaign=campaign, benchmark=scripts[0].cells[0].benchmark,
        use_cases=sorted({cell.use_case for script in scripts for cell in script.cells}), created_at=created_at,
        command=command, git_commit=commit, executor=executor, profile=asdict(profile), scripts=entries, cells=cells)
    if previous is not None:
        manifest.created_at, manifest.submissions = previous.created_at, previous.submissions
        manifest.resubmissions, manifest.arrays = previous.resubmissions, previous.arrays
        manifest.replanned_at = now_utc()
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


def write_specs(script: RenderedScript, framework: str, campaign: str, campaign_dir: Path, commit: str,
                profile: ClusterProfile, files: list[tuple[Path, str, int | None]]) -> list[CellEntry]:
    """Add the framework's specs file to `files` and return the manifest's entries of its cells, in the same order.
    The cell at `index` of this framework, trial `trial`, is line index * trials + trial (render.spec_line)."""
    cells, lines = [], []
    for index, cell in enumerate(c for c in script.cells if c.framework == framework):
        for trial in range(script.trials):
            # The profile's XLA flags for this model; only JAX reads XLA_FLAGS.
            flags = profile.xla_flags.get(cell.model, "") if cell.framework == "jax" else ""
            spec = job_spec(cell, campaign, campaign_dir, commit, trial, flags)
            lines.append(spec.to_line())
            cells.append(CellEntry(framework=cell.framework, script=script.key, system=cell.system,
                                   array_index=script.task_index(index, trial), trial=trial, cell_id=cell.cell_id,
                                   pair_key=cell.pair_key, model=cell.model, batch_size=cell.batch_size,
                                   precision=cell.precision, results=spec.results_path))
    # One file per framework, not one per cell: on a network file system each file costs a round trip.
    files.append((specs_path(campaign_dir, framework, script.system), "\n".join(lines) + "\n", None))
    return cells


def write_script(script: RenderedScript, campaign_dir: Path, scripts_dir: Path,
                 files: list[tuple[Path, str, int | None]]) -> ScriptEntry:
    """Add the script to `files`, in the campaign and, as the latest copy, in scripts_dir; return its manifest
    entry."""
    copy = campaign_dir / "scripts" / script.name
    latest = scripts_dir / script.name
    files += [(copy, script.text, 0o755), (latest, script.text, 0o755)]
    frameworks = sorted({c.framework for c in script.cells})
    return ScriptEntry(
        name=script.name, path=str(latest), campaign_copy=str(copy),
        sha256=hashlib.sha256(script.text.encode()).hexdigest(), array_tasks=script.tasks, trials=script.trials,
        system=script.system, specs_files={fw: str(specs_path(campaign_dir, fw, script.system)) for fw in frameworks},
        specs="" if script.framework == PAIRED else str(specs_path(campaign_dir, script.framework, script.system)),
        pack=script.pack)


def write_collect_script(campaign_dir: Path, name: str, text: str) -> Path:
    """The --collect-after script, kept in the campaign beside the arrays' scripts."""
    path = campaign_dir / "scripts" / name
    write_text_atomic(path, text)
    return path
