"""tests/helpers.wait_until, by which the suite's tests order their processes: it returns once what it waits for
holds, and fails at once, with the output, when the process it watches ends first, or kills it after its bound so
that reading the output cannot hang the suite."""

import subprocess
import sys
import time

import pytest
from helpers import shell_wait_for, wait_until


def test_it_returns_once_the_condition_holds(tmp_path):
    go = tmp_path / "go"
    proc = subprocess.Popen(["bash", "-c", f"touch {go}; sleep 30"])
    try:
        assert wait_until(lambda: go.exists() and "seen", proc) == "seen"  # the condition's value, for callers
        assert proc.poll() is None  # returned while the process still runs
    finally:
        proc.kill()
        proc.wait()


def test_a_process_that_ends_first_fails_with_its_output():
    proc = subprocess.Popen([sys.executable, "-c", "print('gave up')"], stdout=subprocess.PIPE, text=True)
    with pytest.raises(AssertionError, match="ended first .*gave up"):
        wait_until(lambda: False, proc, seconds=60)


def test_past_its_bound_the_process_is_killed_and_nothing_hangs():
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], stdout=subprocess.PIPE, text=True)
    started = time.monotonic()
    with pytest.raises(AssertionError, match="did not happen within 1 s"):
        wait_until(lambda: False, proc, seconds=1)
    assert proc.returncode is not None and time.monotonic() - started < 30


def test_a_fake_tool_held_by_shell_wait_for_goes_on_when_told(tmp_path):
    go, after = tmp_path / "go", tmp_path / "after"
    proc = subprocess.Popen(["bash", "-c", f"{shell_wait_for(go)}touch {after}"])
    try:
        time.sleep(0.5)
        assert not after.exists()  # held
        go.touch()
        assert proc.wait(timeout=30) == 0 and after.exists()
    finally:
        proc.kill()
