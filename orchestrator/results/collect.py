"""Merge every task's Parquet file under results/ into one dataset, and compare JAX with PyTorch.

Each task wrote its own file atomically; collect only reads them. A result counts only when it reads whole
(bench_contract.results.unreadable_reason): a file that is empty, truncated, without rows or of another
schema is left out and reported by path and reason, its cell listed among the cells without a result, and
the output ends by counting such files and pointing to resubmit. The rest are merged.

Collecting is incremental, because campaigns grow to thousands of task files and re-reading all of them
on every run grows with the square of the campaign. The merged dataset is a folder of Parquet parts
(`merged.parquet/part-*.parquet`; pandas and pyarrow read the folder as one table) with an index
(`_index.json`) of every merged task file: its size and mtime, and which rows of which part hold its rows.
A second collect reads only new files and writes them as one new part. A task file that changed is re-read
and its old rows dropped; a deleted file's rows are dropped; both are reported. Only the parts that held
such rows are rewritten, and when parts pile up they are compacted into one. Files are read and written
in bounded batches, so memory follows the size of the merged result, not the number of task files.

Readers never see a half-collected dataset, and two collects never write at once. `merged.parquet` is a
symbolic link to one complete generation, a hidden sibling folder (`.merged.parquet.gen-*`). A collect holds
the lock `.merged.parquet.lock` (orchestrator.lock; a second collect waits for it), builds the next generation
in a fresh folder (hard links to the parts it keeps, new parts for the rest), and switches the link with one
rename. The previous generation stays until the next switch, so a reader that resolved it can finish; a
collect killed mid-way leaves only an unpublished folder, removed by the next collect.

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
"""

from __future__ import annotations

import json
import math
import os
import secrets
import shutil
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.errors import OrchestratorError, UsageError
from orchestrator.results.compare import KEY, ROW_KEY
from orchestrator.results.views import curve_frame, use_case_lines
from orchestrator.run.submit import LOG_LINES, log_tail
from orchestrator.tables import format_table

MERGED = "merged.parquet"  # the merged dataset's default place in the results folder
FAILURES = "failures.parquet"  # ... and the cells without a result
INDEX = "_index.json"  # pyarrow and pandas skip names that start with "_" when they read the folder
INDEX_VERSION = 2  # 2: each file's cell key and start time, and the files superseded by a newer run
READ_BATCH = 512  # task files read at once: bounds the memory held by tables not yet written
READ_THREADS = min(8, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)
ROW_GROUP = 100_000  # rows buffered before they are written out as one row group
MAX_PARTS = 16  # more parts than this are compacted into one (each part costs readers a file open)
LOCK_WAIT_S = 600.0  # a collect waits this long for another collect into the same dataset, then refuses
# The progress bar while reading task files (Progress): shown by default on a terminal when at least this many
# files are read, redrawn at most this often there, and every PROGRESS_LOG_S where forced on into a file or pipe.
PROGRESS_MIN_FILES = 1000
PROGRESS_REDRAW_S = 0.2
PROGRESS_LOG_S = 5.0


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


class Progress:
    """`collect: [#######.......] 5,120/10,000 task files read, 2,310 files/s, about 2s left` on `stream` (stderr).

    Redrawn in place (a carriage return) on a terminal, at most every PROGRESS_REDRAW_S; one line every
    PROGRESS_LOG_S elsewhere (forced on, e.g. into a batch job's log). Collect advances it once per batch of
    files read, so it costs a clock reading per batch. `clock` is for tests."""

    def __init__(self, total: int, stream=None, enabled: bool = True, clock: Callable[[], float] = time.monotonic):
        self.total, self.stream, self.clock = total, stream, clock
        self.enabled = enabled and stream is not None and total > 0
        self.terminal = self.enabled and stream.isatty()
        self.every = PROGRESS_REDRAW_S if self.terminal else PROGRESS_LOG_S
        self.read, self.width = 0, 0
        self.start = self.last = clock()

    def advance(self, files: int) -> None:
        self.read += files
        now = self.clock()
        if self.enabled and now - self.last >= self.every:
            self.last = now
            self.draw(now, end="")

    def done(self) -> None:
        """The last state, always drawn (on a terminal, its line ends here)."""
        if self.enabled:
            self.draw(self.clock(), end="\n")

    def draw(self, now: float, end: str) -> None:
        line = self.line(now)
        self.width = max(self.width, len(line))
        if self.terminal:  # padded: a shorter line leaves nothing of the longer one it overwrites
            self.stream.write("\r" + line.ljust(self.width) + end)
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def line(self, now: float) -> str:
        from bench_contract.run.progress import duration
        from orchestrator.run.progress import text_bar

        elapsed = now - self.start
        rate = self.read / elapsed if elapsed > 0 else 0.0
        left = f", about {duration((self.total - self.read) / rate)} left" if rate and self.read < self.total else ""
        return (f"collect: {text_bar(self.read, self.total)} {self.read:,}/{self.total:,} task files read, "
                f"{rate:,.0f} files/s{left}")


