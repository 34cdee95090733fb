"""Whole files or nothing: every writer here writes a temporary file beside the target, then publishes it.

A reader (collect, another task, a person) never sees half a file, and a writer killed mid-way leaves the
previous file, or none, behind. The temporary name is unique across nodes and containers (where two writers
can both be pid 1), and the file and its folder are flushed to disk around the rename, so that a crash of
the node cannot leave an empty file under the final name.
"""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path


def publish(path: str | os.PathLike[str], write: Callable[[Path], None], *, replace: bool = True) -> Path:
    """Call write(tmp) for a temporary file in path's folder, then move it into place.

    replace=False keeps a file that is already there (and one that another process published meanwhile):
    the first writer wins and everyone reads its file.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temporary_name(path)
    try:
        write(tmp)
        flush_to_disk(tmp)
        if replace:
            os.replace(tmp, path)
        else:
            try:
                os.link(tmp, path)  # fails if the name exists: no window in which a second writer overwrites
            except FileExistsError:
                pass
        flush_to_disk(path.parent)  # the rename itself is durable only once the folder is
    finally:
        tmp.unlink(missing_ok=True)
    return path


def publish_all(files: Sequence[tuple[Path, str, int | None]], folders: Sequence[Path] = ()) -> None:
    """Several files, all or nothing: (path, text, mode or None) each, and empty `folders` to make.

    Every file is first written whole to its temporary name, and only then is each moved into place, in the
    order given (put the file that marks the set complete last). Writing is what fails when the disk is full;
    if any write fails, every temporary file and every folder made here are removed and the error is raised,
    so the files that were there before stay as they were and none of the new ones appear."""
    made: list[Path] = []
    written: list[tuple[Path, Path]] = []
    try:
        for folder in [*(path.parent for path, _, _ in files), *folders]:
            make_folders(folder, made)
        for path, text, mode in files:
            tmp = temporary_name(path)
            written.append((tmp, path))
            try:
                tmp.write_text(text)
                if mode is not None:
                    tmp.chmod(mode)
                flush_to_disk(tmp)
            except OSError as exc:
                if exc.filename in (None, str(tmp)):
                    exc.filename = str(path)  # the file the user knows, not its temporary name
                raise
    except BaseException:
        for tmp, _ in written:
            tmp.unlink(missing_ok=True)
        for folder in reversed(made):  # the deepest first; a folder someone else has put something in stays
            try:
                folder.rmdir()
            except OSError:
                pass
        raise
    for tmp, path in written:
        os.replace(tmp, path)
    for folder in dict.fromkeys(path.parent for _, path in written):
        flush_to_disk(folder)  # the renames are durable only once their folders are


def make_folders(folder: Path, made: list[Path]) -> None:
    """mkdir -p, adding to `made` each folder that this call created, the outermost first."""
    missing = []
    while not folder.is_dir():
        missing.append(folder)
        if folder.parent == folder:
            break
        folder = folder.parent
    for path in reversed(missing):
        try:
            path.mkdir()
        except FileExistsError:
            if not path.is_dir():
                raise
            continue  # made meanwhile by someone else: not ours to remove
        made.append(path)


def temporary_name(path: Path) -> Path:
    """A hidden name beside `path`: host and pid say who wrote it, the random part makes it unique."""
    return path.with_name(f".{path.name}.tmp-{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:12]}")


def flush_to_disk(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
