"""The cells without a result, and why: every submitted campaign's cells that have no result file that counts,
with their Slurm state and the end of their logs; written to failures.parquet. Those that ended without one are
shown as a table, with the resubmit command; those still queued or running (or whose state is unknown: the queue
could not be read) may yet get one, and are counted in one line that says to wait, never to resubmit them."""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from pathlib import Path

from bench_contract.atomic import publish
from orchestrator.plan.manifest import MANIFEST, DamagedManifest, Manifest, load_manifest
from orchestrator.run.executors.base import LOG_LINES, log_tail
from orchestrator.run.queue import ACTIVE
from orchestrator.run.status import DONE, SUCCESS, UNKNOWN, UNSETTLED, Shown, campaign_status, unknown_sentence
from orchestrator.suggest import command
from orchestrator.tables import format_table

FAILURES = "failures.parquet"  # the cells without a result, beside merged.parquet in the results folder
FAILURE_COLUMNS = ["campaign", "framework", "array_index", "cell_id", "trial", "system", "task_id", "state", "reason",
                   "log", "log_tail"]
INTEGER_COLUMNS = ("array_index", "trial")


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
        shown = Shown.of(manifest.cells)  # whether its trials and systems tell its cells apart
        for cell in campaign_status(folder):
            result = results.get((cell.framework, cell.array_index, cell.cell_id), "")
            state, reason = cell.state, cell.detail
            if result in bad and state not in UNSETTLED:  # an unsettled cell's detail is the queue's word
                state = "unreadable result" if state == SUCCESS else state
                reason = f"result file {result} does not count: {bad[result]}"
            if state not in DONE:
                missing.append(missing_row(folder, manifest, cell, shown, state, reason, result, cell.task_id,
                                           cell.log, "\n".join(log_tail(cell.log, log_lines))))
    return missing


def missing_row(folder: Path, manifest: Manifest, cell, shown: Shown, state: str, reason: str, result: str,
                task_id: str = "", log: str = "", tail: str = "") -> dict:
    """A cell without a result (its manifest's cell or its status: both name it alike), as failures.parquet holds it."""
    return {"campaign": manifest.campaign, "framework": cell.framework, "array_index": cell.array_index,
            "cell_id": cell.cell_id, "trial": cell.trial, "system": cell.system, "task_id": task_id, "state": state,
            "reason": reason, "log": log, "log_tail": tail, "results": result, "results_dir": str(folder.parent),
            "shown": shown}


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
    missing, shown = [], Shown.of(manifest.cells)
    for cell in manifest.cells:
        result = os.path.realpath(relocated(folder, cell.results))
        if os.path.isfile(result) and result not in bad:
            continue
        if result in bad:
            state, reason = "unreadable result", f"result file {result} does not count: {bad[result]}"
        else:
            state, reason = "no result", (f"no result file in this copy ({folder}); the campaign ran elsewhere, so "
                                          "its Slurm state is not looked up here")
        missing.append(missing_row(folder, manifest, cell, shown, state, reason, result))  # no job here: no log
    return missing


def write_failures(path: Path, missing: list[dict]) -> Path:
    """The missing cells as one small Parquet table beside the merged dataset (never inside it), rewritten
    whole by every collect: a cell that has its result since is no longer listed."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = pa.schema([(name, pa.int32() if name in INTEGER_COLUMNS else pa.string()) for name in FAILURE_COLUMNS])
    table = pa.Table.from_pylist(missing, schema=schema)
    return publish(path, lambda tmp: pq.write_table(table, tmp))


def missing_lines(missing: list[dict], failures_path: Path) -> list[str]:
    """The cells that ended without a result as a table (with their trial and system where their campaigns run
    several), then the end of each one's log and the resubmit command; none when no cell ended without one.
    Cells still queued, running or unknown are left to unsettled_lines."""

    ended = [m for m in missing if m["state"] not in UNSETTLED]
    if not ended:
        return []
    trials = any(m["shown"].trials for m in ended)
    systems = any(m["shown"].systems for m in ended)
    lines = [f"\n{len(ended)} cells have no result (listed in {failures_path}):",
             format_table(["campaign", "framework", *["system"] * systems, "index", "cell", *["trial"] * trials,
                           "state", "reason"],
                          [[m["campaign"], m["framework"], *[m["system"] or "-"] * systems, m["array_index"],
                            m["cell_id"], *[m["trial"]] * trials, m["state"], m["reason"]] for m in ended])]
    for m in ended:
        if m["log_tail"]:
            name = m["shown"].name_of(m["framework"], m["array_index"], m["cell_id"], m["trial"], m["system"])
            lines.append(f"--- {name}: end of {m['log']}:")
            lines.append("\n".join(f"  | {line}" for line in m["log_tail"].splitlines()))
    lines.append(f"submit only those again with: {campaign_commands('resubmit', ended)}")
    return lines


def unsettled_lines(missing: list[dict]) -> list[str]:
    """The cells without a result that may still get one, a sentence for each kind, with what to do instead of
    resubmitting them: those still queued or running, counted by state, with the `watch` command of their
    campaigns; those whose state is unknown (orchestrator.run.status.unknown_sentence), with `status`. None when
    every cell has ended."""

    lines = []
    active = [m for m in missing if m["state"] in ACTIVE]
    if active:
        counts = ", ".join(f"{n} {state}" for state in ACTIVE if (n := sum(m["state"] == state for m in active)))
        lines.append(f"\n{len(active)} cells are still queued or running ({counts}), so their results are not "
                     f"merged yet: follow them with `{campaign_commands('watch', active)}`, then run collect again")
    unknown = [m for m in missing if m["state"] == UNKNOWN]
    if unknown:
        lines.append(f"\n{unknown_sentence(len(unknown), unknown[0]['reason'])}; run collect again once "
                     f"`{campaign_commands('status', unknown)}` can say where they stand")
    return lines


def campaign_commands(name: str, missing: list[dict]) -> str:
    """The command `name` (resubmit, watch, status) for each campaign of these cells, with its results folder:
    commands that run as printed (issue 32), not a CAMPAIGN to fill in."""
    campaigns = dict.fromkeys((m["campaign"], m.get("results_dir")) for m in missing)
    return "; ".join(command(name, campaign, results_dir=Path(folder) if folder else None)
                     for campaign, folder in campaigns)


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
    again = f"`{campaign_commands('resubmit', known)}`" if known else f"`{command('resubmit')}`"
    lines.append(f"{len(skipped)} result files are unreadable: run {again} to run their cells again")
    return lines
