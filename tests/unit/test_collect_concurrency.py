"""collect: two collects at once lose nothing and merge nothing twice, and a collect killed mid-way
leaves readers the previous complete dataset, never a half-collected one."""

import os
import shutil
import subprocess
import sys

import pandas as pd
from helpers import REPO_ROOT, run_cli, task_file, wait_until

from orchestrator.results.collect import merge
from orchestrator.results.store import remove_merged

# A real `python main.py collect` process, with one step held or cut short so that two processes meet at the
# point where they used to collide: after the new parts are written, before the index names them.
DRIVER = """
import os, signal, sys
sys.path[:0] = [{root!r}, {tests!r}]
from helpers import wait_until
from orchestrator.results import store
def hold(ready, go):
    open(ready, "w").close()
    wait_until(lambda: os.path.exists(go), seconds=240)  # a bound, not a timing: the test says go long before
real = store.{step}
def step(*args):
    {action}
    return real(*args)
store.{step} = step
sys.argv = ["main.py", "collect", "--results-dir", {results!r}]
from orchestrator.cli import run
run()
"""


def collect_process(results, step, action):
    code = DRIVER.format(root=str(REPO_ROOT), tests=str(REPO_ROOT / "tests"), results=str(results), step=step,
                         action=action)
    return subprocess.Popen([sys.executable, "-c", code], cwd=REPO_ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)


def task_files(root, framework, batches):
    for batch in batches:
        task_file(root, framework, batch, float(batch))


def dataset_rows(path):
    """The dataset as a user reads it, one tuple per row, sorted."""
    df = pd.read_parquet(path)
    return sorted(zip(df.cell_id, df.metric, df.value))


def from_scratch(root):
    return dataset_rows(merge(root, root.parent / "scratch" / "merged.parquet").output)


def read_until(stream, text):
    """What a process wrote to `stream` up to the line holding `text`, or all of it if it ends first."""
    lines = []
    for line in iter(stream.readline, ""):
        lines.append(line)
        if text in line:
            break
    return "".join(lines)


def test_two_collects_at_once_lose_nothing_and_count_nothing_twice(tmp_path):
    root = tmp_path / "results"
    task_files(root, "jax", range(1, 41))
    merge(root, root / "merged.parquet")
    task_files(root, "torch", range(1, 41))  # new files for both collects to read
    # The first holds where collects used to collide (its new parts written, not yet indexed) until the second,
    # started only then, has said that it waits: an order made by signals, not by sleeps a loaded machine stretches.
    ready, go = tmp_path / "first-ready", tmp_path / "go"
    first = collect_process(root, "save_merged", f"hold({str(ready)!r}, {str(go)!r})")
    wait_until(ready.exists, first)
    second = collect_process(root, "save_merged", "pass")
    said = read_until(second.stderr, "waiting for collect into")
    go.touch()
    outs = [first.communicate(timeout=300), second.communicate(timeout=300)]
    outs[1] = (outs[1][0], said + outs[1][1])
    assert "waiting for collect into" in said  # the second waited for the first's lock, and said why
    expected = from_scratch(root)
    assert len(expected) == 80 * 3 and len(set(expected)) == len(expected)
    for proc, (out, err) in zip((first, second), outs):
        assert proc.returncode == 0, err
        assert "Traceback" not in err
        assert f"merged {len(expected)} rows from 80 task files" in out
    assert dataset_rows(root / "merged.parquet") == expected


def test_a_collect_killed_mid_way_leaves_readers_the_previous_dataset(tmp_path):
    root = tmp_path / "results"
    out = root / "merged.parquet"
    task_files(root, "jax", range(1, 21))
    merge(root, out)
    before = dataset_rows(out)
    changed = task_file(root, "jax", 1, 111.0)  # a cell run again: its part is rewritten without its old rows
    os.utime(changed, ns=(1, 1))
    task_files(root, "torch", range(1, 21))
    # Killed (SIGKILL: no clean-up, its lock left behind) when its new parts are written, before they are indexed.
    proc = collect_process(root, "save_index", "os.kill(os.getpid(), signal.SIGKILL)")
    proc.communicate(timeout=300)
    assert proc.returncode == -9
    seen = dataset_rows(out)
    assert seen == before and len(set(seen)) == len(seen)  # no duplicates, nothing half-collected
    import pyarrow.dataset as ds

    assert ds.dataset(out, format="parquet").count_rows() == len(before)
    collected = merge(root, out)  # the next collect takes over the dead one's lock and completes
    assert collected.rows == 40 * 3 and dataset_rows(out) == from_scratch(root)
    assert len(list(root.glob(".merged.parquet.gen-*"))) <= 2  # the unpublished folder went; one previous kept


