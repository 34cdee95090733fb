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
from collections.abc import Callable
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


def temporary_name(path: Path) -> Path:
    """A hidden name beside `path`: host and pid say who wrote it, the random part makes it unique."""
    return path.with_name(f".{path.name}.tmp-{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:12]}")


def flush_to_disk(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
