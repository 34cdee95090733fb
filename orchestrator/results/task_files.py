"""The task files: where collect finds them, and the one definition of a readable result.

A task file is a Parquet file in a `rows` folder of a results folder's own folders (hidden, temporary files and
the merged output are not task files; nor are those of a results folder nested in it, orchestrator.results.folders).
It counts only when it reads whole and has rows (read_task_file) and its context values widen with the other
files' (widened); cell_key says which run of which cell it holds.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from pathlib import Path

from bench_contract.results import UnreadableTaskFile, widen
from bench_contract.results import read_task_file as read_either_layout
from orchestrator.results.folders import own_folders


def task_files(results_dir: Path, output: Path) -> dict[str, tuple[int, int]]:
    """Per-task result files, relative path -> (size, mtime in ns): every *.parquet in a `rows` folder of
    results_dir's own folders (its campaign folders and folders of task files without a manifest; not the results
    folders nested in it, orchestrator.results.folders), except hidden (temporary) files and anything inside the
    merged output."""
    found: dict[str, tuple[int, int]] = {}
    skip = os.path.realpath(output)

    def walk(folder: str, rel: str, in_rows: bool) -> None:
        try:
            entries = list(os.scandir(folder))
        except OSError:
            return
        for entry in entries:
            if entry.name.startswith("."):
                continue
            path = os.path.join(rel, entry.name) if rel else entry.name
            if entry.is_dir(follow_symlinks=False):
                if os.path.realpath(entry.path) != skip:
                    walk(entry.path, path, in_rows or entry.name == "rows")
            elif in_rows and entry.name.endswith(".parquet") and entry.is_file():
                stat = entry.stat()
                found[path] = (stat.st_size, stat.st_mtime_ns)

    for folder in own_folders(results_dir)[0]:
        if os.path.realpath(folder) != skip:
            walk(str(folder), folder.name, folder.name == "rows")
    return dict(sorted(found.items()))


def all_task_files(results_dir: Path, others: Sequence[Path], output: Path) -> dict[str, tuple[int, int]]:
    """task_files of results_dir and of each other folder, the others' paths relative to results_dir
    (`../B/campaign/rows/...`): one index names every file, and results_dir / path opens it."""
    found = task_files(results_dir, output)
    home = os.path.realpath(results_dir)
    for folder in others:
        prefix = os.path.relpath(os.path.realpath(folder), home)  # resolved: the kernel resolves `..` that way
        found.update({os.path.join(prefix, rel): stat for rel, stat in task_files(folder, output).items()})
    return dict(sorted(found.items()))


def task_path(results_dir: Path, rel: str) -> Path:
    """A task file named by its path relative to results_dir, as a reader would write it (B/..., not A/../B/...)."""
    if rel.startswith(os.pardir):
        return Path(os.path.normpath(os.path.join(os.path.realpath(results_dir), rel)))
    return results_dir / rel


def read_task_file(path: Path):
    """(bench_contract.results.TaskFile, None), or (None, why it cannot be merged): a result counts only when
    it reads whole and has rows (bench_contract.results.read_task_file names what is wrong otherwise)."""
    try:
        return read_either_layout(path), None
    except UnreadableTaskFile as exc:
        return None, str(exc)


def widened(batch: list[str], results: list, skipped: list[tuple[str, str]],
            good: list[tuple[str, int, tuple[str, str]]]) -> Iterator:
    """The batch's readable files (`results`: read_task_file's answer for each file of `batch`, in order) as one
    wide table (bench_contract.results.widen); a file whose context values have the wrong type is found by
    widening them one at a time, and skipped. Appends (relative path, why) of each file left out to `skipped`,
    and (relative path, rows, cell_key) of each file widened to `good`."""
    readable = []
    for rel, (task, reason) in zip(batch, results):
        if task is None:
            skipped.append((rel, reason))
        else:
            readable.append((rel, task))
    try:
        table = widen([task for _, task in readable])
    except UnreadableTaskFile:
        table = None
    for rel, task in readable:
        if table is None:
            try:
                yield widen([task])
            except UnreadableTaskFile as exc:
                skipped.append((rel, str(exc)))
                continue
        good.append((rel, task.num_rows, cell_key(task)))
    if table is not None and table.num_rows:
        yield table


def cell_key(task) -> tuple[str, str]:
    """(campaign/cell_id/trial, started_at) of a task file (bench_contract.results.TaskFile): which run of which
    cell it holds, and when that run started."""
    key = "/".join(str(task.value(name)) for name in ("campaign", "cell_id", "trial"))
    return key, task.value("started_at") or ""