def progress_for(total: int, forced: bool | None, stream=None) -> Progress:
    """The bar for reading `total` files: `forced` True or False says so; None (the default) shows it when
    `stream` (stderr) is a terminal and there are at least PROGRESS_MIN_FILES, so tests and pipes stay quiet."""
    stream = sys.stderr if stream is None else stream
    shown = forced if forced is not None else stream.isatty() and total >= PROGRESS_MIN_FILES
    return Progress(total, stream, enabled=shown)


def task_files(results_dir: Path, output: Path) -> dict[str, tuple[int, int]]:
    """Per-task result files, relative path -> (size, mtime in ns): every *.parquet in a `rows` folder under
    results_dir, except hidden (temporary) files and anything inside the merged output."""
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

    walk(str(results_dir), "", False)
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


def merge(results_dir: Path, output: Path, others: Sequence[Path] = (),
          progress: Callable[[int], Progress] | None = None) -> Collected:
    """Bring the merged dataset `output` up to date with the task files under results_dir and the `others`
    folders: one collect at a time (the others wait for the lock beside the dataset), and readers see the old
    or the new dataset whole. `progress(files to read)` gives the bar to advance while reading (none: no bar)."""
    from orchestrator.lock import exclusive

    with exclusive(lock_path(output), f"collect into {output}", LOCK_WAIT_S):
        return merge_generation(results_dir, output, others, progress)


def merge_generation(results_dir: Path, output: Path, others: Sequence[Path] = (),
                     progress: Callable[[int], Progress] | None = None) -> Collected:
    """The merge itself, with the lock held: the next generation is built apart, then published in one rename."""
    adopt_folder_layout(output)
    current = current_generation(output)
    on_disk = all_task_files(results_dir, others, output)
    index = load_index(current) if current is not None else None
    from_scratch = index is None
    if from_scratch:
        index = new_index()
    files: dict[str, dict] = index["files"]  # rel path -> {"size", "mtime_ns", "part", "offset", "rows", "key", "started_at"}
    removed, changed, to_read = changes(index, on_disk)
    if not from_scratch and not to_read and not removed and not changed:  # up to date: nothing is read or written
        return Collected(files=len(files), rows=sum(info["rows"] for info in files.values()), output=output,
                         from_scratch=False, generation=current)
    gen = new_generation(output, current if not from_scratch else None, index["parts"])
    # Drop the rows of removed and changed files from the parts that hold them; only those parts are rewritten.
    drop_rows(gen, files, set(removed) | set(changed))
    skipped = read_new_files(results_dir, gen, to_read, on_disk, files, progress and progress(len(to_read)))
    losers = keep_newest_runs(gen, files, on_disk, index["superseded"])
    save_merged(gen, index, compact(gen, files))
    publish_generation(output, gen)
    remove_old_generations(output, keep={gen.name, *([current.name] if current is not None else [])})

    def paths(pairs):
        return [(task_path(results_dir, loser), task_path(results_dir, winner)) for loser, winner, _ in pairs]

    return Collected(
        files=len(files), rows=sum(info["rows"] for info in files.values()), output=output, skipped=skipped,
        read=len(to_read), changed=[task_path(results_dir, rel) for rel in changed],
        removed=[task_path(results_dir, rel) for rel in removed], from_scratch=from_scratch,
        superseded=paths(p for p in losers if not p[2]), copies=paths(p for p in losers if p[2]), generation=gen,
    )


def lock_path(output: Path) -> Path:
    return output.parent / f".{output.name}.lock"


def generation_prefix(output: Path) -> str:
    return f".{output.name}.gen-"


def fresh_generation_name(output: Path) -> Path:
    return output.parent / f"{generation_prefix(output)}{secrets.token_hex(6)}"


def current_generation(output: Path) -> Path | None:
    """The generation folder `output` links to, or None when there is none yet (or the link is broken)."""
    if not output.is_symlink():
        return None
    folder = output.parent / os.readlink(output)
    return folder if folder.is_dir() else None


def new_generation(output: Path, current: Path | None, parts: dict[str, int]) -> Path:
    """A fresh, unpublished generation folder beside `output`, holding hard links to the current generation's
    parts (a copy where the file system has no hard links). Parts are never changed in place."""
    gen = fresh_generation_name(output)
    gen.mkdir(parents=True)
    for part in parts if current is not None else {}:
        try:
            os.link(current / part, gen / part)
        except OSError:
            shutil.copy2(current / part, gen / part)
    return gen


