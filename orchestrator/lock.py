"""One writer at a time, for a campaign or a merged dataset, on the file systems clusters share.

The lock is a file created with O_CREAT | O_EXCL, which is atomic on local disks and on NFS (v3 and later),
Lustre and GPFS, where flock is not dependable. It says who holds it (host, pid, since when, doing what).
A holder that died on this host is seen as such and its lock taken over; a holder on another host cannot be
checked from here, so the message names it and the file to remove if that process is gone.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from orchestrator.errors import OrchestratorError

POLL_S = 0.5


@contextmanager
def exclusive(path: Path, doing: str, wait_s: float = 0.0) -> Iterator[None]:
    """Hold the lock file `path` while the block runs. Waits up to wait_s for another holder, saying so once
    on stderr, then refuses with one sentence (OrchestratorError)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    mine = take(path, doing, wait_s)
    try:
        yield
    finally:
        if read_holder(path) == mine:
            path.unlink(missing_ok=True)


def take(path: Path, doing: str, wait_s: float) -> dict:
    deadline = time.monotonic() + wait_s
    said = False
    while True:
        holder = try_create(path, doing)
        if holder is not None:
            return holder
        other = read_holder(path)
        if other is not None and died_here(other) and take_over(path, other):
            continue
        if time.monotonic() >= deadline:
            raise OrchestratorError(f"{describe(other)} holds {path}: wait for it to finish, or remove that file "
                                    "if the process is gone")
        if not said:
            print(f"waiting for {describe(other)} (lock {path})", file=sys.stderr)
            said = True
        time.sleep(POLL_S)


def try_create(path: Path, doing: str) -> dict | None:
    holder = {"host": socket.gethostname(), "pid": os.getpid(), "since": time.strftime("%Y-%m-%d %H:%M:%S"),
              "doing": doing, "token": uuid.uuid4().hex}
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        return None
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(holder, f)
            f.flush()
            os.fsync(f.fileno())
    except BaseException:  # a full disk: an empty lock would name no holder, and stop everyone after
        path.unlink(missing_ok=True)
        raise
    return holder


def read_holder(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, ValueError):
        return None  # gone, or its holder is still writing it


def died_here(holder: dict) -> bool:
    if holder.get("host") != socket.gethostname():
        return False
    try:
        os.kill(int(holder["pid"]), 0)
    except ProcessLookupError:
        return True
    except (PermissionError, KeyError, ValueError):
        return False
    return False


def take_over(path: Path, dead: dict) -> bool:
    """Move a dead holder's lock aside; if another process replaced it meanwhile, put that one back."""
    aside = path.with_name(f"{path.name}.stale-{uuid.uuid4().hex[:8]}")
    try:
        os.rename(path, aside)
    except FileNotFoundError:
        return True
    if read_holder(aside) != dead:
        try:
            os.link(aside, path)
        except FileExistsError:
            pass
    aside.unlink(missing_ok=True)
    return True


def describe(holder: dict | None) -> str:
    if holder is None:
        return "another process"
    return f"{holder.get('doing', 'another command')} (pid {holder.get('pid')} on {holder.get('host')}, " \
           f"since {holder.get('since')})"
