"""Whole files or nothing: every writer here writes a temporary file beside the target, then publishes it.

A reader (collect, another task, a person) never sees half a file, and a writer killed mid-way leaves the
previous file, or none, behind.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path


def publish(path: str | os.PathLike[str], write: Callable[[Path], None], *, replace: bool = True) -> Path:
    """Call write(tmp) for a temporary file in path's folder, then move it into place.

    replace=False keeps a file that is already there (and one that another process published meanwhile):
    the first writer wins and everyone reads its file.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        write(tmp)
        if replace:
            os.replace(tmp, path)
        else:
            try:
                os.link(tmp, path)  # fails if the name exists: no window in which a second writer overwrites
            except FileExistsError:
                pass
    finally:
        tmp.unlink(missing_ok=True)
    return path
