"""Collecting 10,000 task files from scratch, against a bare pyarrow read of the same files, again after 100 new
ones, and the memory it takes.

The task files are real result files (the contract's ResultRows writer, every column of the schema): 100
distinct tables, each written again under many cell ids, one file per cell, which is what collect sees after a
campaign of that many cells. Each file is its own cell: collect keeps one run per cell, so copies with one cell
id (as this suite wrote until #17) were merged as 100 cells and 9,900 left out, not 10,000 merged.
Each collect runs as `main.py collect` in its own process, so its wall time and peak memory are the user's. The
bare read runs as its own process too (interpreter, pyarrow's import, every task file read and the tables
concatenated), in the same run, so that the ratio of the two says what collect adds whatever the machine's speed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.timing import REPO_ROOT, Result, at_most, seconds

FILES = 10_000
NEW_FILES = 100
ROWS_PER_FILE = 42  # throughput, test accuracy and 40 training losses
SCRATCH_TARGET_RATIO, INCREMENTAL_TARGET_S = 2.5, 0.5  # for FILES (against the bare read) and NEW_FILES
QUICK_FILES, QUICK_NEW_FILES = 200, 10  # --quick: to check that the suite runs


def task_table(index: int, rows: int):
    from bench_contract.results import JSON_COLUMNS, SCHEMA, ResultRows

    context = {f.name: "bench" for f in SCHEMA if f.type == "string"}
    context.update({f.name: 0 for f in SCHEMA if f.type != "string"})
    for name in ("metric", "value", "unit", "epoch", "step", "note"):  # per row, not context
        context.pop(name)
    framework = ("jax", "torch")[index % 2]
    context.update(framework=framework, benchmark="mnist", use_case=1, model="mlp", batch_size=index // 2 + 1,
                   precision="fp32", device_model="bench CPU", cell_id=f"{framework}-{index}", schema_version=1)
    # The JSON columns hold an object, as a backend writes them (a file with "bench" there is set aside by collect);
    # the measured settings are the same for every cell.
    context.update({name: "{}" for name in JSON_COLUMNS})
    result = ResultRows(context)
    result.add("throughput", 1000.0 + index, "samples/s")
    result.add("test_accuracy", 0.9, "fraction")
    for step in range(rows - 2):
        result.add("train_loss", 1.0 / (step + 1), "nats", epoch=0, step=step)
    return result


def make_task_files(root: Path, count: int, rows: int, start: int = 0, wide: bool = False) -> None:
    """`count` task files under root/campaign/rows/<framework>/, numbered from `start`, each its own cell; `wide`:
    in the layout written before #17 (every context column on every row), which collect still reads."""
    import pyarrow.parquet as pq

    from bench_contract.results import TaskFile, widen

    distinct = [task_table(index, rows).task_file() for index in range(min(100, count))]
    for index in range(start, start + count):
        framework = ("jax", "torch")[index % 2]
        folder = root / "campaign" / "rows" / framework
        folder.mkdir(parents=True, exist_ok=True)
        task = distinct[index % len(distinct)]
        task = TaskFile({**task.context, "cell_id": f"{framework}-{index}"}, task.rows)
        table = widen([task]) if wide else task.stored_table()
        pq.write_table(table, folder / f"cell-{index}.parquet")  # as ResultRows.write does, without the rename


# The bare read: what any reader of these files pays. ParquetFile.read is pyarrow's cheapest whole-file read
# (pq.read_table goes through the dataset layer and took about three times its CPU per file here), so the ratio
# is held against the fastest plain reading, not a slow one.
BARE_READ = """
import sys
from pathlib import Path
import pyarrow as pa
import pyarrow.parquet as pq
paths = sorted(Path(sys.argv[1]).glob("*/rows/**/*.parquet"))
table = pa.concat_tables([pq.ParquetFile(path).read() for path in paths])
if table.num_rows != int(sys.argv[2]):
    sys.exit(f"read {table.num_rows} rows, not {sys.argv[2]}")
"""


def timed_process(args: list[str]) -> tuple[float, float, float]:
    """Wall time, peak memory (MB) and CPU time (user + system, s) of this interpreter running `args`, as its own
    process. On a shared machine the load stretches the wall time; the CPU time says what the process itself cost."""
    # stderr goes to a file, not a pipe: nobody reads a pipe during wait4, and collect's warnings would fill it
    # (64 KB) and block collect for ever.
    with tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        proc = subprocess.Popen([sys.executable, *args], stdout=subprocess.DEVNULL, stderr=err, cwd=REPO_ROOT)
        _, status, usage = os.wait4(proc.pid, 0)  # the rusage of this child alone
        elapsed = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode != 0:
            err.seek(0)
            raise RuntimeError(f"{' '.join(args[:2])} failed: {err.read().decode(errors='replace').strip()[-2000:]}")
    return elapsed, usage.ru_maxrss / 1024, usage.ru_utime + usage.ru_stime


def collect_process(results: Path) -> tuple[float, float, float]:
    """timed_process of `main.py collect` on `results`."""
    return timed_process([str(REPO_ROOT / "main.py"), "collect", "--results-dir", str(results)])