def test_a_collect_that_waited_too_long_refuses_in_one_sentence(tmp_path, monkeypatch):
    import json

    import pytest

    from orchestrator.errors import OrchestratorError
    from orchestrator.results import collect

    root = tmp_path / "results"
    task_files(root, "jax", [1])
    lock = root / ".merged.parquet.lock"  # held by a live process on this host: this one
    lock.write_text(json.dumps({"host": os.uname().nodename, "pid": os.getpid(), "since": "now",
                                "doing": "collect into elsewhere", "token": "t"}))
    monkeypatch.setattr(collect, "LOCK_WAIT_S", 0.2)
    with pytest.raises(OrchestratorError, match=f"collect into elsewhere .* holds {lock}"):
        merge(root, root / "merged.parquet")
    assert not (root / "merged.parquet").exists()


def test_a_plain_folder_where_the_link_goes_is_refused_in_one_sentence_and_left_alone(tmp_path):
    """An earlier version's merged dataset (a plain folder of parts), or another tool's folder: collect says so
    and what to do, exits 1, and neither reads nor removes it."""
    root = tmp_path / "results"
    out = root / "merged.parquet"
    task_files(root, "jax", [1, 2])
    merge(root, out)
    plain = root / "plain"  # the dataset as collect wrote it before generations: a plain folder of parts
    shutil.copytree(out, plain)
    remove_merged(out)
    assert not [p for p in root.iterdir() if p.name.startswith((".merged", "merged"))]  # link and generations
    plain.rename(out)
    before = sorted(p.name for p in out.iterdir())
    proc = run_cli("collect", "--results-dir", str(root))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    (sentence,) = [line for line in proc.stderr.splitlines() if line.strip()]
    assert f"{out} is a folder, not the link to a merged dataset" in sentence and "move it away" in sentence
    assert f"rm -r {out}" in sentence
    assert not out.is_symlink() and sorted(p.name for p in out.iterdir()) == before
    shutil.rmtree(out)  # as the sentence says: then collect makes it anew
    assert merge(root, out).from_scratch and dataset_rows(out) == from_scratch(root)


# Readers of merged.parquet while collects switch generations. The collector rewrites one task file
# per collect (its rows dropped, a part rewritten) and adds one, so parts come and go and are compacted; each
# reader reads as the comparison, the report and the curves do, again and again, and counts what failed.
COLLECTOR = """
import sys, time
sys.path[:0] = [{root!r}, {tests!r}]
from pathlib import Path
from helpers import task_file
from orchestrator.results.collect import merge
root, until = Path({results!r}), time.monotonic() + {seconds}
n = 0
while time.monotonic() < until:
    n += 1
    task_file(root, "jax", 1 + n % 40, float(n))  # changed: its old rows dropped from their part
    task_file(root, "torch", 100 + n, float(n))  # new
    merge(root, root / "merged.parquet")
print(n)
"""
READER = """
import sys, time
sys.path[:0] = [{root!r}]
from pathlib import Path
from orchestrator.results.report import read_merged
from orchestrator.results.views import curve_frame, summary_frame
merged, until = Path({merged!r}), time.monotonic() + {seconds}
reads, failures = 0, []
while time.monotonic() < until:
    for read in (summary_frame, curve_frame, read_merged):
        reads += 1
        try:
            assert len(read(merged)) > 0 or read is curve_frame
        except Exception as exc:
            failures.append(f"{{read.__name__}}: {{type(exc).__name__}}: {{exc}}")
print(reads, len(failures))
print("\\n".join(failures[:3]))
"""


def test_readers_never_fail_while_collects_switch_generations(tmp_path):
    root = tmp_path / "results"
    task_files(root, "jax", range(1, 41))
    merge(root, root / "merged.parquet")
    values = {"root": str(REPO_ROOT), "tests": str(REPO_ROOT / "tests"), "results": str(root),
              "merged": str(root / "merged.parquet"), "seconds": 12}
    procs = [subprocess.Popen([sys.executable, "-c", code.format(**values)], cwd=REPO_ROOT, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for code in (COLLECTOR, READER, READER)]
    (collects, _), *readers = [proc.communicate(timeout=300) for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0, 0], readers
    assert int(collects) >= 5  # generations did switch under the readers
    for out, _ in readers:
        reads, failed = map(int, out.split("\n")[0].split())
        assert reads >= 10 and failed == 0, out


def test_a_replaced_generation_stays_for_its_readers_for_the_grace_time_then_goes(tmp_path, monkeypatch):
    from orchestrator.results import store

    root = tmp_path / "results"
    task_files(root, "jax", range(1, 5))
    first = os.path.realpath(merge(root, root / "merged.parquet").output)
    before = dataset_rows(first)
    for batch in (5, 6):  # two more collects: before, the first generation went with the second
        task_files(root, "jax", [batch])
        merge(root, root / "merged.parquet")
    assert dataset_rows(first) == before  # a reader that resolved it before the switches still reads it whole
    monkeypatch.setattr(store, "READER_GRACE_S", 0.0)
    task_files(root, "jax", [7])
    merge(root, root / "merged.parquet")
    assert not os.path.exists(first)
    assert [p.name for p in root.glob(".merged.parquet.gen-*")] == [os.path.basename(os.path.realpath(
        root / "merged.parquet"))]
