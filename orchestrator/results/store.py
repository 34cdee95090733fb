"""The merged dataset on disk: the least machinery that keeps collect's four promises.

`merged.parquet` is a symbolic link to one generation, a hidden folder beside it (`.merged.parquet.gen-*`) of
Parquet parts (`part-*.parquet`; pandas and pyarrow read the folder as one table) and of `_index.json`, the
index of every merged task file: its size and mtime, its cell key, and which rows of which part hold its rows.
Each promise, and the parts of this module that keep it:

1. A reader never sees half a dataset. A collect builds the next generation in a fresh folder and switches the
   link to it with one rename (publish_generation); a published generation is never written again. A reader
   resolves the link once and reads that folder (merged_dataset), and a replaced generation stays READER_GRACE_S
   after its switch (remove_old_generations, in_grace), so a read that began before a switch ends whole.
2. A killed collect loses nothing and doubles nothing. The index is written into the same unpublished generation
   as the parts it names, so the link names both or neither, and a killed collect leaves only an unpublished
   folder, which the next one removes. An index that does not name exactly the parts beside it (a folder changed
   by hand), or of another version or result schema, is not trusted: the next collect starts from scratch
   (load_index). Two collects at once: each holds the lock `.merged.parquet.lock` (orchestrator.run.file_lock)
   from reading the index to switching the link, so the second merges onto the first's generation.
3. Collect after 100 new task files takes at most 0.5 s, with 10,000 merged (make bench). The index says which
   files are merged, so only new and changed ones are read, into one new part (from scratch, 10,000 files take
   about ten times as long); the parts kept are hard links in the new generation, not copies (new_generation);
   the rows of changed and gone files leave by rewriting only the parts that hold them (drop_rows); and more
   than MAX_PARTS parts are compacted into one (compact), so that a collect and every reader open a bounded
   number of files however many collects ran.
4. Collect of 10,000 task files from scratch takes at most 2.5 times a bare pyarrow read of the same files. Rows
   are written as they are read, in row groups of ROW_GROUP rows (write_part, row_group): memory follows the
   merged rows, and the writer gets few large chunks.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import time
from pathlib import Path

from bench_contract.atomic import flush_to_disk, publish
from bench_contract.results import SCHEMA, contiguous
from orchestrator.errors import OrchestratorError

MERGED = "merged.parquet"  # the merged dataset's default place in the results folder
INDEX = "_index.json"  # pyarrow and pandas skip names that start with "_" when they read the folder
INDEX_VERSION = 3  # the index's own layout; an index of another version is rebuilt from the task files
ROW_GROUP = 100_000  # rows buffered before they are written out as one row group
MAX_PARTS = 16  # more parts than this are compacted into one (each part costs readers a file open)
# A generation replaced by the next stays this long, for readers that resolved it before the switch (a report
# reading a large dataset while collects follow each other); the marker file's mtime says when it was replaced.
READER_GRACE_S = 600.0
SUPERSEDED = ".superseded"


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
    try:
        for part in parts if current is not None else {}:
            try:
                os.link(current / part, gen / part)
            except OSError:
                shutil.copy2(current / part, gen / part)
    except BaseException:
        discard_generation(output, gen)
        raise
    return gen


def discard_generation(output: Path, gen: Path) -> None:
    """Remove an unpublished generation whose building failed (a full disk), freeing its space at once; one that
    `output` links to is never removed."""
    if current_generation(output) != gen:
        shutil.rmtree(gen, ignore_errors=True)


def publish_generation(output: Path, gen: Path) -> None:
    """Point `output` at `gen` with one rename of a symbolic link: a reader sees the old or the new one. As in
    bench_contract.atomic.publish, what is published is on disk first (the generation's folder, whose files
    were each flushed as they were published) and the switch is durable once the results folder is."""
    flush_to_disk(gen)  # its entries: hard links to kept parts, and the new parts and index
    link = output.parent / f".{output.name}.link-{secrets.token_hex(6)}"
    os.symlink(gen.name, link)  # relative: the results folder can be moved or copied whole
    previous = current_generation(output)
    try:
        os.replace(link, output)  # a plain file of that name is replaced too (refuse_plain_folder: a folder is not)
    finally:
        link.unlink(missing_ok=True)
    flush_to_disk(output.parent)
    if previous is not None and previous != gen:
        (previous / SUPERSEDED).touch()  # from now, READER_GRACE_S for the readers still in it


def remove_old_generations(output: Path, keep: set[str]) -> None:
    """Remove the generations other than `keep` (the published one) that were replaced more than READER_GRACE_S
    ago, with what killed collects left: unpublished generations (no marker: no reader was ever pointed there)
    and links never switched to."""
    for folder in output.parent.glob(f"{generation_prefix(output)}*"):
        if folder.name not in keep and folder.is_dir() and not folder.is_symlink() and not in_grace(folder):
            shutil.rmtree(folder, ignore_errors=True)
    for link in output.parent.glob(f".{output.name}.link-*"):
        link.unlink(missing_ok=True)


def in_grace(gen: Path) -> bool:
    """Whether readers may still be reading this replaced generation."""
    try:
        return time.time() - (gen / SUPERSEDED).stat().st_mtime < READER_GRACE_S
    except FileNotFoundError:
        return False


def merged_dataset(output: Path):
    """The merged dataset as a pyarrow dataset of the one generation `output` links to now: the listing of its
    parts and their reading see the same folder, however often collects switch the link meanwhile (a reader that
    listed through the link opened parts the next generation no longer had). Every reader reads through this."""
    import pyarrow.dataset as ds

    return ds.dataset(os.path.realpath(output), format="parquet")


def read_merged_rows(output: Path, columns: list[str] | None = None, filters=None):
    """Rows of the merged dataset (merged_dataset) as a pyarrow table: the `columns` it has (a dataset merged
    before a column existed lacks it; None: all) of the rows that pass `filters` (a pyarrow.dataset expression)."""
    dataset = merged_dataset(output)
    present = set(dataset.schema.names)
    return dataset.to_table(columns=None if columns is None else [c for c in columns if c in present],
                            filter=filters)


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


def refuse_plain_folder(output: Path) -> None:
    """Refuse, in one sentence, a plain folder where collect keeps its link (an earlier version's merged dataset,
    or another tool's folder): collect neither reads it nor removes it."""
    if output.is_dir() and not output.is_symlink():
        raise OrchestratorError(f"{output} is a folder, not the link to a merged dataset that this version of "
                                f"collect writes (an earlier version's, or another tool's folder); move it away or "
                                f"remove it (rm -r {output}), or give another --output, and run collect again")


def new_index() -> dict:
    return {"version": INDEX_VERSION, "columns": SCHEMA.names, "parts": {}, "files": {}, "superseded": {}}


def load_index(output: Path) -> dict | None:
    """The index of the published generation `output`, or None when it must be rebuilt from the task files:
    absent or damaged, of another version or result schema, or not naming exactly the parts beside it (a part
    removed, added or changed by hand: readers read every part there, and collect only those it names)."""
    try:
        index = json.loads((output / INDEX).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(index, dict) or index.get("version") != INDEX_VERSION or index.get("columns") != SCHEMA.names:
        return None
    on_disk = {part.name: part.stat().st_size for part in output.glob("part-*.parquet")}
    return index if index.get("parts") == on_disk else None


def save_index(output: Path, index: dict) -> None:
    text = json.dumps(index, separators=(",", ":"))
    publish(output / INDEX, lambda tmp: tmp.write_text(text))


def save_merged(output: Path, index: dict, parts: list[str]) -> None:
    """Save the index naming these parts in the unpublished generation `output`, and remove the parts it no
    longer names (links to parts that other generations still hold)."""
    index["parts"] = {part: (output / part).stat().st_size for part in parts}
    index["columns"] = SCHEMA.names
    save_index(output, index)
    for part in output.glob("part-*.parquet"):
        if part.name not in index["parts"]:
            part.unlink()


def drop_rows(output: Path, files: dict[str, dict], dropped: set[str]) -> None:
    """Take the rows of `dropped` files out of the parts that hold them (rewriting only those parts) and out
    of the index."""
    import pyarrow.parquet as pq

    for part in sorted({files[rel]["part"] for rel in dropped if rel in files}):
        keep = [rel for rel, info in files.items() if info["part"] == part and rel not in dropped]
        if keep:
            table = pq.read_table(output / part, schema=SCHEMA)
            new_part = write_part(output, (table.slice(files[rel]["offset"], files[rel]["rows"]) for rel in keep))
            place(files, keep, new_part)
        for rel in dropped:
            if files.get(rel, {}).get("part") == part:
                del files[rel]


def compact(output: Path, files: dict[str, dict]) -> list[str]:
    """The parts that hold the indexed files: compacted into one when there are more than MAX_PARTS, and one
    empty part when nothing is merged (the folder stays readable as a table with the schema)."""
    import pyarrow.parquet as pq

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


class NoRows(Exception):
    """A part that would hold no rows: its temporary file is dropped, not published."""


def write_part(output: Path, tables, empty_ok: bool = False, prefix: str = "part-") -> str | None:
    """Write the tables, in order, as one new part named `prefix` and a token (bench_contract.atomic.publish:
    whole or not at all); None when there were no rows to write."""
    import pyarrow.parquet as pq

    def write(tmp: Path) -> None:
        rows, buffer, buffered = 0, [], 0
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
            raise NoRows

    name = f"{prefix}{secrets.token_hex(6)}.parquet"
    try:
        publish(output / name, write)
    except NoRows:
        return None
    return name


COMBINE_ABOVE = 64  # tables buffered for one row group: more (a file's slice each) are first made contiguous


def row_group(tables: list):
    """The buffered tables as one. Widened batches (bench_contract.results.widen) are few and contiguous, and
    copying their 49 columns again cost more than it saved; many small tables (the slices of the files a part
    keeps) are combined, since a Parquet writer given thousands of tiny chunks is slower still."""
    import pyarrow as pa

    return contiguous(tables) if len(tables) > COMBINE_ABOVE else pa.concat_tables(tables)


def place(files: dict[str, dict], order: list[str], part: str | None) -> None:
    """Record that `order`'s rows now lie in `part`, one file after another."""
    offset = 0
    for rel in order:
        files[rel]["part"], files[rel]["offset"] = part, offset
        offset += files[rel]["rows"]
