"""The cells without a result, and why: every submitted campaign's cells that have no result file that counts,
with their Slurm state and the end of their logs; written to failures.parquet and shown as a table."""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from pathlib import Path

from bench_contract.atomic import publish
from orchestrator.plan.manifest import MANIFEST, DamagedManifest, Manifest, load_manifest
from orchestrator.run.executors.base import LOG_LINES, log_tail
from orchestrator.run.status import DONE, SUCCESS, campaign_status
from orchestrator.suggest import command
from orchestrator.tables import format_table

FAILURES = "failures.parquet"  # the cells without a result, beside merged.parquet in the results folder
FAILURE_COLUMNS = ["campaign", "framework", "array_index", "cell_id", "task_id", "state", "reason", "log", "log_tail"]


def missing_cells(results_dir: Path, log_lines: int = LOG_LINES, unreadable: dict[Path, str] | None = None,
                  others: Sequence[Path] = (), damaged: list[Exception] | None = None) -> list[dict]:
    """Every cell of every submitted campaign under results_dir and the `others` folders that has no result,
    with its state, its reason (the failure row's, Slurm's, or "no result") and the end of its log; each
    campaign once (campaign_manifests). A result file that does not count (`unreadable`: path -> why, from the
    merge) leaves its cell without a result, and says why. Dry-run campaigns are not counted: nothing was meant
    to run there. One sacct call per campaign that misses something and ran on this cluster. A campaign whose
    manifest cannot be read is left out, its DamagedManifest added to `damaged` for the caller to say."""
    bad = {os.path.realpath(path): reason for path, reason in (unreadable or {}).items()}
    missing = []
    for folder, manifest in campaign_manifests([results_dir, *others], damaged):
        if manifest.dry_run:
            continue
        if ran_elsewhere(folder, manifest):
            missing += copied_campaign_missing(folder, manifest, bad)
            continue
        if all(os.path.isfile(c.results) and os.path.realpath(c.results) not in bad for c in manifest.cells):
            continue
        results = {(c.framework, c.array_index, c.cell_id): os.path.realpath(c.results) for c in manifest.cells}
        for cell in campaign_status(folder):
            result = results.get((cell.framework, cell.array_index, cell.cell_id), "")
            state, reason = cell.state, cell.detail
            if result in bad:
                state = "unreadable result" if state == SUCCESS else state
                reason = f"result file {result} does not count: {bad[result]}"
            if state not in DONE:
                missing.append({"campaign": manifest.campaign, "framework": cell.framework,
                                "array_index": cell.array_index, "cell_id": cell.cell_id, "task_id": cell.task_id,
                                "state": state, "reason": reason, "log": cell.log,
                                "log_tail": "\n".join(log_tail(cell.log, log_lines)), "results": result,
                                "results_dir": str(folder.parent)})
    return missing


def campaign_manifests(folders: Sequence[Path],
                       damaged: list[Exception] | None = None) -> Iterator[tuple[Path, Manifest]]:
    """(campaign folder, manifest) of every campaign under the results folders, each campaign once: one found
    in several folders (a copy) is taken from the first that holds it. One whose manifest cannot be read is left
    out, its DamagedManifest added to `damaged`."""
    seen: set[str] = set()
    for folder in folders:
        for path in sorted(folder.glob(f"*/{MANIFEST}")):
            try:
                manifest = load_manifest(path.parent)
            except DamagedManifest as exc:
                if damaged is not None:
                    damaged.append(exc)
                continue
            except OSError:
                continue
            if manifest.campaign not in seen:
                seen.add(manifest.campaign)
                yield path.parent, manifest


def ran_elsewhere(folder: Path, manifest: Manifest) -> bool:
    """Whether the campaign's result paths lie outside its folder: a folder copied from another cluster (or
    moved), whose jobs this cluster's Slurm does not know."""
    inside = os.path.realpath(folder) + os.sep
    return any(not os.path.realpath(c.results).startswith(inside) for c in manifest.cells)


