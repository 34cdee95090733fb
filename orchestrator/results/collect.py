"""`main.py collect`: merge every task's Parquet file under results/ into one dataset, and compare JAX with PyTorch.

The flow (collect_and_report), in named steps: find the task files and read the new ones (merge; task_files),
publish the next generation of the merged dataset with the calibration both frameworks share (store;
shared_calibration), list the cells without a result (missing), and show the comparison (summary_lines).

Each task wrote its own file atomically; collect only reads them. A result counts only when it reads whole
(bench_contract.results.result_problem, the definition status and resubmit use too): a file that is empty,
truncated, damaged, without rows, of another schema or with a column of the wrong type is left out and reported by
path and reason, its cell listed among the cells without a result, and the output ends by counting such files and
pointing to resubmit. The rest are merged.

Collecting is incremental, because campaigns grow to thousands of task files and re-reading all of them
on every run grows with the square of the campaign. The merged dataset is a folder of Parquet parts with an
index of every merged task file (store). A second collect reads only new files and writes them as one new
part. A task file that changed is re-read and its old rows dropped; a deleted file's rows are dropped; both
are reported. Files are read and written in bounded batches, so memory follows the size of the merged result,
not the number of task files. Readers never see a half-collected dataset, and two collects never write at once
(store: generations, published with one rename, under a lock).

Each cell of a campaign is merged once. Two result files of the same campaign and cell (a copied folder, a
file left from an older layout) are not both merged: the newest run (its `started_at`, then the file's
mtime) is kept, the other is left out and reported, and it comes back if the kept one disappears.
Failure rows (bench_contract.run.failure) live outside `rows` folders and are never merged as measurements.

Results from several clusters: `collect --results-dir A --results-dir B` merges the task files of every folder
into one dataset, A's (A/merged.parquet unless --output; the cells without a result go to A/failures.parquet).
The files of B are indexed by their path relative to A (`../B/...`), so each stays incremental. A campaign
copied into both folders is merged once: its copies have the same campaign, cell and trial, so the rule above
keeps one run per cell, and a copy (the same start time) is counted and reported in one line. Its cells
without a result are listed once, from the first folder that holds it.

A folder's campaigns are the ones `campaigns` lists, directly under it (orchestrator.results.folders): a results
folder nested in it (the demo's, once) is left out and named in one line with the commands that read it, alone
or with A (`--results-dir A --results-dir A/nested`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.errors import OrchestratorError, UsageError, is_disk_full, oserror_reason
from orchestrator.results import store
from orchestrator.results.batch_search import batch_search_table
from orchestrator.results.campaigns import campaign_id_in, write_campaign_rows
from orchestrator.results.compare import device_mismatch_lines
from orchestrator.results.folders import (
    elsewhere,
    nested_note,
    nested_results_folders,
    no_submitted_campaign,
    submitted_campaigns,
)
from orchestrator.results.language_models import language_model_lines, with_language_columns
from orchestrator.results.neighbours import with_neighbours
from orchestrator.results.missing import (
    FAILURES,
    missing_cells,
    missing_lines,
    unreadable_lines,
    unsettled_lines,
    write_failures,
)
from orchestrator.results.progress_bar import Progress, progress_for
from orchestrator.results.shared_calibration import with_own_names, write_shared_part
from orchestrator.results.task_files import all_task_files, read_task_file, task_path, widened
from orchestrator.results.tuning import effort_lines
from orchestrator.results.verdict import verdict_lines, verdicts
from orchestrator.results.views import curve_frame, summary_frame, use_case_frame, use_case_lines
from orchestrator.run.executors.base import LOG_LINES
from orchestrator.run.file_lock import exclusive
from orchestrator.run.tuning import records_of
from orchestrator.run.status import EXIT_UNSETTLED
from orchestrator.suggest import shown

READ_BATCH = 512  # task files read at once: bounds the memory held by tables not yet written
READ_THREADS = min(8, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)
LOCK_WAIT_S = 600.0  # a collect waits this long for another collect into the same dataset, then refuses


@dataclass
class Collected:
    files: int  # task files whose rows are in the merged dataset
    rows: int
    output: Path
    skipped: list[tuple[Path, str]] = field(default_factory=list)
    read: int = 0  # task files read this time (new or changed)
    changed: list[Path] = field(default_factory=list)  # re-read: their size or mtime changed since the last collect
    removed: list[Path] = field(default_factory=list)  # gone since the last collect: their rows were dropped
    from_scratch: bool = True
    superseded: list[tuple[Path, Path]] = field(default_factory=list)  # (left out, kept): the same cell twice
    copies: list[tuple[Path, Path]] = field(default_factory=list)  # (left out, kept): the same run, copied
    generation: Path | None = None  # the folder that holds this collect's complete dataset (output links to it)


def collect_and_report(results_dir: Path, output: Path | None = None, failures: Path | None = None,
                       log_lines: int = LOG_LINES, report: Callable[[str], None] = print,
                       warn: Callable[[str], None] = print, campaign: str | None = None,
                       others: Sequence[Path] = (), progress: bool | None = None) -> int:
    """The collect command: merge every task file of results_dir and the `others` folders into `output` (default
    <results_dir>/merged.parquet), warn of the files left out or replaced, list the cells without a result (and
    write them to `failures`, default <results_dir>/failures.parquet), then report JAX against PyTorch. With
    `campaign`, everything is merged as always, and what is shown is that campaign's: its cells without a result
    and its comparison, read from its rows alone (campaign_rows_path). `progress` shows the bar on stderr while
    reading files (True), never (False), or on a terminal when there are thousands (None: progress_for).

    Returns the exit code: EXIT_UNSETTLED (3) when a cell shown may still get a result (queued, running, or its
    state unknown), said last, since what was merged is then partial; else 0, cells that ended without a result
    included (resubmit is the command for them)."""

    check_results_dirs([results_dir, *others])
    # Named wrongly: refused before anything is written.
    campaign = campaign and campaign_id_in([results_dir, *others], campaign)
    output = output or results_dir / store.MERGED
    with written_or_said(f"collect could not update {output}", f"{output} is as the last collect left it"):
        collected = merge(results_dir, output, others, lambda total: progress_for(total, progress))
    notes = [*nested_notes([results_dir, *others]), *nothing_here(collected, results_dir, others)]
    for line in [*merge_notes(collected), *notes]:
        warn(line)
    how = "from scratch" if collected.from_scratch else f"{collected.read} new or changed"
    report(f"merged {collected.rows} rows from {collected.files} task files ({how}) into {collected.output}")
    damaged: list[Exception] = []  # campaigns whose manifest cannot be read: merged all the same, said last
    missing = missing_cells(results_dir, log_lines, dict(collected.skipped), others, damaged)
    failures_path = failures or results_dir / FAILURES
    with written_or_said(f"collect merged into {output}, but could not write {failures_path}",
                         f"{failures_path} is as the last collect left it"):
        write_failures(failures_path, missing)
    shown = [m for m in missing if campaign in (None, m["campaign"])]
    for line in missing_lines(shown, failures_path):
        report(line)
    merged = collected.generation or output  # the generation just merged
    if campaign:
        with written_or_said(f"collect merged into {output}, but could not write the rows of campaign {campaign}",
                             "its earlier rows file, if any, is unchanged"):
            merged = write_campaign_rows(merged, results_dir, campaign)
        report(f"campaign {campaign}: its rows are in {merged}")
    summary = with_neighbours(summary_frame(merged), [results_dir, *others])  # who ran beside whom, in packs
    records = records_of(results_dir, summary["campaign"].dropna().astype(str).unique()) if len(summary) else []
    for line in summary_lines(summary, curve_frame(merged), records):
        report(line)
    for line in device_mismatch_lines(merged, [results_dir, *others]):
        warn(line)
    for line in unreadable_lines(collected.skipped, missing):  # last, where it cannot be missed
        report(line)
    waiting = unsettled_lines(shown)  # what makes the merged results partial, and to wait rather than resubmit
    for line in waiting:
        report(line)
    if damaged:  # its cells without a result could not be listed: one sentence, exit 1
        raise damaged[0]
    return EXIT_UNSETTLED if waiting else 0


def summary_lines(summary, curves=None, records=()) -> list[str]:
    """What collect prints after merging, from the summary rows: the verdicts (verdict), every use case's table per
    device model and the table across device models (views), the language models' tables in tokens/s
    (language_models), then the largest batches, where a campaign searched for them (batch_search). The training
    table's time to accuracy reads the per-epoch `curves`."""
    import pandas as pd

    frame = use_case_frame(summary if curves is None else pd.concat([summary, curves], ignore_index=True))
    frame = with_language_columns(frame, summary)
    lines = verdict_lines(verdicts(frame, summary)) + use_case_lines(frame) + language_model_lines(frame)
    lines += effort_lines(frame, list(records))  # a tuned campaign's speed-ups side by side, and its ladders
    searched = batch_search_table(summary)
    if searched:
        lines.append(f"\nLargest batch that fits (each try a fresh process):\n{searched}")
    return lines


