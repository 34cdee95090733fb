"""One writer at a time: a second holder waits or is refused with who holds the lock; a dead holder's lock
is taken over: one that died here, one whose Slurm job ended, one that never wrote its name; never twice."""

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest
from helpers import fake_queue

from orchestrator.errors import OrchestratorError
from orchestrator.run.file_lock import exclusive


def test_a_second_holder_is_refused_with_the_first_named(tmp_path):
    lock = tmp_path / "camp" / ".lock"
    with exclusive(lock, "collect"):
        with pytest.raises(OrchestratorError, match=r"collect \(pid \d+ on .*\) holds .*\.lock"):
            with exclusive(lock, "collect"):
                pass
    assert not lock.exists()


def test_a_waiting_holder_gets_the_lock_when_the_first_lets_go(tmp_path):
    lock = tmp_path / ".lock"
    order, holding = [], threading.Event()

    def first():
        with exclusive(lock, "first"):
            order.append("first in")
            holding.set()
            time.sleep(1.0)
            order.append("first out")

    thread = threading.Thread(target=first)
    thread.start()
    assert holding.wait(timeout=60)  # the first holds it: the second must wait, however late this thread ran
    with exclusive(lock, "second", wait_s=10):
        order.append("second in")
    thread.join()
    assert order == ["first in", "first out", "second in"]


def test_the_lock_of_a_process_that_died_here_is_taken_over(tmp_path):
    lock = tmp_path / ".lock"
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    lock.write_text(json.dumps({"host": socket.gethostname(), "pid": int(dead.stdout), "doing": "collect"}))
    with exclusive(lock, "collect"):
        assert json.loads(lock.read_text())["doing"] == "collect" and "token" in json.loads(lock.read_text())
    assert not lock.exists()


def test_a_lock_held_on_another_host_is_not_taken_over(tmp_path):
    lock = tmp_path / ".lock"
    lock.write_text(json.dumps({"host": "elsewhere", "pid": 1, "doing": "submit", "since": "today"}))
    with pytest.raises(OrchestratorError, match="submit \\(pid 1 on elsewhere, since today\\)"):
        with exclusive(lock, "submit"):
            pass
    assert lock.exists()


# A lock file that names no holder: its holder was killed between creating and writing it.
def aged(path, seconds):
    old = time.time() - seconds
    os.utime(path, (old, old))
    return path


@pytest.mark.parametrize("content", [b"", b'{"host": "n1", "pi'])
def test_a_lock_that_names_no_holder_is_stale_once_it_has_stayed_so(tmp_path, content):
    from orchestrator.run.file_lock import UNWRITTEN_STALE_S

    lock = tmp_path / ".lock"
    lock.write_bytes(content)
    with pytest.raises(OrchestratorError, match="another process holds"):  # just created: its holder may be writing
        with exclusive(lock, "collect"):
            pass
    aged(lock, UNWRITTEN_STALE_S + 5)
    with exclusive(lock, "collect"):
        assert json.loads(lock.read_text())["doing"] == "collect"
    assert not lock.exists()


def test_a_pid_now_given_to_another_process_or_from_before_a_restart_is_no_holder(tmp_path):
    from orchestrator.run.file_lock import boot_id, process_start

    lock = tmp_path / ".lock"
    me = {"host": socket.gethostname(), "pid": os.getpid(), "doing": "collect", "since": "today"}
    for stale in ({**me, "started": "1", "boot": boot_id()}, {**me, "started": process_start(os.getpid()),
                                                               "boot": "another boot"}):
        lock.write_text(json.dumps(stale))
        with exclusive(lock, "collect"):
            assert json.loads(lock.read_text())["pid"] == os.getpid()
    lock.write_text(json.dumps({**me, "started": process_start(os.getpid()), "boot": boot_id()}))  # alive
    with pytest.raises(OrchestratorError, match="collect \\(pid"):
        with exclusive(lock, "collect"):
            pass