def relocated(folder: Path, results: str) -> str:
    """A cell's result path (written where the campaign ran) in this copy of its folder: the part after the
    campaign folder's name, under `folder`; the path itself when it does not name that folder."""
    parts = Path(results).parts
    if folder.name not in parts:
        return results
    last = len(parts) - 1 - parts[::-1].index(folder.name)
    return str(folder.joinpath(*parts[last + 1:]))


def copied_campaign_missing(folder: Path, manifest: Manifest, bad: dict[str, str]) -> list[dict]:
    """The cells without a result of a campaign that ran elsewhere, read from the files in this copy alone:
    the jobs' Slurm state and logs belong to the other cluster, so neither is looked up."""
    missing = []
    for cell in manifest.cells:
        result = os.path.realpath(relocated(folder, cell.results))
        if os.path.isfile(result) and result not in bad:
            continue
        if result in bad:
            state, reason = "unreadable result", f"result file {result} does not count: {bad[result]}"
        else:
            state, reason = "no result", (f"no result file in this copy ({folder}); the campaign ran elsewhere, so "
                                          "its Slurm state is not looked up here")
        missing.append({"campaign": manifest.campaign, "framework": cell.framework,
                        "array_index": cell.array_index, "cell_id": cell.cell_id, "task_id": "",
                        "state": state, "reason": reason, "log": "", "log_tail": "", "results": result,
                        "results_dir": str(folder.parent)})
    return missing


def write_failures(path: Path, missing: list[dict]) -> Path:
    """The missing cells as one small Parquet table beside the merged dataset (never inside it), rewritten
    whole by every collect: a cell that has its result since is no longer listed."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = pa.schema([(name, pa.int32() if name == "array_index" else pa.string()) for name in FAILURE_COLUMNS])
    table = pa.Table.from_pylist(missing, schema=schema)
    return publish(path, lambda tmp: pq.write_table(table, tmp))


def missing_lines(missing: list[dict], failures_path: Path) -> list[str]:
    """The cells without a result as a table, then the end of each one's log; none when nothing is missing."""
    if not missing:
        return []
    lines = [f"\n{len(missing)} cells have no result (listed in {failures_path}):",
             format_table(["campaign", "framework", "index", "cell", "state", "reason"],
                          [[m["campaign"], m["framework"], m["array_index"], m["cell_id"], m["state"], m["reason"]]
                           for m in missing])]
    for m in missing:
        if m["log_tail"]:
            lines.append(f"--- {m['framework']} {m['array_index']} ({m['cell_id']}): end of {m['log']}:")
            lines.append("\n".join(f"  | {line}" for line in m["log_tail"].splitlines()))
    lines.append(f"submit only those again with: {resubmit_commands(missing)}")
    return lines


def resubmit_commands(missing: list[dict]) -> str:
    """The resubmit command of each campaign of these cells, with its results folder: commands that run as
    printed (issue 32), not a CAMPAIGN to fill in."""
    campaigns = dict.fromkeys((m["campaign"], m.get("results_dir")) for m in missing)
    return "; ".join(command("resubmit", name, results_dir=Path(folder) if folder else None)
                     for name, folder in campaigns)


def unreadable_lines(skipped: list[tuple[Path, str]], missing: list[dict]) -> list[str]:
    """Every result file that does not count (unreadable, empty, truncated, foreign), with its reason and its
    cell, and what to do about it; none when every result file was merged."""
    if not skipped:
        return []
    cells = {m["results"]: m for m in missing if m.get("results")}
    lines = [f"\n{len(skipped)} result files are unreadable and were not merged; their cells have no result:"]
    for path, reason in skipped:
        cell = cells.get(os.path.realpath(path))
        where = f" (cell {cell['cell_id']}, {cell['framework']} index {cell['array_index']} of {cell['campaign']})" \
            if cell else ""
        lines.append(f"  {path}: {reason}{where}")
    known = [cells[os.path.realpath(path)] for path, _ in skipped if os.path.realpath(path) in cells]
    again = f"`{resubmit_commands(known)}`" if known else f"`{command('resubmit')}`"
    lines.append(f"{len(skipped)} result files are unreadable: run {again} to run their cells again")
    return lines
