"""The campaigns of a results folder: the `campaigns` table; one campaign named, and its rows written apart.

Every plan writes a campaign folder, a dry run too; the table says which were submitted and which were dry runs,
and marks the one that `status`, `watch` and `resubmit` take when none is named (the newest that is not a dry
run, orchestrator.plan.campaign_folders.newest_campaign). A results folder nested in it is named, not listed: its
campaigns are its own, as for collect (orchestrator.results.folders).

One campaign's rows, named by its id or folder, are written apart from the merged dataset, beside it, for
`collect --campaign` and `report --campaign` (write_campaign_rows; report.report_campaign).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from bench_contract.atomic import publish
from orchestrator.errors import OrchestratorError, UsageError
from orchestrator.plan import campaign_folders
from orchestrator.plan.campaign_folders import CampaignEntry
from orchestrator.plan.manifest import MANIFEST
from orchestrator.results.folders import NONE_NEARBY, elsewhere, nested_note, nested_results_folders
from orchestrator.results.store import read_merged_rows
from orchestrator.run.status import campaign_status, summary
from orchestrator.suggest import command
from orchestrator.tables import format_table

HEADERS = ["", "campaign", "benchmark", "use case", "cells", "submitted", "state", "created (UTC)"]


def campaign_state(entry: CampaignEntry) -> str:
    """Where the campaign's cells stand, as counts of each state ("4 completed", "3 completed, 1 failed"); one
    sacct and squeue call for a campaign submitted to Slurm, none for a dry run or a local one."""
    if entry.dry_run:
        return "nothing ran"
    counts = summary(campaign_status(entry.folder))
    return ", ".join(f"{n} {state}" for state, n in sorted(counts.items(), key=lambda item: -item[1]))


def campaign_rows(results_dir: Path, include_dry_runs: bool) -> list[list[str]]:
    """One row per campaign, oldest first; "*" marks the campaign that status takes by default."""
    entries = campaign_folders.campaign_entries(results_dir)
    submitted = [entry for entry in entries if not entry.dry_run]
    default = submitted[-1].folder if submitted else None
    return [
        ["*" if entry.folder == default else "", entry.name, entry.benchmark, entry.use_case, str(entry.cells),
         entry.kind, campaign_state(entry), entry.created_at.replace("T", " ").removesuffix("+00:00")]
        for entry in entries if include_dry_runs or not entry.dry_run
    ]


def list_campaigns(results_dir: Path, include_dry_runs: bool, report: Callable[[str], None] = print) -> None:
    """The campaigns command: one line per campaign, then what the mark and the hidden dry runs mean."""
    if not results_dir.is_dir():
        nearby = elsewhere(results_dir, "campaigns") or NONE_NEARBY
        raise UsageError(f"results folder {results_dir} does not exist{nearby}")
    rows = campaign_rows(results_dir, include_dry_runs)
    dry_runs = sum(entry.dry_run for entry in campaign_folders.campaign_entries(results_dir))
    if rows:
        report(format_table(HEADERS, rows))
    if any(row[0] for row in rows):
        report("* the campaign that status, watch and resubmit take when none is named (the newest submitted)")
    if dry_runs and not include_dry_runs:
        report(f"{dry_runs} dry run{'s are' if dry_runs > 1 else ' is'} left out; --dry-runs lists "
               f"{'them' if dry_runs > 1 else 'it'} too")
    damaged = [entry for entry in campaign_folders.campaign_scan(results_dir) if not isinstance(entry, CampaignEntry)]
    if not rows and not dry_runs and not damaged:
        report(f"no campaign in {results_dir}")
    for folder in nested_results_folders(results_dir):  # their campaigns are not this folder's, as for collect
        report(nested_note(folder, "campaigns"))
    if damaged:  # not listed, since nothing of it can be read: said last, in one sentence, and exit 1
        raise damaged[-1]


def campaign_id(results_dir: Path, campaign: str) -> str:
    """The id of the campaign named by its id or its folder (refused in one sentence when there is none)."""
    return campaign_folders.campaign_folder(results_dir, campaign).name


def campaign_id_in(folders: list[Path], campaign: str) -> str:
    """campaign_id in the first of the results folders that holds the campaign; refused, naming the first
    folder's newest campaigns, when none does."""
    holder = next((folder for folder in folders if (folder / campaign / MANIFEST).is_file()), folders[0])
    return campaign_id(holder, campaign)


def campaign_rows_path(results_dir: Path, campaign: str) -> Path:
    """Where one campaign's rows go: one Parquet file beside merged.parquet, written afresh from it by `collect
    --campaign` and by `report --campaign`."""
    return results_dir / f"merged-{campaign}.parquet"


def write_campaign_rows(merged: Path, results_dir: Path, campaign: str) -> Path:
    """Write the rows of one campaign, read from the merged dataset `merged`, to campaign_rows_path, whole or not
    at all; a campaign without rows there is refused in one sentence."""
    import pyarrow.dataset as ds
    import pyarrow.parquet as pq

    table = read_merged_rows(merged, filters=ds.field("campaign") == campaign)
    if table.num_rows == 0:
        raise OrchestratorError(f"campaign {campaign} has no result rows in {merged} yet; "
                                f"`{command('status', '--campaign', campaign, results_dir=results_dir)}` shows where "
                                "its cells stand")
    return publish(campaign_rows_path(results_dir, campaign), lambda tmp: pq.write_table(table, tmp))
