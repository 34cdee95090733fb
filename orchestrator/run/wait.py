"""Waiting for submitted arrays to end: squeue polled with a back-off until none of their jobs is queued, then
sacct's final state of each task (accounting lags the controller); the executors that submit to Slurm wait with it
(orchestrator.run.executors). The tasks' own output files cut a back-off's long wait short: once every task has
written its result (or failure row), Slurm is asked at once, not up to half a minute later."""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from bench_contract.run.failure import failure_path
from orchestrator.errors import OrchestratorError
from orchestrator.run.queue import QueueUnreadable, query, sacct_states
from orchestrator.run.sbatch_call import require_command


@dataclass(frozen=True)
class Backoff:
    """The one back-off of every polling loop: the first poll at once, the next after `first` seconds, each
    later wait `factor` times longer, never more than `most` seconds."""

    first: float
    factor: float
    most: float

    def delays(self) -> Iterator[float]:
        delay = self.first
        while True:
            yield delay
            delay = min(delay * self.factor, self.most)

    def rounds(self, woken: Callable[[], bool] | None = None) -> Iterator[int]:
        """Round numbers 0, 1, 2, ... for a polling loop, sleeping the back-off's delay before each but the first;
        the loop breaks (or returns) when its poll says it is done. `woken`, asked every WAKE_CHECK_S of a sleep,
        ends the sleep when it returns True, and the back-off starts again from `first`: what the loop waits for
        has probably happened, and the next polls are the quick ones."""
        delays = self.delays()
        for round_number in itertools.count():
            yield round_number
            if sleep_unless(woken, next(delays)):
                delays = self.delays()

    def polls_within(self, seconds: float) -> int:
        """How many polls the back-off makes in the first `seconds` of a wait."""
        polls, elapsed = 1, 0.0
        for delay in self.delays():
            if elapsed + delay > seconds:
                break
            elapsed += delay
            polls += 1
        return polls


# How often a sleeping poll loop asks its `woken`: a few stats of local or shared files, not a call to Slurm.
WAKE_CHECK_S = 0.5


def sleep_unless(woken: Callable[[], bool] | None, seconds: float) -> bool:
    """Sleep `seconds`, or less when `woken` returns True at one of its checks; say whether it did."""
    if woken is None:
        time.sleep(seconds)
        return False
    end = time.monotonic() + seconds
    while (left := end - time.monotonic()) > 0:
        time.sleep(min(WAKE_CHECK_S, left))
        if woken():
            return True
    return False


class OutputsWritten:
    """A wake-up for a poll loop: True once, when every awaited task has written one of its outputs (its result
    or its failure row) since `since` (default: now), so that the loop asks Slurm at once instead of at the end
    of a back-off's long sleep. A hint only: Slurm's answer still ends the wait, and a task killed before it
    could write (SIGKILL, a node lost) leaves the back-off as it was.

    Outputs are checked in order from the first one not yet seen written, so that a check stats few files."""

    def __init__(self, outputs: Iterable[Iterable[str | os.PathLike[str]]] = (), since: float | None = None):
        self.since = time.time() if since is None else since
        self.fired = False
        self.expect(outputs)

    def expect(self, outputs: Iterable[Iterable[str | os.PathLike[str]]]) -> None:
        """Await these outputs (a group of alternatives per task) instead."""
        self.outputs = [tuple(Path(path) for path in group) for group in outputs]
        self.seen = 0  # outputs[:seen] were written since `since`

    def written(self, group: tuple[Path, ...]) -> bool:
        for path in group:
            try:
                if path.stat().st_mtime >= self.since:
                    return True
            except OSError:
                continue
        return False

    def __call__(self) -> bool:
        if self.fired or not self.outputs:
            return False
        while self.seen < len(self.outputs) and self.written(self.outputs[self.seen]):
            self.seen += 1
        self.fired = self.seen == len(self.outputs)
        return self.fired


def task_outputs(results: Iterable[str]) -> list[tuple[Path, Path]]:
    """For each cell's result path, the two files one of which its task writes when it ends: the result, or the
    failure row."""
    return [(Path(path), failure_path(path)) for path in results]


# Waiting polls squeue after 1 s, then 1.5x longer each time, never more than 30 s apart: quick for short
# campaigns, and about two polls a minute for long ones, so the controller is not hammered.
POLL_FIRST_S, POLL_BACKOFF, POLL_MAX_S = 1.0, 1.5, 30.0
SQUEUE_POLLS = Backoff(POLL_FIRST_S, POLL_BACKOFF, POLL_MAX_S)
# sacct, once squeue has let go of the jobs: quicker at first, since accounting lags the controller by seconds.
SACCT_POLLS = Backoff(0.5, 2.0, 5.0)


class Waited(Protocol):
    """What waiting for Slurm reads of a submission (an executor's Submission), and marks its failures in."""

    job_ids: list[str]
    task_ids: list[str]
    failed: dict[int, str]


def wait_for_slurm(submissions: list[Waited], timeout_s: float | None = None,
                   report: Callable[[str], None] = print, woken: Callable[[], bool] | None = None) -> None:
    """Poll squeue once per round for all jobs of the campaign, backing off (cut short by `woken`, such as
    OutputsWritten of the tasks), until none is queued or running.

    Then ask sacct (when accounting is there) for the final state of every array task, and mark failures.
    """
    job_ids = [job_id for s in submissions for job_id in s.job_ids]
    wait_for_squeue(job_ids, timeout_s, woken)
    states = final_sacct_states(job_ids)
    for sub in submissions:
        for index, task_id in enumerate(sub.task_ids):
            state = states.get(task_id)
            if state is not None and state != "COMPLETED":
                sub.failed[index] = state
    if not states:
        report("sacct gave no states (accounting may be off); check the results folder for each task's rows")


def wait_for_squeue(job_ids: list[str], timeout_s: float | None = None,
                    woken: Callable[[], bool] | None = None) -> None:
    """Return once squeue lists none of the jobs; raise after 5 failed squeue calls in a row (a non-zero exit or
    no answer in time), or after timeout_s."""
    require_command("squeue")
    ids = ",".join(job_ids)
    start, errors = time.monotonic(), 0
    for _ in SQUEUE_POLLS.rounds(woken):
        try:
            proc = query("squeue", ["-h", "-j", ids, "-o", "%i %T"])
            said = proc.stderr.strip() if proc.returncode != 0 else None
        except QueueUnreadable as exc:
            proc, said = None, exc.reason
        if said is None and not proc.stdout.strip():
            return
        if said is not None:
            # Slurm forgets finished jobs after MinJobAge; squeue then calls their ids invalid: they are done.
            if "Invalid job id" in said:
                return
            errors += 1
            if errors >= 5:
                raise OrchestratorError(f"squeue failed {errors} times in a row: {said}")
        else:
            errors = 0
        if timeout_s is not None and time.monotonic() - start > timeout_s:
            raise OrchestratorError(f"jobs {ids} still queued or running after {timeout_s:.0f} s")


# States sacct may still show for a task that squeue no longer lists: accounting lags the controller.
UNSETTLED = {"PENDING", "RUNNING", "COMPLETING", "CONFIGURING", "REQUEUED"}


def final_sacct_states(job_ids: list[str], settle_s: float = 60.0) -> dict[str, str]:
    """sacct's states once none of them is still pending or running (or after settle_s, as they then are)."""
    deadline = time.monotonic() + settle_s
    for _ in SACCT_POLLS.rounds():
        states = sacct_states(job_ids)
        if not UNSETTLED & set(states.values()) or time.monotonic() > deadline:
            break
    return states

