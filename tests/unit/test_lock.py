"""One writer at a time: a second holder waits or is refused with who holds the lock; a dead holder's lock
is taken over."""

import json
import subprocess
import sys
import threading
import time

import pytest

from orchestrator.errors import OrchestratorError
from orchestrator.lock import exclusive


def test_a_second_holder_is_refused_with_the_first_named(tmp_path):
    lock = tmp_path / "camp" / ".lock"
    with exclusive(lock, "collect"):
        with pytest.raises(OrchestratorError, match=r"collect \(pid \d+ on .*\) holds .*\.lock"):
            with exclusive(lock, "collect"):
                pass
    assert not lock.exists()


def test_a_waiting_holder_gets_the_lock_when_the_first_lets_go(tmp_path):
    lock = tmp_path / ".lock"
    order = []

    def first():
        with exclusive(lock, "first"):
            order.append("first in")
            time.sleep(1.0)
            order.append("first out")

    thread = threading.Thread(target=first)
    thread.start()
    time.sleep(0.2)
    with exclusive(lock, "second", wait_s=10):
        order.append("second in")
    thread.join()
    assert order == ["first in", "first out", "second in"]


def test_the_lock_of_a_process_that_died_here_is_taken_over(tmp_path):
    lock = tmp_path / ".lock"
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    import socket
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