def publish_generation(output: Path, gen: Path) -> None:
    """Point `output` at `gen` with one rename of a symbolic link: a reader sees the old or the new one."""
    link = output.parent / f".{output.name}.link-{secrets.token_hex(6)}"
    os.symlink(gen.name, link)  # relative: the results folder can be moved or copied whole
    try:
        os.replace(link, output)  # also replaces a merged.parquet file of the single-file layout
    finally:
        link.unlink(missing_ok=True)


def remove_old_generations(output: Path, keep: set[str]) -> None:
    """Remove the generations other than `keep` (the new one and the one readers may still be reading), with
    what collects left unpublished; only the files collect writes there are removed."""
    for folder in output.parent.glob(f"{generation_prefix(output)}*"):
        if folder.name not in keep and folder.is_dir() and not folder.is_symlink():
            clear_output(folder)
            try:
                folder.rmdir()
            except OSError:
                pass  # something else was put there: left alone
    for link in output.parent.glob(f".{output.name}.link-*"):
        link.unlink(missing_ok=True)


def remove_merged(output: Path) -> None:
    """Remove a merged dataset whole (its link and its generations; not a collect's lock), so that the next
    collect starts from scratch; for tools and benchmarks, since rmtree refuses a symbolic link."""
    if output.is_symlink() or output.is_file():
        output.unlink()
    elif output.is_dir():
        shutil.rmtree(output)
    for path in output.parent.glob(f".{output.name}.*"):
        if path == lock_path(output):
            continue
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)


def adopt_folder_layout(output: Path) -> None:
    """A merged dataset written before generations (a plain folder of parts) becomes the first generation, so
    that its parts are kept; an empty folder goes. A folder that collect did not write is refused."""
    if output.is_symlink() or not output.is_dir():
        return
    if not any(output.iterdir()):
        output.rmdir()
        return
    if not (output / INDEX).exists() and not any(output.glob("part-*.parquet")):
        raise OrchestratorError(f"{output} is a folder that collect did not write; move it away or give "
                                "another --output")
    gen = fresh_generation_name(output)
    os.rename(output, gen)
    publish_generation(output, gen)


def new_index() -> dict:
    from bench_contract.results import SCHEMA

    return {"version": INDEX_VERSION, "columns": SCHEMA.names, "parts": {}, "files": {}, "superseded": {}}


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
    skipped: list[tuple[Path, str]] = []
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
                yield from widened(batch, list(pool.map(read, batch)))
                progress.advance(len(batch))

    def widened(batch: list[str], results) -> Iterator:
        """The batch's readable files as one wide table (bench_contract.results.widen); a file whose context
        values have the wrong type is found by widening them one at a time, and skipped."""
        from bench_contract.results import UnreadableTaskFile, widen

        readable = []
        for rel, (task, reason) in zip(batch, results):
            if task is None:
                skipped.append((task_path(results_dir, rel), reason))
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
                    skipped.append((task_path(results_dir, rel), str(exc)))
                    continue
            good.append((rel, task.num_rows, cell_key(task)))
        if table is not None and table.num_rows:
            yield table

    new_part = write_part(output, tables()) if to_read else None
    progress.done()
    if new_part is not None:
        offset = 0
        for rel, rows, (key, started_at) in good:
            size, mtime = on_disk[rel]
            files[rel] = {"size": size, "mtime_ns": mtime, "part": new_part, "offset": offset, "rows": rows,
                          "key": key, "started_at": started_at}
            offset += rows
    return skipped


def keep_newest_runs(output: Path, files: dict[str, dict], on_disk: dict[str, tuple[int, int]],
                     superseded: dict[str, dict]) -> list[tuple[str, str, bool]]:
    """One run per cell of a campaign: the newest stays, the others' rows leave the merged dataset and are
    recorded as superseded. Returns (left out, kept, a copy of the same run: the same start time) triples."""
    kept: dict[str, str] = {}
    losers: list[tuple[str, str, bool]] = []
    for rel in sorted(files, key=lambda r: (files[r]["started_at"], files[r]["mtime_ns"], r)):
        key = files[rel]["key"]
        if key in kept:
            loser = kept[key]
            same_start = bool(files[rel]["started_at"]) and files[loser]["started_at"] == files[rel]["started_at"]
            losers.append((loser, rel, same_start))
        kept[key] = rel
    drop_rows(output, files, {loser for loser, _, _ in losers})
    for loser, winner, _ in losers:
        size, mtime = on_disk[loser]
        superseded[loser] = {"size": size, "mtime_ns": mtime, "by": winner}
    return losers


