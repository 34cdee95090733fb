"""A campaign: one request's cells, specs, scripts and job ids, recorded in results/<campaign>/manifest.json.

Layout of a campaign folder:
    manifest.json            what was planned, rendered and submitted, with the job ids
    specs/<framework>/<i>.json   the job spec of array task i
    scripts/<name>.sh        the exact script that was submitted (slurm_scripts/ holds the latest copy)
    init/                    the shared initial weights, written by the first task that needs them
    rows/<framework>/<cell_id>.parquet   one result file per task
    logs/                    the tasks' output
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import secrets
import subprocess
from dataclasses import asdict
from pathlib import Path
from typing import Any

from bench_contract.spec import JobSpec, write_text_atomic
from orchestrator import PROJECT_ROOT
from orchestrator.matrix import Cell
from orchestrator.profile import ClusterProfile
from orchestrator.render import RenderedScript

MANIFEST = "manifest.json"


def now_utc() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def new_campaign_id(benchmark: str, use_case: int) -> str:
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%S")
    return f"{benchmark}-uc{use_case}-{stamp}-{secrets.token_hex(2)}"


def git_commit() -> str:
    """The project's commit, with '-dirty' when the work tree has changes; 'unknown' outside a git checkout."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=10, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=10, check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return head + ("-dirty" if dirty else "")


def job_spec(cell: Cell, campaign: str, campaign_dir: Path, commit: str) -> JobSpec:
    settings = asdict(cell.settings)  # every run setting is a spec field of the same name
    if settings["data_dir"]:
        settings["data_dir"] = str(Path(settings["data_dir"]).resolve())  # the job may start elsewhere
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
        results_path=str(campaign_dir / "rows" / cell.framework / f"{cell.cell_id}.parquet"),
        # Shared by every cell of this model and seed, whatever the framework or batch size.
        init_weights_path=str(campaign_dir / "init" / f"{cell.benchmark}-{weights_label(cell)}-seed{cell.settings.seed}.npz"),
        git_commit=commit,
    )


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
) -> dict[str, Any]:
    """Write specs, scripts and the manifest. Everything was validated before: this only writes."""
    manifest: dict[str, Any] = {
        "campaign": campaign,
        "created_at": created_at,
        "command": command,
        "git_commit": commit,
        "executor": executor,
        "profile": asdict(profile),
        "scripts": {},
        "cells": [],
        "submissions": {},
    }
    for script in scripts:
        spec_dir = campaign_dir / "specs" / script.framework
        for index, cell in enumerate(script.cells):
            spec = job_spec(cell, campaign, campaign_dir, commit)
            write_text_atomic(spec_dir / f"{index}.json", spec.to_json())
            manifest["cells"].append({
                "framework": cell.framework,
                "array_index": index,
                "cell_id": cell.cell_id,
                "pair_key": cell.pair_key,
                "model": cell.model,
                "batch_size": cell.batch_size,
                "precision": cell.precision,
                "spec": str(spec_dir / f"{index}.json"),
                "results": spec.results_path,
            })
        copy = campaign_dir / "scripts" / script.name
        write_text_atomic(copy, script.text)
        copy.chmod(0o755)
        latest = scripts_dir / script.name
        write_text_atomic(latest, script.text)
        latest.chmod(0o755)
        manifest["scripts"][script.framework] = {
            "name": script.name,
            "path": str(latest),
            "campaign_copy": str(copy),
            "sha256": hashlib.sha256(script.text.encode()).hexdigest(),
            "array_tasks": len(script.cells),
        }
    (campaign_dir / "logs").mkdir(parents=True, exist_ok=True)
    save_manifest(campaign_dir, manifest)
    return manifest


def save_manifest(campaign_dir: Path, manifest: dict[str, Any]) -> None:
    write_text_atomic(campaign_dir / MANIFEST, json.dumps(manifest, indent=2, sort_keys=True) + "\n")


def load_manifest(campaign_dir: Path) -> dict[str, Any]:
    return json.loads((campaign_dir / MANIFEST).read_text())