@contextmanager
def written_or_said(what: str, kept: str) -> Iterator[None]:
    """An OSError while writing (a full disk, mostly) leaves as one sentence: what failed, why, what stands."""
    try:
        yield
    except OSError as exc:
        then = "free some space" if is_disk_full(exc) else "correct that"
        raise OrchestratorError(f"{what}: {oserror_reason(exc)}; {kept}: {then} and run collect again") from None


def check_results_dirs(folders: list[Path]) -> None:
    """Refuse, in one sentence, a results folder that does not exist or one given twice."""
    for folder in folders:
        if not folder.is_dir():
            raise UsageError(f"results folder {folder} does not exist; nothing to collect"
                             f"{elsewhere(folder, 'collect', tuple(folders))}")
    seen: set[str] = set()
    for folder in folders:
        if os.path.realpath(folder) in seen:
            raise UsageError(f"results folder {folder} is given twice; give each --results-dir once")
        seen.add(os.path.realpath(folder))


def merge(results_dir: Path, output: Path, others: Sequence[Path] = (),
          progress: Callable[[int], Progress] | None = None) -> Collected:
    """Bring the merged dataset `output` up to date with the task files under results_dir and the `others`
    folders: one collect at a time (the others wait for the lock beside the dataset), and readers see the old
    or the new dataset whole. `progress(files to read)` gives the bar to advance while reading (none: no bar)."""
    with exclusive(store.lock_path(output), f"collect into {output}", LOCK_WAIT_S):
        return merge_generation(results_dir, output, others, progress)


