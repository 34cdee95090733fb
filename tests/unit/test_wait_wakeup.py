"""Waiting for Slurm ends within a poll of the tasks' last output, not at the end of a back-off's long sleep.

The back-off (1 s, then 1.5x longer, up to 30 s for --wait and 60 s for watch) keeps the controller from being
hammered, but alone it noticed a job that ended at 80 s only at the poll of 105 s. The tasks' result and failure
files are checked between polls (a stat each), and once every task has written one, Slurm is asked at once.
"""

from __future__ import annotations

import os
import time
from types import SimpleNamespace

import pytest
from helpers import fake_tools, write_result
from test_status import campaign

from orchestrator.run import wait

# The waits under test call a fake squeue and sacct (queue_on_path), as the product calls Slurm's.
pytestmark = pytest.mark.process


class FakeClock:
    """The wait module's clock, advanced only by its sleeps; `at` runs an action once the clock passes its time
    (a task writing its result, Slurm letting go of a job). time() starts at the real time, so that files
    written by the actions are newer than a wait that began at the clock's start."""

    def __init__(self):
        self.now, self.start, self.actions = 0.0, time.time(), []

    def at(self, when: float, action) -> None:
        self.actions.append((when, action))

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        for due in [a for a in self.actions if a[0] <= self.now]:
            self.actions.remove(due)
            due[1]()

    def monotonic(self) -> float:
        return self.now

    def time(self) -> float:
        return self.start + self.now


@pytest.fixture
def clock(monkeypatch):
    fake = FakeClock()
    monkeypatch.setattr(wait, "time", SimpleNamespace(sleep=fake.sleep, monotonic=fake.monotonic, time=fake.time))
    return fake


def test_a_wake_up_cuts_the_sleep_short_and_starts_the_back_off_again(clock):
    woken_at = []

    def woken():
        if clock.now >= 5.0 and not woken_at:
            woken_at.append(clock.now)
            return True
        return False

    rounds = []
    for _ in wait.Backoff(1.0, 1.5, 30.0).rounds(woken):
        rounds.append(clock.now)
        if len(rounds) == 7:
            break
    # Polls at 0, 1, 2.5 and 4.75 s; the sleep to 8.125 is cut at its first check past 5 s (WAKE_CHECK_S apart),
    # then the delays are 1 s and 1.5 s again.
    assert rounds == pytest.approx([0.0, 1.0, 2.5, 4.75, 5.25, 6.25, 7.75])
    assert woken_at == pytest.approx([5.25])


def test_without_a_wake_up_the_back_off_sleeps_whole_delays(clock):
    rounds = []
    for _ in wait.Backoff(1.0, 1.5, 30.0).rounds(lambda: False):
        rounds.append(clock.now)
        if len(rounds) == 5:
            break
    assert rounds == pytest.approx([0.0, 1.0, 2.5, 4.75, 8.125])


def test_outputs_written_is_true_once_when_every_task_has_written_its_result_or_its_failure_row(tmp_path):
    since = time.time()
    first, second = (tmp_path / "a.parquet", tmp_path / "a.failure"), (tmp_path / "b.parquet", tmp_path / "b.failure")
    written = wait.OutputsWritten([first, second], since=since)
    first[1].write_text("an earlier attempt's failure row")
    os.utime(first[1], (since - 10, since - 10))
    second[0].write_text("result")
    assert not written()  # the first task's only file is older than the wait
    first[1].write_text("this attempt's failure row")
    assert written()
    assert not written()  # once: a loop woken again and again would poll Slurm at every check
    assert not wait.OutputsWritten([], since=since)()


def slurm_that_lets_go_at(tmp_path, monkeypatch, clock, written_at: float, gone_at: float) -> None:
    """squeue and sacct on PATH that say the campaign of test_status.campaign runs until `gone_at`; its six
    tasks write their results at `written_at`, a second before they leave the queue (teardown)."""
    gone = tmp_path / "gone"
    tasks = [f"{job}_{i}" for job in (70, 71) for i in range(3)]

    def lines(state: str, sep: str) -> str:
        return " ".join(f"'{task}{sep}{state}'" for task in tasks)

    env = fake_tools(tmp_path / "bin", squeue=f'[ -e "{gone}" ] || printf "%s\\n" {lines("RUNNING", " ")}\n',
                     sacct=f'if [ -e "{gone}" ]; then printf "%s\\n" {lines("COMPLETED", "|")}\n'
                           f'else printf "%s\\n" {lines("RUNNING", "|")}; fi\n')
    monkeypatch.setenv("PATH", env["PATH"])
    folder = tmp_path / "results" / "camp-1"

    def write_results():
        for framework in ("jax", "torch"):
            for index in range(3):
                write_result(folder / "rows" / framework / f"{framework}-{index}.parquet", f"{framework}-{index}")

    clock.at(written_at, write_results)
    clock.at(gone_at, gone.touch)


# The tasks write at 40 s and leave the queue at 41 s: the back-off alone polls at 32.2 s and 49.3 s.
WRITTEN_AT, GONE_AT, BACK_OFF_POLL = 40.0, 41.0, 49.3


def test_watch_ends_within_a_poll_of_the_last_task_leaving_the_queue(tmp_path, monkeypatch, clock):
    from orchestrator.run.status import watch_campaign

    folder = campaign(tmp_path)
    slurm_that_lets_go_at(tmp_path, monkeypatch, clock, WRITTEN_AT, GONE_AT)
    assert watch_campaign(folder, 1.0, report=lambda line: None) == 0
    assert GONE_AT <= clock.now < GONE_AT + 2.5 < BACK_OFF_POLL


def test_wait_ends_within_a_poll_of_the_last_task_leaving_the_queue(tmp_path, monkeypatch, clock):
    from orchestrator.run.executors import executor
    from orchestrator.run.launch import wait_for_jobs
    from orchestrator.run.executors import Submission

    folder = campaign(tmp_path)
    slurm_that_lets_go_at(tmp_path, monkeypatch, clock, WRITTEN_AT, GONE_AT)
    submissions = [Submission("jax", "70", ["70_0", "70_1", "70_2"]),
                   Submission("torch", "71", ["71_0", "71_1", "71_2"])]
    wait_for_jobs(SimpleNamespace(run_by=executor("slurm"), command="main.py --wait"), folder, submissions,
                  report=lambda line: None)
    assert all(not sub.failed for sub in submissions)
    assert GONE_AT <= clock.now < GONE_AT + 2.5 < BACK_OFF_POLL
