"""Collect publishes as every other writer does (bench_contract.atomic.publish): each part and the
index under a temporary name that says which host and process wrote it, flushed to disk before its rename, the
generation's folder flushed before the link switches to it, and the results folder after the switch; a bad
result moved aside by resubmit is flushed too."""

import os
import socket
from pathlib import Path

from helpers import task_file

from orchestrator.results.collect import merge
from orchestrator.results.store import INDEX


def recording(monkeypatch) -> list[tuple[str, ...]]:
    """Every fsync (of the path its descriptor names) and every rename, in order."""
    events: list[tuple[str, ...]] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd):
        events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        return real_fsync(fd)

    def replace(src, dst, *args, **kwargs):
        events.append(("replace", str(src), str(dst)))
        return real_replace(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    return events


def test_each_part_and_the_index_are_flushed_under_a_named_temporary_file_then_the_switch(tmp_path, monkeypatch):
    task_file(tmp_path, "jax", 32, 2000.0)
    task_file(tmp_path, "torch", 32, 1000.0)
    events = recording(monkeypatch)
    merge(tmp_path, tmp_path / "merged.parquet")
    gen = (tmp_path / "merged.parquet").resolve()
    published = [(i, Path(src), Path(dst)) for i, (kind, *paths) in enumerate(events) if kind == "replace"
                 for src, dst in [paths] if Path(dst).parent == gen]
    assert {dst.name for _, _, dst in published} >= {INDEX} and any(dst.name.startswith("part-")
                                                                     for _, _, dst in published)
    for i, src, dst in published:
        assert src.name.startswith(f".{dst.name}.tmp-{socket.gethostname()}-{os.getpid()}-"), src
        assert ("fsync", str(src)) in events[:i]  # its bytes on disk before the rename names it
    link = str(tmp_path / "merged.parquet")
    (switch,) = [i for i, (kind, *paths) in enumerate(events) if kind == "replace" and paths[1] == link]
    assert ("fsync", str(gen)) in events[:switch]  # the generation's entries, before the link points there
    assert ("fsync", str(tmp_path)) in events[switch:]  # and the switch itself


def test_a_bad_result_moved_aside_is_flushed_before_its_cell_runs_again(tmp_path, monkeypatch):
    from orchestrator.run.resubmit import move_aside
    from orchestrator.run.status import CellStatus

    bad = tmp_path / "rows" / "jax-0.parquet"
    bad.parent.mkdir()
    bad.write_bytes(b"")
    events = recording(monkeypatch)
    (moved,) = move_aside([CellStatus("jax", 0, "c", "70_0", "failed", "", bad_result="an empty file",
                                      results=str(bad))], report=lambda line: None)
    assert moved.is_file() and not bad.exists()
    assert events == [("fsync", str(bad.parent))]  # Path.rename is no os.replace: the flush is all that is seen