def merge_generation(results_dir: Path, output: Path, others: Sequence[Path] = (),
                     progress: Callable[[int], Progress] | None = None) -> Collected:
    """The merge itself, with the lock held: the next generation is built apart, then published in one rename."""
    store.refuse_plain_folder(output)
    current = store.current_generation(output)
    on_disk = all_task_files(results_dir, others, output)
    index = store.load_index(current) if current is not None else None
    from_scratch = index is None
    if from_scratch:
        index = store.new_index()
    files: dict[str, dict] = index["files"]  # rel path -> {"size", "mtime_ns", "part", "offset", "rows", "key", "started_at"}
    removed, changed, to_read = changes(index, on_disk)
    if not from_scratch and not to_read and not removed and not changed:  # up to date: nothing is read or written
        return Collected(files=len(files), rows=sum(info["rows"] for info in files.values()), output=output,
                         from_scratch=False, generation=current)
    gen = store.new_generation(output, current if not from_scratch else None, index["parts"])
    try:
        # Drop the rows of removed and changed files from the parts that hold them; only those parts are rewritten.
        store.drop_rows(gen, files, set(removed) | set(changed))
        skipped = read_new_files(results_dir, gen, to_read, on_disk, files, progress and progress(len(to_read)))
        losers = keep_newest_runs(gen, files, on_disk, index["superseded"], to_read)
        parts = store.compact(gen, files)
        shared = write_shared_part(gen, parts)
        store.save_merged(gen, index, [*parts, shared] if shared else parts)
        store.publish_generation(output, gen)
    except BaseException:  # a full disk, mostly: the published generation stays, the unpublished one goes
        store.discard_generation(output, gen)
        raise
    store.remove_old_generations(output, keep={gen.name})

    def paths(pairs):
        return [(task_path(results_dir, loser), task_path(results_dir, winner)) for loser, winner, _ in pairs]

    return Collected(
        files=len(files), rows=sum(info["rows"] for info in files.values()), output=output, skipped=skipped,
        read=len(to_read), changed=[task_path(results_dir, rel) for rel in changed],
        removed=[task_path(results_dir, rel) for rel in removed], from_scratch=from_scratch,
        superseded=paths(p for p in losers if not p[2]), copies=paths(p for p in losers if p[2]), generation=gen,
    )


def changes(index: dict, on_disk: dict[str, tuple[int, int]]) -> tuple[list[str], list[str], list[str]]:
    """(removed, changed, to read) relative paths of task files since the index was written. A file left out as
    superseded is read again like a new one when it changed or went, or when its newer run went."""
    files: dict[str, dict] = index["files"]
    superseded: dict[str, dict] = index["superseded"]  # rel path -> {"size", "mtime_ns", "by"}: left out
    for rel in [rel for rel, info in superseded.items()
                if rel not in on_disk or (info["size"], info["mtime_ns"]) != on_disk[rel]
                or info["by"] not in on_disk]:
        del superseded[rel]
    removed = [rel for rel in files if rel not in on_disk]
    changed = [rel for rel, (size, mtime) in on_disk.items()
               if rel in files and (files[rel]["size"], files[rel]["mtime_ns"]) != (size, mtime)]
    to_read = [rel for rel in on_disk if rel not in files and rel not in superseded] + changed
    return removed, changed, to_read