def bare_read(results: Path, rows: int, repeats: int) -> tuple[float, float]:
    """Medians of wall time and CPU time of `repeats` bare reads (BARE_READ) of the task files under `results`."""
    runs = [timed_process(["-c", BARE_READ, str(results), str(rows)]) for _ in range(repeats)]
    return median([wall for wall, _, _ in runs]), median([cpu for _, _, cpu in runs])


def median(values):
    values = sorted(values)
    return values[len(values) // 2]


def from_scratch(results: Path, repeats: int) -> tuple[float, float, float]:
    """Medians of wall time, peak memory and CPU time of `repeats` collects of `results`, each from scratch."""
    from orchestrator.results.store import MERGED, remove_merged

    runs = []
    for _ in range(repeats):
        remove_merged(results / MERGED)  # the link and its generations (rmtree of the link left them, once)
        runs.append(collect_process(results))
    wall, memory, cpu = zip(*runs)
    return median(wall), median(memory), median(cpu)


def measure(repeats: int, quick: bool = False) -> list[Result]:
    from orchestrator.results.collect import READ_THREADS, merge

    files, new_files = (QUICK_FILES, QUICK_NEW_FILES) if quick else (FILES, NEW_FILES)
    work = Path(tempfile.mkdtemp(prefix="bench-collect-"))
    try:
        big = work / "big"
        make_task_files(big, files, ROWS_PER_FILE)
        scratch_s, scratch_mb, scratch_cpu = from_scratch(big, repeats)
        bare_s, bare_cpu = bare_read(big, files * ROWS_PER_FILE, repeats)
        # The same files in the wide layout: results folders of campaigns run before #17.
        wide = work / "wide"
        make_task_files(wide, files, ROWS_PER_FILE, wide=True)
        wide_s, _, wide_cpu = from_scratch(wide, repeats)
        shutil.rmtree(wide)

        incremental_merge, incremental_cli = [], []
        for round_ in range(repeats):
            make_task_files(big, new_files, ROWS_PER_FILE, start=files + 2 * round_ * new_files)
            start = time.perf_counter()
            merged = merge(big, big / "merged.parquet")
            incremental_merge.append(time.perf_counter() - start)
            if merged.read != new_files or merged.from_scratch or merged.skipped:
                raise RuntimeError(f"the incremental collect read {merged.read} files (from scratch: "
                                   f"{merged.from_scratch}), skipped {merged.skipped[:3]}; {new_files} were new")
            make_task_files(big, new_files, ROWS_PER_FILE, start=files + (2 * round_ + 1) * new_files)
            incremental_cli.append(collect_process(big)[0])
        merge_s, cli_s = median(incremental_merge), median(incremental_cli)

        # Same merged size from ten times fewer files, and a ten times smaller result from as few files.
        few_files = work / "few-files"
        make_task_files(few_files, files // 10, ROWS_PER_FILE * 10)
        few_files_mb = collect_process(few_files)[1]
        small = work / "small"
        make_task_files(small, files // 10, ROWS_PER_FILE)
        small_mb = collect_process(small)[1]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    rows, full = files * ROWS_PER_FILE, not quick  # the time targets are for FILES and NEW_FILES

    def held_to(value: float, target: float, unit: str = " s") -> tuple[str, str]:
        return (f"<= {target:g}{unit}", at_most(value, target)) if full else ("", "")

    return [
        Result(f"collect {files:,} task files from scratch", seconds(scratch_s), "(see the ratio)", "",
               f"`main.py collect`, {rows:,} rows; {scratch_cpu:.1f} s CPU; peak {scratch_mb:.0f} MB"),
        Result(f"a bare pyarrow read of the same {files:,} files", seconds(bare_s), "", "",
               f"its own process: pyarrow's import, ParquetFile.read of each, concat_tables; {bare_cpu:.1f} s CPU"),
        Result("collect from scratch / the bare read, same run", f"{scratch_s / bare_s:.2f}x",
               *held_to(scratch_s / bare_s, SCRATCH_TARGET_RATIO, "x"),
               f"wall-time medians; in CPU time {scratch_cpu / bare_cpu:.2f}x (collect reads on "
               f"{READ_THREADS} threads, the bare read on one)"),
        Result(f"the same {files:,} files written in the wide layout of before #17", seconds(wide_s), "(none)", "",
               f"every context column on every row, as older results folders hold them; {wide_cpu:.1f} s CPU"),
        Result(f"collect again after {new_files:,} new files: the merge", seconds(merge_s),
               *held_to(merge_s, INCREMENTAL_TARGET_S),
               f"list and stat {files + new_files:,} files, read the {new_files:,} new, write one part"),
        Result("same, whole `main.py collect`", seconds(cli_s), "(none)", "",
               f"adds interpreter start, pandas/pyarrow imports and the {files // 2:,}-cell comparison table"),
        Result(f"peak memory: {files:,} files vs {files // 10:,} files, same rows",
               f"{scratch_mb:.0f} / {few_files_mb:.0f} MB", *(("follows rows, not files",
               "met" if scratch_mb <= 1.25 * few_files_mb else "missed") if full else ("", "")),
               f"and {small_mb:.0f} MB for {files // 10:,} files with a tenth of the rows"),
    ]