def compact(output: Path, files: dict[str, dict]) -> list[str]:
    """The parts that hold the indexed files: compacted into one when there are more than MAX_PARTS, and one
    empty part when nothing is merged (the folder stays readable as a table with the schema)."""
    import pyarrow.parquet as pq

    from bench_contract.results import SCHEMA

    parts = sorted({info["part"] for info in files.values()})
    if len(parts) > MAX_PARTS:
        order = list(files)
        whole = write_part(output, (pq.read_table(output / part, schema=SCHEMA) for part in parts))
        offset = 0
        for part in parts:  # parts were written whole and in this order: offsets shift by the parts before
            for rel in order:
                if files[rel]["part"] == part:
                    files[rel]["offset"] += offset
            offset += pq.ParquetFile(output / part).metadata.num_rows
        for rel in order:
            files[rel]["part"] = whole
        parts = [whole]
    if not parts:
        parts = [write_part(output, iter([SCHEMA.empty_table()]), empty_ok=True)]
    return parts


def save_merged(output: Path, index: dict, parts: list[str]) -> None:
    """Save the index naming these parts in the unpublished generation `output`, and remove the parts it no
    longer names (links to parts that other generations still hold)."""
    from bench_contract.results import SCHEMA

    index["parts"] = {part: (output / part).stat().st_size for part in parts}
    index["columns"] = SCHEMA.names
    save_index(output, index)
    for part in output.glob("part-*.parquet"):
        if part.name not in index["parts"]:
            part.unlink()


def cell_key(task) -> tuple[str, str]:
    """(campaign/cell_id/trial, started_at) of a task file (bench_contract.results.TaskFile): which run of which
    cell it holds, and when that run started."""
    key = "/".join(str(task.value(name)) for name in ("campaign", "cell_id", "trial"))
    return key, task.value("started_at") or ""


def drop_rows(output: Path, files: dict[str, dict], dropped: set[str]) -> None:
    """Take the rows of `dropped` files out of the parts that hold them (rewriting only those parts) and out
    of the index."""
    import pyarrow.parquet as pq

    from bench_contract.results import SCHEMA

    for part in sorted({files[rel]["part"] for rel in dropped if rel in files}):
        keep = [rel for rel, info in files.items() if info["part"] == part and rel not in dropped]
        if keep:
            table = pq.read_table(output / part, schema=SCHEMA)
            new_part = write_part(output, (table.slice(files[rel]["offset"], files[rel]["rows"]) for rel in keep))
            place(files, keep, new_part)
        for rel in dropped:
            if files.get(rel, {}).get("part") == part:
                del files[rel]


def read_task_file(path: Path):
    """(bench_contract.results.TaskFile, None), or (None, why it cannot be merged): a result counts only when
    it reads whole and has rows (bench_contract.results.read_task_file names what is wrong otherwise)."""
    from bench_contract.results import UnreadableTaskFile
    from bench_contract.results import read_task_file as read_either_layout

    try:
        return read_either_layout(path), None
    except UnreadableTaskFile as exc:
        return None, str(exc)


def write_part(output: Path, tables, empty_ok: bool = False) -> str | None:
    """Write the tables, in order, as one new part (atomically); None when there were no rows to write."""
    import pyarrow.parquet as pq

    from bench_contract.results import SCHEMA

    name = f"part-{secrets.token_hex(6)}.parquet"
    tmp = output / f".{name}.tmp"
    rows, buffer, buffered = 0, [], 0
    try:
        with pq.ParquetWriter(tmp, SCHEMA) as writer:
            for table in tables:
                buffer.append(table)
                buffered += table.num_rows
                if buffered >= ROW_GROUP:
                    writer.write_table(row_group(buffer))
                    rows, buffer, buffered = rows + buffered, [], 0
            if buffer or empty_ok:
                writer.write_table(row_group(buffer) if buffer else SCHEMA.empty_table())
                rows += buffered
        if rows == 0 and not empty_ok:
            return None
        os.replace(tmp, output / name)
        return name
    finally:
        tmp.unlink(missing_ok=True)


COMBINE_ABOVE = 64  # tables buffered for one row group: more (a file's slice each) are first made contiguous


def row_group(tables: list):
    """The buffered tables as one. Widened batches (bench_contract.results.widen) are few and contiguous, and
    copying their 49 columns again cost more than it saved; many small tables (the slices of the files a part
    keeps) are combined, since a Parquet writer given thousands of tiny chunks is slower still."""
    import pyarrow as pa

    from bench_contract.results import contiguous

    return contiguous(tables) if len(tables) > COMBINE_ABOVE else pa.concat_tables(tables)


def place(files: dict[str, dict], order: list[str], part: str | None) -> None:
    """Record that `order`'s rows now lie in `part`, one file after another."""
    offset = 0
    for rel in order:
        files[rel]["part"], files[rel]["offset"] = part, offset
        offset += files[rel]["rows"]