def read_new_files(results_dir: Path, output: Path, to_read: list[str], on_disk: dict[str, tuple[int, int]],
                   files: dict[str, dict], progress: Progress | None = None) -> list[tuple[Path, str]]:
    """Read the new and changed files, a batch at a time, write them as one new part and index them there.
    Returns the files that could not be merged, with the reason."""
    skipped: list[tuple[str, str]] = []
    good: list[tuple[str, int, tuple[str, str]]] = []
    progress = progress or Progress(len(to_read), enabled=False)

    def read(rel: str):
        return read_task_file(results_dir / rel)

    def tables() -> Iterator:
        # Decoding a task file is mostly pyarrow's C++, which releases the GIL: with a thread per core, 10,000
        # files read in 13.5 s against 17.2 s with one (2 cores at a load average of 7, for 8% more CPU time).
        with ThreadPoolExecutor(READ_THREADS) as pool:
            for start in range(0, len(to_read), READ_BATCH):
                batch = to_read[start:start + READ_BATCH]
                yield from map(with_own_names, widened(batch, list(pool.map(read, batch)), skipped, good))
                progress.advance(len(batch))

    new_part = store.write_part(output, tables()) if to_read else None
    progress.done()
    if new_part is not None:
        offset = 0
        for rel, rows, (key, started_at) in good:
            size, mtime = on_disk[rel]
            files[rel] = {"size": size, "mtime_ns": mtime, "part": new_part, "offset": offset, "rows": rows,
                          "key": key, "started_at": started_at}
            offset += rows
    return [(task_path(results_dir, rel), reason) for rel, reason in skipped]


def keep_newest_runs(output: Path, files: dict[str, dict], on_disk: dict[str, tuple[int, int]],
                     superseded: dict[str, dict], read: list[str]) -> list[tuple[str, str, bool]]:
    """One run per cell of a campaign: the newest stays, the others' rows leave the merged dataset and are
    recorded as superseded. Returns (left out, kept, a copy of the same run: the same start time) triples.
    Only the cells of the files `read` now can hold two runs (the merged dataset held one per cell), so only
    their runs are ordered: sorting all 10,000 files' runs took a sixth of a collect after 100 new ones."""
    cells = {files[rel]["key"] for rel in read if rel in files}
    runs = [rel for rel, info in files.items() if info["key"] in cells]
    kept: dict[str, str] = {}
    losers: list[tuple[str, str, bool]] = []
    for rel in sorted(runs, key=lambda r: (files[r]["started_at"], files[r]["mtime_ns"], r)):
        key = files[rel]["key"]
        if key in kept:
            loser = kept[key]
            same_start = bool(files[rel]["started_at"]) and files[loser]["started_at"] == files[rel]["started_at"]
            losers.append((loser, rel, same_start))
        kept[key] = rel
    store.drop_rows(output, files, {loser for loser, _, _ in losers})
    for loser, winner, _ in losers:
        size, mtime = on_disk[loser]
        superseded[loser] = {"size": size, "mtime_ns": mtime, "by": winner}
    return losers


def nothing_here(collected: Collected, results_dir: Path, others: Sequence[Path]) -> list[str]:
    """One line when nothing was merged and no folder collected holds a submitted campaign: the folders nearby
    that hold some, each with the collect command for it (issue 32: no loops). Task files without a manifest
    count as results all the same, so a collect that merged some says nothing."""
    if collected.files or any(submitted_campaigns(folder) for folder in (results_dir, *others)):
        return []
    return [f"{no_submitted_campaign(results_dir)}{elsewhere(results_dir, 'collect', tuple(others))}"]


def nested_notes(folders: list[Path]) -> list[str]:
    """One line for each results folder nested in a folder collected and not itself given: it was left out
    (orchestrator.results.folders), and the line says how to collect it alone or with these folders."""
    given = " ".join(f"--results-dir {shown(folder)}" for folder in folders)
    return [nested_note(nested, "collect", f" (or, to merge it with these: python main.py collect {given} "
                                           f"--results-dir {shown(nested)})")
            for folder in folders for nested in nested_results_folders(folder, tuple(folders))]


def merge_notes(collected: Collected) -> list[str]:
    """What a merge left out or replaced, one line each."""
    return [
        *(f"skipped {path}: {reason}" for path, reason in collected.skipped),
        *(f"re-read {path}: it changed since the last collect; its old rows were replaced"
          for path in collected.changed),
        *(f"dropped the rows of {path}: the file is gone" for path in collected.removed),
        *(f"left out {older}: the same cell of the same campaign ran again later, in {newer}; the newer run is kept"
          for older, newer in collected.superseded),
        *copies_note(collected.copies),
    ]


def copies_note(copies: list[tuple[Path, Path]]) -> list[str]:
    """One line for the copies of runs merged from elsewhere (a campaign copied into two results folders): they
    are expected, and one line per file would bury the other notes."""
    if not copies:
        return []
    older, newer = copies[0]
    return [(f"left out {len(copies)} copies of runs merged from another file (the same campaign, cell, trial and "
             f"start time), e.g. {older}, a copy of {newer}")]
