"""One campaign's rows: the campaign named by its id or folder, and its rows written apart from the merged dataset
(`collect --campaign`, `report --campaign`)."""

from __future__ import annotations

from pathlib import Path

from orchestrator.errors import OrchestratorError
from orchestrator.results.store import read_merged_rows
from orchestrator.suggest import command


def campaign_id(results_dir: Path, campaign: str) -> str:
    """The id of the campaign named by its id or its folder (refused in one sentence when there is none)."""
    from orchestrator.plan.campaign_folders import campaign_folder

    return campaign_folder(results_dir, campaign).name


def campaign_id_in(folders: list[Path], campaign: str) -> str:
    """campaign_id in the first of the results folders that holds the campaign; refused, naming the first
    folder's newest campaigns, when none does."""
    from orchestrator.plan.manifest import MANIFEST

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

    from bench_contract.atomic import publish

    table = read_merged_rows(merged, filters=ds.field("campaign") == campaign)
    if table.num_rows == 0:
        raise OrchestratorError(f"campaign {campaign} has no result rows in {merged} yet; "
                                f"`{command('status', '--campaign', campaign, results_dir=results_dir)}` shows where "
                                "its cells stand")
    return publish(campaign_rows_path(results_dir, campaign), lambda tmp: pq.write_table(table, tmp))
