"""One writer at a time, for a campaign or a merged dataset, on the file systems clusters share.

The lock is a file created with O_CREAT | O_EXCL, which is atomic on local disks and on NFS (v3 and later),
Lustre and GPFS, where flock is not dependable. It says who holds it: host, pid, the process's start time and
the machine's boot (so that a reused pid is not taken for the holder), the Slurm job it runs in, since when and
doing what. A lock is stale when its holder is known to be gone:
- a holder on this host whose process is gone (or whose pid now belongs to another process, or which ran before
  the machine restarted);
- a holder in a Slurm job that the queue says has ended (a `--collect-after` job killed at its time limit);
- a file that names no holder (empty or corrupt: its holder was killed between creating and writing it) and has
  stayed so for UNWRITTEN_STALE_S.
A holder on another host outside Slurm cannot be checked from here: the message names it, and the file to
remove if that process is gone.

A stale lock is removed only under a second, short-lived lock (`<lock>.break`), and only if the file is still the
one found stale: of several processes that find it stale at once, one removes it and all then race fairly to
create the next, so there is never more than one holder.
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
from orchestrator.run.queue import job_ended

POLL_S = 0.5
# A holder writes its name within microseconds of creating the file; one that names no holder this long after
# its last change belongs to a process killed in between (a slow file system flushes within seconds).
UNWRITTEN_STALE_S = 30.0
# Breaking a stale lock takes a read and an unlink; a `.break` file this old belongs to a process killed meanwhile.
BREAK_STALE_S = 30.0


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
        seen = snapshot(path)
        if seen is None or (is_stale(path, seen) and break_stale(path, seen)):
            continue  # gone meanwhile, or removed as stale: try to create it again
        other = holder_in(seen)
        if time.monotonic() >= deadline:
            raise OrchestratorError(f"{describe(other)} holds {path}: wait for it to finish, or remove that file "
                                    "if the process is gone")
        if not said:
            print(f"waiting for {describe(other)} (lock {path})", file=sys.stderr)
            said = True
        time.sleep(POLL_S)


def me(doing: str) -> dict:
    """Who takes a lock: enough to tell later whether this process is still alive, here or in Slurm."""
    job = os.environ.get("SLURM_JOB_ID")
    array_job, task = os.environ.get("SLURM_ARRAY_JOB_ID"), os.environ.get("SLURM_ARRAY_TASK_ID")
    return {"host": socket.gethostname(), "pid": os.getpid(), "started": process_start(os.getpid()),
            "boot": boot_id(), "slurm_job": f"{array_job}_{task}" if array_job and task else job,
            "since": time.strftime("%Y-%m-%d %H:%M:%S"), "doing": doing, "token": uuid.uuid4().hex}


def try_create(path: Path, doing: str) -> dict | None:
    holder = me(doing)
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
    seen = snapshot(path)
    return None if seen is None else holder_in(seen)


def snapshot(path: Path) -> tuple[int, int, bytes] | None:
    """The lock file as found (inode, mtime, bytes), or None when there is none: what is judged stale, and
    what must still be there when it is removed."""
    try:
        with open(path, "rb") as f:
            stat = os.fstat(f.fileno())
            return stat.st_ino, stat.st_mtime_ns, f.read()
    except FileNotFoundError:
        return None


def holder_in(seen: tuple[int, int, bytes]) -> dict | None:
    """The holder a lock file names, or None when it names none (empty, or cut short by a kill)."""
    try:
        holder = json.loads(seen[2])
    except ValueError:
        return None
    return holder if isinstance(holder, dict) else None


def is_stale(path: Path, seen: tuple[int, int, bytes]) -> bool:
    holder = holder_in(seen)
    if holder is None:
        return time.time() - seen[1] / 1e9 > UNWRITTEN_STALE_S
    if died_here(holder):
        return True
    job = holder.get("slurm_job")
    if job and holder.get("host") != socket.gethostname():
        return job_ended(str(job))
    return False


def died_here(holder: dict) -> bool:
    """Whether a holder on this host is gone: its pid is free, names another process, or ran before a restart."""
    if holder.get("host") != socket.gethostname():
        return False
    if holder.get("boot") not in (None, boot_id()):
        return True
    try:
        pid = int(holder["pid"])
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except (PermissionError, KeyError, ValueError, TypeError, OverflowError):
        return False
    started = holder.get("started")
    return started is not None and process_start(pid) not in (None, started)


def break_stale(path: Path, seen: tuple[int, int, bytes]) -> bool:
    """Remove the stale lock `seen`, under `<lock>.break`, if the file is still that one. True when the caller
    should try to create the lock again (removed, or already gone), False when another process is breaking it."""
    breaker = path.with_name(f"{path.name}.break")
    try:
        os.close(os.open(breaker, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
    except FileExistsError:
        remove_if_older(breaker, BREAK_STALE_S)
        return False
    try:
        if snapshot(path) == seen:  # no one can replace it meanwhile: only a breaker removes another's lock
            path.unlink(missing_ok=True)
    finally:
        breaker.unlink(missing_ok=True)
    return True


def remove_if_older(path: Path, seconds: float) -> None:
    """Remove a `.break` file left by a process killed while it broke a lock (it is held for milliseconds)."""
    try:
        if time.time() - path.stat().st_mtime > seconds:
            path.unlink(missing_ok=True)
    except FileNotFoundError:
        pass


def process_start(pid: int) -> str | None:
    """When the process started, in clock ticks since boot (field 22 of /proc/<pid>/stat), or None without /proc:
    a pid and this name one process, where a pid alone may since have been given to another."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]  # the fields after the command name start at field 3


def boot_id() -> str | None:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return None


def describe(holder: dict | None) -> str:
    if holder is None:
        return "another process"
    return f"{holder.get('doing', 'another command')} (pid {holder.get('pid')} on {holder.get('host')}, " \
           f"since {holder.get('since')})"