def test_the_lock_of_a_slurm_job_that_ended_is_taken_at_once_and_of_one_that_runs_is_not(tmp_path, monkeypatch):
    """A --collect-after job killed at its time limit on a compute node held the collect lock: before, every
    later collect waited LOCK_WAIT_S (600 s) for it and then refused."""
    lock = tmp_path / ".lock"
    holder = {"host": "node7", "pid": 4242, "slurm_job": "9001", "doing": "collect", "since": "today"}
    lock.write_text(json.dumps(holder))
    monkeypatch.setenv("PATH", fake_queue(tmp_path, squeue=["9001 RUNNING"], sacct=["9001|RUNNING"])[0]["PATH"])
    with pytest.raises(OrchestratorError, match="collect \\(pid 4242 on node7"):
        with exclusive(lock, "collect"):
            pass
    monkeypatch.setenv("PATH", fake_queue(tmp_path, sacct=["9001|TIMEOUT"])[0]["PATH"])
    with exclusive(lock, "collect"):
        assert json.loads(lock.read_text())["host"] == socket.gethostname()


def test_a_command_stopped_by_sigterm_or_sighup_lets_go_of_its_lock(tmp_path):
    """A collect holding its lock, stopped by SIGTERM (Slurm at a time limit, a kill) or SIGHUP (a dropped ssh
    session): the lock goes, and the command says why it stopped, exiting as a shell reports such a signal."""
    from helpers import REPO_ROOT, default_signals

    from orchestrator.results.store import MERGED, lock_path

    holding = ("import sys, time; from orchestrator.results import store\n"
               "def slow(*args):\n    print('holding', flush=True); time.sleep(60)\n"
               "store.new_generation = slow\n"
               "sys.argv = ['main.py', 'collect', '--results-dir', sys.argv[1]]\n"
               "from orchestrator.cli import run; run()\n")
    for signum in (signal.SIGTERM, signal.SIGHUP):
        proc = subprocess.Popen([sys.executable, "-c", holding, str(tmp_path)], cwd=REPO_ROOT, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=default_signals)
        assert proc.stdout.readline() == "holding\n"
        assert lock_path(tmp_path / MERGED).exists()
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 128 + signum and err.endswith(f"error: stopped by {signum.name}\n"), err
        assert not lock_path(tmp_path / MERGED).exists()


RACER = """
import json, os, sys, time
from pathlib import Path
from orchestrator.run.file_lock import exclusive
lock, log, start = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
after_kill, after_rename, late = (float(x) for x in sys.argv[4:7])
def slowed(name, seconds):  # the call, then a pause: how a busy node interleaves the racers
    real = getattr(os, name)
    def call(*args, **kwargs):
        try:
            return real(*args, **kwargs)
        finally:
            time.sleep(seconds)
    setattr(os, name, call)
slowed("kill", after_kill)  # the liveness check of the holder it found
slowed("rename", after_rename)
Path(f"{start}.ready.{os.getpid()}").touch()
while not start.exists():
    time.sleep(0.001)
time.sleep(late)
with exclusive(lock, "race", wait_s=30):
    with open(log, "a") as f:
        f.write(f"in {os.getpid()}\\n")
    time.sleep(1.0)
    with open(log, "a") as f:
        f.write(f"out {os.getpid()}\\n")
"""
# The interleaving that left two holders (seconds after the start): A and B both find the dead holder's lock; A
# checks it first (0.1), takes it over and holds the lock; B, its check done (0.3), moved A's live lock aside to
# look at it and put it back (0.3 to 1.0), and C, which came at 0.2 and waits, polled in between and took it.
ROLES = {"A": (0.1, 0.0, 0.0), "B": (0.3, 0.7, 0.0), "C": (0.0, 0.0, 0.2)}


def test_three_processes_racing_over_a_stale_lock_hold_it_one_at_a_time(tmp_path):
    from helpers import REPO_ROOT, wait_until

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    lock, log, start = tmp_path / ".lock", tmp_path / "log", tmp_path / "start"
    lock.write_text(json.dumps({"host": socket.gethostname(), "pid": int(dead.stdout), "doing": "collect"}))
    racers = [subprocess.Popen([sys.executable, "-c", RACER, str(lock), str(log), str(start), *map(str, delays)],
                               cwd=REPO_ROOT) for delays in ROLES.values()]
    wait_until(lambda: len(list(tmp_path.glob("start.ready.*"))) == len(racers))  # all three wait for the start
    start.touch()
    assert [racer.wait(timeout=60) for racer in racers] == [0, 0, 0]
    lines = log.read_text().split()
    events = list(zip(lines[::2], lines[1::2]))
    assert [kind for kind, _ in events] == ["in", "out"] * 3, events  # never two holders at once
