"""Publishing a file: unique temporary names across containers, and the data on disk before the rename."""

import os

from bench_contract import atomic
from bench_contract.atomic import publish


def test_two_writers_with_the_same_pid_do_not_share_a_temporary_file(tmp_path, monkeypatch):
    """Two containers' tasks are both pid 1: the second writer must not write into (and move away) the first
    writer's temporary file while the first is still writing it."""
    monkeypatch.setattr(os, "getpid", lambda: 1)
    target = tmp_path / "init.npz"

    def first(tmp):
        tmp.write_bytes(b"first")
        publish(target, lambda tmp2: tmp2.write_bytes(b"second"))  # another writer, same pid, meanwhile

    publish(target, first)
    assert target.read_bytes() == b"first"  # the last to publish wins, whole
    assert [p.name for p in tmp_path.iterdir()] == ["init.npz"]  # no temporary file left behind


def test_the_file_and_its_folder_reach_the_disk_around_the_rename(tmp_path, monkeypatch):
    events = []
    real_fsync, real_replace = os.fsync, os.replace
    monkeypatch.setattr(os, "fsync", lambda fd: (events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}"))),
                                                 real_fsync(fd)))
    monkeypatch.setattr(os, "replace", lambda a, b: (events.append(("replace", str(b))), real_replace(a, b)))
    target = tmp_path / "rows.parquet"
    publish(target, lambda tmp: tmp.write_bytes(b"rows"))
    kinds = [kind for kind, _ in events]
    assert kinds == ["fsync", "replace", "fsync"], events
    assert ".rows.parquet.tmp-" in events[0][1]  # the written data, before it gets the final name
    assert events[2][1] == str(tmp_path)  # then the folder, which holds the rename


def test_temporary_names_differ_within_one_process(tmp_path):
    names = {atomic.temporary_name(tmp_path / "x") for _ in range(100)}
    assert len(names) == 100