def load_index(output: Path) -> dict | None:
    """The index of a merged dataset, or None when it must be rebuilt: absent, from another version, or not
    matching the parts on disk (a collect that was interrupted, or a folder someone changed)."""
    try:
        index = json.loads((output / INDEX).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(index, dict) or index.get("version") != INDEX_VERSION:
        return None
    from bench_contract.results import SCHEMA

    if index.get("columns") != SCHEMA.names:  # parts written with other columns (or before this was kept)
        return None
    for part, size in index.get("parts", {}).items():
        try:
            if (output / part).stat().st_size != size:
                return None
        except OSError:
            return None
    # Parts that the index does not name are left over from an interrupted run; readers would count them.
    for stray in output.glob("part-*.parquet"):
        if stray.name not in index["parts"]:
            stray.unlink()
    return index


def save_index(output: Path, index: dict) -> None:
    tmp = output / f".{INDEX}.tmp-{os.getpid()}"
    tmp.write_text(json.dumps(index, separators=(",", ":")))
    os.replace(tmp, output / INDEX)


def clear_output(output: Path) -> None:
    """Empty a generation folder of what collect itself wrote there (parts, index, temporary files)."""
    for path in [*output.glob("part-*.parquet"), *output.glob(".part-*.tmp"), *output.glob(f".{INDEX}.tmp-*"),
                 output / INDEX]:
        path.unlink(missing_ok=True)


def collect_and_report(results_dir: Path, output: Path | None = None, failures: Path | None = None,
                       log_lines: int = LOG_LINES, report: Callable[[str], None] = print,
                       warn: Callable[[str], None] = print, campaign: str | None = None,
                       others: Sequence[Path] = (), progress: bool | None = None) -> None:
    """The collect command: merge every task file of results_dir and the `others` folders into `output` (default
    <results_dir>/merged.parquet), warn of the files left out or replaced, list the cells without a result (and
    write them to `failures`, default <results_dir>/failures.parquet), then report JAX against PyTorch. With
    `campaign`, everything is merged as always, and what is shown is that campaign's: its cells without a result
    and its comparison, read from its rows alone (campaign_rows_path). `progress` shows the bar on stderr while
    reading files (True), never (False), or on a terminal when there are thousands (None: progress_for)."""
    check_results_dirs([results_dir, *others])
    # Named wrongly: refused before anything is written.
    campaign = campaign and campaign_id_in([results_dir, *others], campaign)
    output = output or results_dir / MERGED
    collected = merge(results_dir, output, others, lambda total: progress_for(total, progress))
    for line in merge_notes(collected):
        warn(line)
    how = "from scratch" if collected.from_scratch else f"{collected.read} new or changed"
    report(f"merged {collected.rows} rows from {collected.files} task files ({how}) into {collected.output}")
    missing = missing_cells(results_dir, log_lines, dict(collected.skipped), others)
    failures_path = write_failures(failures or results_dir / FAILURES, missing)
    for line in missing_lines([m for m in missing if campaign in (None, m["campaign"])], failures_path):
        report(line)
    merged = collected.generation or output  # the generation just merged
    if campaign:
        merged = write_campaign_rows(merged, results_dir, campaign)
        report(f"campaign {campaign}: its rows are in {merged}")
    for line in summary_lines(summary_frame(merged), curve_frame(merged)):
        report(line)
    for line in device_mismatch_lines(merged, [results_dir, *others]):
        warn(line)
    for line in unreadable_lines(collected.skipped, missing):  # last, where it cannot be missed
        report(line)


def expected_devices_of(folders: Sequence[Path]) -> dict[tuple[str, str], str]:
    """(campaign, system) -> the device pattern its profile's system expects, from every campaign's manifest."""
    from orchestrator.plan.campaign import load_manifest
    from orchestrator.plan.profile import expected_devices

    expected = {}
    for folder in folders:
        for manifest_file in sorted(folder.glob("*/manifest.json")):
            manifest = load_manifest(manifest_file.parent)
            for system, pattern in expected_devices(manifest.get("profile", {})).items():
                expected[(manifest_file.parent.name, system)] = pattern
    return expected


def device_mismatch_lines(merged: Path, folders: Sequence[Path]) -> list[str]:
    """A sentence for each system whose rows ran on a device it does not expect (a constraint the site ignored)."""
    import pyarrow.dataset as ds
    import pyarrow.parquet as pq

    from orchestrator.results.compare import mismatch_lines, system_mismatches

    expected = expected_devices_of(folders)
    columns = ["campaign", "cell_id", "trial", "system", "device_model", "slurm_nodelist"]
    if not expected or not set(columns) <= set(ds.dataset(merged, format="parquet").schema.names):
        return []
    rows = pq.read_table(merged, columns=columns, filters=ds.field("system") != "").to_pandas()
    return mismatch_lines(system_mismatches(rows, expected))


def check_results_dirs(folders: list[Path]) -> None:
    """Refuse, in one sentence, a results folder that does not exist or one given twice."""
    for folder in folders:
        if not folder.is_dir():
            raise UsageError(f"results folder {folder} does not exist; nothing to collect")
    seen: set[str] = set()
    for folder in folders:
        if os.path.realpath(folder) in seen:
            raise UsageError(f"results folder {folder} is given twice; give each --results-dir once")
        seen.add(os.path.realpath(folder))


def campaign_id(results_dir: Path, campaign: str) -> str:
    """The id of the campaign named by its id or its folder (refused in one sentence when there is none)."""
    from orchestrator.plan.campaign import campaign_folder

    return campaign_folder(results_dir, campaign).name


def campaign_id_in(folders: list[Path], campaign: str) -> str:
    """campaign_id in the first of the results folders that holds the campaign; refused, naming the first
    folder's newest campaigns, when none does."""
    from orchestrator.plan.campaign import MANIFEST

    holder = next((folder for folder in folders if (folder / campaign / MANIFEST).is_file()), folders[0])
    return campaign_id(holder, campaign)


def campaign_rows_path(results_dir: Path, campaign: str) -> Path:
    """Where one campaign's rows go: one Parquet file beside merged.parquet, written afresh from it by `collect
    --campaign` and by `report --campaign`."""
    return results_dir / f"merged-{campaign}.parquet"


def write_campaign_rows(merged: Path, results_dir: Path, campaign: str) -> Path:
    """Write the rows of one campaign, read from the merged dataset `merged`, to campaign_rows_path, whole or not
    at all; a campaign without rows there is refused in one sentence."""
    import pyarrow.parquet as pq

    from bench_contract.atomic import publish

    table = pq.read_table(os.path.realpath(merged), filters=[("campaign", "==", campaign)])
    if table.num_rows == 0:
        raise OrchestratorError(f"campaign {campaign} has no result rows in {merged} yet; `python main.py status "
                                f"--campaign {campaign}` shows where its cells stand")
    return publish(campaign_rows_path(results_dir, campaign), lambda tmp: pq.write_table(table, tmp))


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
    lines.append(f"{len(skipped)} result files are unreadable: run `python main.py resubmit` to run their cells "
                 "again")
    return lines


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
    lines.append("submit only those again with: python main.py resubmit CAMPAIGN")
    return lines


def summary_lines(summary, curves=None) -> list[str]:
    """JAX against PyTorch per device model, one table per use case (orchestrator.results.views: the training
    table's time to accuracy reads the per-epoch `curves`), then the largest batches, where collected."""
    import pandas as pd

    lines = use_case_lines(summary if curves is None else pd.concat([summary, curves], ignore_index=True))
    searched = batch_search_table(summary)
    if searched:
        lines.append(f"\nLargest batch that fits (each try a fresh process):\n{searched}")
    return lines


FAILURE_COLUMNS = ["campaign", "framework", "array_index", "cell_id", "task_id", "state", "reason", "log", "log_tail"]


def campaign_manifests(folders: Sequence[Path]) -> Iterator[tuple[Path, dict]]:
    """(campaign folder, manifest) of every campaign under the results folders, each campaign once: one found
    in several folders (a copy) is taken from the first that holds it."""
    from orchestrator.plan import campaign as campaigns

    seen: set[str] = set()
    for folder in folders:
        for path in sorted(folder.glob(f"*/{campaigns.MANIFEST}")):
            try:
                manifest = campaigns.load_manifest(path.parent)
            except (OSError, ValueError):
                continue
            if manifest["campaign"] not in seen:
                seen.add(manifest["campaign"])
                yield path.parent, manifest


def ran_elsewhere(folder: Path, manifest: dict) -> bool:
    """Whether the campaign's result paths lie outside its folder: a folder copied from another cluster (or
    moved), whose jobs this cluster's Slurm does not know."""
    inside = os.path.realpath(folder) + os.sep
    return any(not os.path.realpath(c["results"]).startswith(inside) for c in manifest["cells"])


def relocated(folder: Path, results: str) -> str:
    """A cell's result path (written where the campaign ran) in this copy of its folder: the part after the
    campaign folder's name, under `folder`; the path itself when it does not name that folder."""
    parts = Path(results).parts
    if folder.name not in parts:
        return results
    last = len(parts) - 1 - parts[::-1].index(folder.name)
    return str(folder.joinpath(*parts[last + 1:]))


def copied_campaign_missing(folder: Path, manifest: dict, bad: dict[str, str]) -> list[dict]:
    """The cells without a result of a campaign that ran elsewhere, read from the files in this copy alone:
    the jobs' Slurm state and logs belong to the other cluster, so neither is looked up."""
    missing = []
    for cell in manifest["cells"]:
        result = os.path.realpath(relocated(folder, cell["results"]))
        if os.path.isfile(result) and result not in bad:
            continue
        if result in bad:
            state, reason = "unreadable result", f"result file {result} does not count: {bad[result]}"
        else:
            state, reason = "no result", (f"no result file in this copy ({folder}); the campaign ran elsewhere, so "
                                          "its Slurm state is not looked up here")
        missing.append({"campaign": manifest["campaign"], "framework": cell["framework"],
                        "array_index": cell["array_index"], "cell_id": cell["cell_id"], "task_id": "",
                        "state": state, "reason": reason, "log": "", "log_tail": "", "results": result})
    return missing


def missing_cells(results_dir: Path, log_lines: int = LOG_LINES, unreadable: dict[Path, str] | None = None,
                  others: Sequence[Path] = ()) -> list[dict]:
    """Every cell of every submitted campaign under results_dir and the `others` folders that has no result,
    with its state, its reason (the failure row's, Slurm's, or "no result") and the end of its log; each
    campaign once (campaign_manifests). A result file that does not count (`unreadable`: path -> why, from the
    merge) leaves its cell without a result, and says why. Dry-run campaigns are not counted: nothing was meant
    to run there. One sacct call per campaign that misses something and ran on this cluster."""
    from orchestrator.plan import campaign as campaigns
    from orchestrator.run.status import SUCCESS, campaign_status

    bad = {os.path.realpath(path): reason for path, reason in (unreadable or {}).items()}
    missing = []
    for folder, manifest in campaign_manifests([results_dir, *others]):
        if campaigns.is_dry_run(manifest):
            continue
        if ran_elsewhere(folder, manifest):
            missing += copied_campaign_missing(folder, manifest, bad)
            continue
        if all(os.path.isfile(c["results"]) and os.path.realpath(c["results"]) not in bad for c in manifest["cells"]):
            continue
        results = {(c["framework"], c["array_index"], c["cell_id"]): os.path.realpath(c["results"])
                   for c in manifest["cells"]}
        for cell in campaign_status(folder):
            result = results.get((cell.framework, cell.array_index, cell.cell_id), "")
            state, reason = cell.state, cell.detail
            if result in bad:
                state = "unreadable result" if state == SUCCESS else state
                reason = f"result file {result} does not count: {bad[result]}"
            if state != SUCCESS:
                missing.append({"campaign": manifest["campaign"], "framework": cell.framework,
                                "array_index": cell.array_index, "cell_id": cell.cell_id, "task_id": cell.task_id,
                                "state": state, "reason": reason, "log": cell.log,
                                "log_tail": "\n".join(log_tail(cell.log, log_lines)), "results": result})
    return missing


def write_failures(path: Path, missing: list[dict]) -> Path:
    """The missing cells as one small Parquet table beside the merged dataset (never inside it), rewritten
    whole by every collect: a cell that has its result since is no longer listed."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from bench_contract.atomic import publish

    schema = pa.schema([(name, pa.int32() if name == "array_index" else pa.string()) for name in FAILURE_COLUMNS])
    table = pa.Table.from_pylist(missing, schema=schema)
    return publish(path, lambda tmp: pq.write_table(table, tmp))


def summary_frame(output: Path):
    """The summary rows (one value per run, not per step or epoch) with the columns a comparison needs, read
    from the merged dataset: a small part of it, since the per-step curves are most of the rows."""
    import pyarrow.dataset as ds
    import pyarrow.parquet as pq

    wanted = [*ROW_KEY, "model_variant", "framework", "campaign", "cell_id", "trial", "pair_order",
              "metric", "value", "unit", "epoch", "step"]
    # A dataset merged before a column existed lacks it; the comparison reads it as empty (with_row_key).
    present = set(ds.dataset(output, format="parquet").schema.names)
    summary = ds.field("step").is_null() & ds.field("epoch").is_null()
    return pq.read_table(output, columns=[c for c in wanted if c in present], filters=summary).to_pandas()


def comparison_tables(df) -> dict[str, str]:
    """One text table per device model: JAX and PyTorch throughput side by side, the speed-up, test accuracy."""
    from orchestrator.results.compare import comparison_frame, display_rows

    frame = comparison_frame(df)
    if frame.empty:
        return {}
    return {
        str(device): format_table(*display_rows(frame, device, only=("throughput", "test_accuracy")))
        for device in frame["device_model"].unique()
    }


def _fmt(value, pattern: str) -> str:
    return "n/a" if value is None else pattern.format(value)


# A data-parallel cell is compared with the one-process cell that takes the same update on the same global batch.
ONE_PROCESS_USE_CASE = {2: 1, 4: 3}


def scaling_frame(df):
    """Strong scaling of every data-parallel cell: throughput per device against one process, same global batch.

    efficiency = throughput(N processes) / (N * throughput(1 process)). The one-process cell is looked up in
    everything collected (use case 1 for 2, 3 for 4, or the same use case run as one process), on the same
    device model, framework, benchmark, model, batch size and precision. Without one, efficiency is NaN.
    One row per data-parallel cell; empty when there is none.
    """
    import pandas as pd

    columns = ["device_model", "framework", *KEY, "world_size", "throughput_per_device", "one_process_throughput",
               "efficiency"]
    if df.empty or "world_size" not in set(df["metric"]):
        return pd.DataFrame(columns=columns)
    cells = df[df["metric"].isin(["throughput", "world_size"])].pivot_table(
        index=["device_model", "framework", *KEY, "cell_id"], columns="metric", values="value", aggfunc="median"
    ).reset_index()
    if "throughput" not in cells:
        return pd.DataFrame(columns=columns)
    cells["world_size"] = cells.get("world_size", 1).fillna(1)  # rows from before world_size was recorded
    single = cells[cells["world_size"] == 1]
    rows = []
    for _, cell in cells[cells["world_size"] > 1].iterrows():
        same = (
            (single["device_model"] == cell["device_model"]) & (single["framework"] == cell["framework"])
            & (single["benchmark"] == cell["benchmark"]) & (single["model"] == cell["model"])
            & (single["batch_size"] == cell["batch_size"]) & (single["precision"] == cell["precision"])
            & single["use_case"].isin([cell["use_case"], ONE_PROCESS_USE_CASE.get(cell["use_case"])])
        )
        base = single.loc[same, "throughput"].median() if same.any() else float("nan")
        world = int(cell["world_size"])
        rows.append({**{c: cell[c] for c in ["device_model", "framework", *KEY]}, "world_size": world,
                     "throughput_per_device": cell["throughput"] / world, "one_process_throughput": base,
                     "efficiency": cell["throughput"] / (world * base)})
    return pd.DataFrame(rows, columns=columns)


def scaling_table(df) -> str | None:
    """The scaling frame as text for the terminal, or None when no data-parallel cell was collected."""
    frame = scaling_frame(df)
    if frame.empty:
        return None

    def number(value, pattern):
        return _fmt(None if math.isnan(value) else value, pattern)  # NaN (no one-process cell) reads "n/a"

    rows = [[r.device_model, r.framework, r.benchmark, r.use_case, r.model, r.batch_size, r.world_size,
             number(r.throughput_per_device, "{:,.0f}"), number(r.one_process_throughput, "{:,.0f}"),
             number(r.efficiency, "{:.0%}")] for r in frame.itertuples()]
    headers = ["device model", "framework", "benchmark", "use case", "model", "batch", "processes",
               "samples/s per device", "one process samples/s", "scaling efficiency"]
    return format_table(headers, rows)


SEARCH_METRICS = ["max_batch_size", "min_batch_size_out_of_memory", "out_of_memory_attempts", "memory_limit"]


def batch_search_frame(df):
    """One row per searched (device model, benchmark, use case, model, precision, memory cap) with each framework's
    largest batch that fits and the smallest that did not; empty when no search cell was collected."""
    import pandas as pd

    rows = df[df["metric"].isin(SEARCH_METRICS)]
    if rows.empty or "max_batch_size" not in set(rows["metric"]):
        return pd.DataFrame()
    cells = rows.pivot_table(index=["device_model", "benchmark", "use_case", "model", "precision", "framework",
                                    "cell_id"], columns="metric", values="value", aggfunc="median").reset_index()
    cells["memory_limit"] = cells.get("memory_limit", 0).fillna(0)
    index = ["device_model", "benchmark", "use_case", "model", "precision", "memory_limit"]
    values = [m for m in SEARCH_METRICS if m in cells and m != "memory_limit"]
    wide = cells.pivot_table(index=index, columns="framework", values=values, aggfunc="median")
    wide.columns = [f"{framework}_{metric}" for metric, framework in wide.columns]
    return wide.reset_index()


def batch_search_rows(df) -> tuple[list[str], list[list[str]]]:
    """Header and formatted rows of the largest-batch table (no rows when no search cell was collected)."""
    frame = batch_search_frame(df)
    headers = ["device model", "benchmark", "use case", "model", "precision", "memory cap", "JAX fits",
               "JAX out of memory at", "PyTorch fits", "PyTorch out of memory at"]

    def size(row, column):
        value = getattr(row, column, float("nan"))
        return "n/a" if math.isnan(value) else f"{value:,.0f}"

    rows = []
    for r in frame.itertuples():
        cap = "none" if not r.memory_limit else f"{r.memory_limit / 2**30:.3g} GiB"
        rows.append([r.device_model, r.benchmark, str(r.use_case), r.model, r.precision, cap,
                     size(r, "jax_max_batch_size"), size(r, "jax_min_batch_size_out_of_memory"),
                     size(r, "torch_max_batch_size"), size(r, "torch_min_batch_size_out_of_memory")])
    return headers, rows


def batch_search_table(df) -> str | None:
    """The largest batch that fits, JAX beside PyTorch, as text; None when no search cell was collected."""
    headers, rows = batch_search_rows(df)
    return format_table(headers, rows) if rows else None
