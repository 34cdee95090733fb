"""Which cells ran beside which in a pack (--pack with --pack-slots): the pack's driver records each run's slot,
start and end in its campaign's packs/ folder (bench_contract.run.driver.RunLog, one file per job); here each run's
neighbours are the pairs of the other runs of its job whose time overlapped its own, as a column of the rows
(`neighbours`: the pair keys, comma-separated; "" for a packed run that ran alone; missing for a run outside a pack),
and the verdict flags a pair whose two sides had different neighbours (verdict.reasons).

The column is made when the rows are read for a comparison, not stored in the task files: a run's neighbours are
known only once its job's other runs have ended, after the run wrote its file."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from orchestrator.plan.render import PACK_LOGS
from orchestrator.results.compare import ROW_KEY, summary_rows, with_row_key, with_variant_label


@dataclass(frozen=True)
class Neighbours:
    """Of one comparison row's paired trials in packs: those whose two sides ran beside different cells, of all."""

    differ: int
    trials: int


def pack_records(folders: Sequence[Path]) -> dict[str, list[dict]]:
    """The pack logs' records by campaign (the folder that holds packs/), every job of it; a line that cannot be read
    (a job killed while writing it) is left out."""
    found: dict[str, list[dict]] = {}
    for folder in folders:
        for path in sorted(Path(folder).glob(f"*/{PACK_LOGS}/*.jsonl")):
            for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
                try:
                    record = json.loads(line)
                except json.JSONDecodeError:
                    continue
                found.setdefault(path.parent.parent.name, []).append(record)
    return found


def neighbours_of(records: list[dict]) -> dict[tuple[str, str, int], str]:
    """(framework, cell id, trial) -> the pair keys of the other runs of the same job that overlapped it in time,
    sorted and comma-separated, for each run that ended well (exit 0: the one whose row there is). Runs that failed
    or were stopped still count as neighbours: they ran beside it."""
    out = {}
    for run in records:
        if run.get("exit") != 0:
            continue
        beside = {other["pair_key"] for other in records
                  if other is not run and other.get("job") == run.get("job")
                  and other["start"] < run["end"] and run["start"] < other["end"]}
        out[run["framework"], run["cell_id"], int(run["trial"])] = ",".join(sorted(beside))
    return out


def with_neighbours(df, folders: Sequence[Path]):
    """The rows with their `neighbours` column where any campaign of `folders` ran in packs; else as they are."""
    by_campaign = {campaign: neighbours_of(records) for campaign, records in pack_records(folders).items()}
    if not by_campaign or df.empty:
        return df
    keys = zip(df["campaign"].astype(str), df["framework"], df["cell_id"], df["trial"])
    return df.assign(neighbours=[by_campaign.get(campaign, {}).get((fw, cell, int(trial)))
                                 for campaign, fw, cell, trial in keys])


def neighbour_mismatches(df) -> dict[tuple, Neighbours]:
    """Per comparison row (ROW_KEY) that ran in packs: its paired trials whose JAX and PyTorch runs had different
    neighbours, of those with both sides' neighbours known."""
    if "neighbours" not in df or df["neighbours"].isna().all():
        return {}
    rows = summary_rows(with_row_key(with_variant_label(df)))
    rows = rows[(rows["metric"] == "throughput") & rows["neighbours"].notna()]
    found = {}
    for key, block in rows.groupby(ROW_KEY, dropna=False):
        # Within one comparison row, a campaign's trial t has one JAX and one PyTorch run: the pair.
        sides = block.groupby(["campaign", "trial"])
        compared = [set(trial["neighbours"]) for _, trial in sides if trial["framework"].nunique() == 2]
        if compared:
            found[key] = Neighbours(sum(len(seen) > 1 for seen in compared), len(compared))
    return found
