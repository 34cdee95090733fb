"""Where every cell of a campaign stands: pending, running, completed, failed, timed out, cancelled, or
finished without a result.

One `sacct` and one `squeue` call per campaign, never one per cell. The queue is read first: a cell whose latest
task is queued or running is pending or running, even where an earlier run left a result. Otherwise a readable
result file is the final word for success (bench_contract.results.result_problem, the definition collect reads by:
an empty, truncated, damaged or foreign file is a "bad result", not a success). A cell whose task ended but left no
result is reported as such, with the reason its failure row gives (bench_contract.run.failure), else Slurm's state,
else "no result", and the end of its log. When squeue or sacct cannot be read, a submitted cell that could still be
queued is "unknown", never "not queued".
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from bench_contract.results import read_task_file
from bench_contract.results import result_problem as readable_result_problem
from bench_contract.run.driver import step_name
from bench_contract.run.failure import failure_path, read_failure
from bench_contract.sequential import not_needed_reason
from orchestrator.errors import OrchestratorError, UsageError
from orchestrator.plan.manifest import ArrayRecord, CellEntry, Manifest, is_past, load_manifest
from orchestrator.plan.profile import device_matches, expected_devices
from orchestrator.run.progress import progress_lines, text_bar
from orchestrator.run.queue import ACTIVE, SLURM_STATE_NAMES, QueueUnreadable, read_sacct, read_squeue, read_steps
from orchestrator.run.executors import EXECUTORS
from orchestrator.run.executors.base import log_tail
from orchestrator.run.executors.local import is_slurm_task
from orchestrator.run.executors.slurm import array_expression
from orchestrator.run.wait import POLL_BACKOFF, Backoff, OutputsWritten, task_outputs
from orchestrator.run.waiting_times import watch_accounting_lag_s, watch_unreadable_s
from orchestrator.suggest import command
from orchestrator.tables import format_table

SUCCESS = "completed"
# A trial of a --trials auto pair that its sequential rule left out: the pair had enough trials without it.
NOT_NEEDED = "not needed"
DONE = (SUCCESS, NOT_NEEDED)  # nothing left to run
UNKNOWN = "unknown"  # submitted, and the queue could not be read: it may still be queued or running
UNSETTLED = (*ACTIVE, UNKNOWN)  # not ended, or not known to have ended
# The exit code of a command that stops while some cells are UNSETTLED: status and watch with cells whose state is
# unknown, collect with cells still queued, running or unknown (its results are partial). It tells a script "not
# over yet" apart from "ended without a result" (1, watch's) and bad input (2).
EXIT_UNSETTLED = 3


class StateUnknown(OrchestratorError):
    """Some cells may still be queued or running, and squeue or sacct could not say: `status` ends with this
    after its table, and `watch` once the queue has stayed unreadable for watch_unreadable_s()."""

    exit_code = EXIT_UNSETTLED
NO_FILE = "no file"  # result_problem's word for a result that was never written
# A task that neither queue nor accounting lists, without a result or a failure row.
NOT_RECORDED = "the task is not queued and wrote no result"


@dataclass(frozen=True)
class CellStatus:
    framework: str
    array_index: int
    cell_id: str
    task_id: str
    state: str  # one of: not submitted, pending, running, completed, not needed, failed, timed out, cancelled, no result, unknown
    detail: str  # the Slurm state and the failure row's reason, as reported
    log: str = ""  # the task's log file, where there is one
    script: str = ""  # the key of the script and submission that run it (the framework, or "paired")
    bad_result: str = ""  # why the result file there cannot count (empty, truncated, foreign), where one is there
    results: str = ""  # the cell's result path
    trial: int = 0  # which run of the cell (--trials); each trial is its own task, or a step of a paired task
    system: str = ""  # the profile's system it runs on ("": the profile's own values)

    @property
    def ended_without_result(self) -> bool:
        return self.state not in (*UNSETTLED, *DONE, "not submitted")


def queue_states(job_ids: list[str]) -> tuple[dict[str, str], str]:
    """(array task id -> Slurm state, "") from one sacct and one squeue call, squeue's word last; or ({}, why)
    when either cannot be read, so that no cell is taken for "not queued" on a failed call."""
    if not job_ids:
        return {}, ""
    try:
        # sacct knows finished tasks; squeue knows queued ones (and is the only source without accounting).
        return {**read_sacct(job_ids), **read_squeue(job_ids)}, ""
    except QueueUnreadable as exc:
        return {}, str(exc)


# A result file's verdict, kept while the file is unchanged: watch asks every poll, and reading a file is not free.
_VERDICTS: dict[str, tuple[tuple[int, int, int], str | None]] = {}


def result_problem(path: str) -> str | None:
    """None when the cell's result file is there and readable, NO_FILE when there is none, else why it cannot count."""
    try:
        stat = os.stat(path)
    except OSError:
        return NO_FILE
    key = (stat.st_mtime_ns, stat.st_size, stat.st_ino)
    known = _VERDICTS.get(path)
    if known is None or known[0] != key:
        known = _VERDICTS[path] = (key, readable_result_problem(path))
    return known[1]


def device_note(cell: CellEntry, expect: str | None) -> str:
    """For a cell whose system expects a device (its `expect`), what its result says when it ran on another one:
    a constraint the site ignored. Only such cells' files are read (one column)."""
    if expect is None:
        return ""
    model = read_task_file(cell.results).value("device_model")
    if device_matches(expect, model):
        return ""
    return f"; ran on {model!r}, not on system {cell.system}'s device ({expect!r}): check its constraint"


def reran_jobs(manifest: Manifest) -> set[str]:
    """The job ids of resubmissions that ran completed cells again (--rerun-completed)."""
    return {job for r in manifest.resubmissions if r.rerun_completed for job in r.job_ids}


def pack_steps(manifest: Manifest, states: dict[str, str], packed: set[str]) -> dict[str, tuple[str, str]]:
    """The job steps (by name: step id, state) of the pack tasks that are queued or running, from one sacct call:
    inside a running pack, each run is a step of its own (bench_contract.run.driver). Empty where there is none, or
    sacct cannot say (the cells then show their pack's state)."""
    active = [task for key in packed if key in manifest.submissions for task in manifest.submissions[key].task_ids
              if SLURM_STATE_NAMES.get(states.get(task, "")) in ACTIVE]
    try:
        return read_steps(active)
    except QueueUnreadable:
        return {}


def in_pack(step: tuple[str, str] | None, pack_state: str) -> tuple[str, str]:
    """(state, detail) of a run without a result inside a pack that is queued or running: running while its step
    runs, pending before it starts; a step that ended without a result leaves it running, as its pack is, so that
    resubmit does not start the pack again beside itself (the pack's next job runs it once this one has ended)."""
    if SLURM_STATE_NAMES[pack_state] == "pending":
        return "pending", f"{pack_state}: its pack waits in the queue"
    if step is None:
        return "pending", f"its pack is {pack_state}; this run has not started"
    step_id, state = step
    if state == "RUNNING":
        return "running", f"step {step_id} RUNNING in its pack"
    return "running", f"step {step_id} {state} without a result; its pack is {pack_state}"


def campaign_status(folder: Path) -> list[CellStatus]:
    manifest = load_manifest(folder)
    states, unreadable = queue_states(manifest.slurm_job_ids())
    packed = {key for key, entry in manifest.scripts.items() if entry.pack}
    steps = pack_steps(manifest, states, packed) if packed and not unreadable else {}
    reran = reran_jobs(manifest) if unreadable else set()
    expected = expected_devices(manifest.profile)
    lost = manifest.lost_arrays()
    cells = []
    for cell in manifest.cells:
        framework, index, script = cell.framework, cell.array_index, cell.script
        sub = manifest.submissions.get(script)  # a paired script runs both frameworks
        task_id = sub.task_ids[index] if sub else ""
        problem = result_problem(cell.results)
        bad = problem if problem not in (None, NO_FILE) else ""
        slurm_state = states.get(task_id)
        active = SLURM_STATE_NAMES.get(slurm_state or "") in ACTIVE
        found = {"script": script, "bad_result": bad, "results": cell.results, "trial": cell.trial,
                 "system": cell.system}
        if unreadable and is_slurm_task(task_id) and (
                problem is not None or task_id.rsplit("_", 1)[0] in reran):
            # No result, or a result that a queued run of --rerun-completed may replace: it may still be queued.
            cells.append(CellStatus(framework, index, cell.cell_id, task_id, UNKNOWN, unreadable, **found))
            continue
        skipped = not_needed_reason(cell.results) if problem == NO_FILE else None
        if skipped:
            cells.append(CellStatus(framework, index, cell.cell_id, task_id, NOT_NEEDED, skipped, **found))
            continue
        # A pack's run that ended keeps its result while the pack runs on: the pack's driver never runs it again.
        if problem is None and (not active or script in packed):
            detail = "result written" + device_note(cell, expected.get(cell.system))
            cells.append(CellStatus(framework, index, cell.cell_id, task_id, SUCCESS, detail, **found))
            continue
        if (script, index) in lost:  # before "not submitted": the array may be queued under a job id never heard
            cells.append(CellStatus(framework, index, cell.cell_id, task_id, UNKNOWN,
                                    lost_answer(lost[script, index]), **found))
            continue
        log = str(log_path(folder, manifest, script, index, task_id) or "")  # looked up for the rest only
        failure = read_failure(failure_path(cell.results)) if sub else None
        reason = failure["failure_reason"] if failure else None
        if not task_id:  # never submitted, or refused (a resubmission refused leaves its cells' ids empty)
            state, detail = "not submitted", manifest.submission_error or ("dry run" if manifest.dry_run else "")
        elif active and script in packed:
            state, detail = in_pack(steps.get(step_name(
                {"framework": framework, "cell_id": cell.cell_id, "trial": cell.trial})), slurm_state)
        elif active:
            # Queued again (resubmitted, rerun or requeued): a failure row or a result is the previous attempt's.
            state = SLURM_STATE_NAMES[slurm_state]
            detail = "; ".join(filter(None, [slurm_state, reason and f"previous attempt: {reason}",
                                             problem is None and "a result of an earlier run is there",
                                             bad and f"bad result of an earlier run: {bad}"]))
        elif bad:
            # Empty, truncated or foreign: it is not a result. resubmit moves it aside and runs the cell again.
            state, detail = "failed", f"bad result: {bad}" + (f" ({slurm_state})" if slurm_state else "")
        elif index in (sub.failed or {}):
            state, detail = "failed", "; ".join(filter(None, [sub.failed[index].splitlines()[0], reason]))
        elif slurm_state is not None:
            reason = reason or slurm_memory_kill(log)
            state = SLURM_STATE_NAMES.get(slurm_state, "no result" if slurm_state == "COMPLETED" else slurm_state.lower())
            detail = slurm_state + (f": {reason}" if reason else ", but no result file" if state == "no result" else "")
        elif failure is not None:
            state, detail = ("failed" if failure["status"] == "failed" else "cancelled"), reason
        else:
            state, detail = "no result", NOT_RECORDED
        cells.append(CellStatus(framework, index, cell.cell_id, task_id, state, detail, log, **found))
    return cells


# What slurmstepd writes into a task's log when Slurm kills it for its memory: over its request, found by
# polling (JobAcctGatherParams=OverMemoryKill), or by the cgroup's out-of-memory handler (task/cgroup). Either
# way the task gets SIGKILL and cannot write a failure row, so these lines are the only witness.
MEMORY_KILL = re.compile(r"slurmstepd.*?: error: (?:StepId=\S+ exceeded memory limit \((\d+) > (\d+)\)"
                         r"|Detected \d+ oom-kill event)")


def slurm_memory_kill(log: str) -> str | None:
    """The failure reason for a task that Slurm killed for its memory, from the end of its log; else None."""
    for line in reversed(log_tail(log)):
        match = MEMORY_KILL.search(line)
        if match and match.group(1):
            used, limit = (int(g) / 2**20 for g in match.groups())
            return (f"out of memory: Slurm killed the task, {used:.0f} MiB used against the {limit:.0f} MiB it "
                    "asked for (the profile's mem)")
        if match:
            return "out of memory: Slurm's cgroup out-of-memory handler killed the task"
    return None


def log_path(folder: Path, manifest: Manifest, script_key: str, index: int, task_id: str) -> Path | None:
    """The task's output file, named as the executor that ran it names its logs (Executor.log_name: sbatch's and
    the local executor's <job name>_<task id>.out, submitit's <job name>_submitit_<index>.out); None when it is
    not there."""
    script = manifest.scripts.get(script_key)
    if not script or not task_id:
        return None
    for name in dict.fromkeys(e.log_name(script.job_name, task_id, index) for e in EXECUTORS.values()):
        path = folder / "logs" / name
        if path.is_file():
            return path
    return None


def summary(cells: list[CellStatus]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for cell in cells:
        counts[cell.state] = counts.get(cell.state, 0) + 1
    return counts


def progress_bar(cells: list[CellStatus], width: int = 30) -> str:
    done = sum(1 for c in cells if c.state not in UNSETTLED)
    counts = ", ".join(f"{n} {state}" for state, n in sorted(summary(cells).items()))
    return f"{text_bar(done, len(cells), width)} {done}/{len(cells)} ended ({counts})"


def is_active(cells: list[CellStatus]) -> bool:
    """Whether any cell is still queued or running, or may be (unknown)."""
    return any(c.state in UNSETTLED for c in cells)


def awaiting_record(cells: list[CellStatus]) -> bool:
    """Whether a cell's Slurm task has left the queue without a record in accounting yet (none for the local
    executor's tasks, which Slurm never knew)."""
    return any(c.detail == NOT_RECORDED and is_slurm_task(c.task_id) for c in cells)


@dataclass
class AccountingWait:
    """How long watch has waited, with every cell ended, for Slurm's accounting to record a task that left the
    queue (accounting lags the controller), and how long it allows (`lag_s`)."""

    since: float | None = None
    lag_s: float = field(default_factory=watch_accounting_lag_s)

    def over(self, cells: list[CellStatus], now: float) -> bool:
        """Whether watch may stop at time `now`: no cell active, and no task awaiting its record, or the
        lag_s it allows over."""
        if is_active(cells):
            self.since = None  # a cell active again (resubmitted while watched) waits anew once it has ended
            return False
        self.since = now if self.since is None else self.since
        return not awaiting_record(cells) or now - self.since >= self.lag_s


LOST = "the answer to its array's submission was lost"
THEIR_LOST = "the answer to their array's submission was lost"  # LOST, said of several cells


def lost_answer(entry: ArrayRecord) -> str:
    """The detail of a cell whose array's submission is unknown."""
    wait = "" if not entry.answer_by or is_past(entry.answer_by) else \
        f"; its sbatch may still be accepted until {entry.answer_by}, so run the same command again after that"
    return (f"{LOST} ({entry.reason or 'no reason recorded'}){wait}; it is looked up in Slurm by its job name "
            f"{entry.job_name!r} before anything is submitted again")


def unknown_note(cells: list[CellStatus]) -> str | None:
    """One sentence for the cells whose state is unknown, naming the failed command; None when there are none."""
    unknown = [c for c in cells if c.state == UNKNOWN]
    return unknown_sentence(len(unknown), unknown[0].detail) if unknown else None


def unknown_sentence(count: int, detail: str) -> str:
    """unknown_note's sentence for `count` cells whose state is unknown, the first of them with this detail."""
    if detail.startswith(LOST):  # the detail says why already: said once, for the cells
        return f"{count} cells may still be queued or running, and {THEIR_LOST}{detail.removeprefix(LOST)}"
    return f"{count} cells may still be queued or running, and the queue could not be read ({detail})"


# --- the status and watch commands -----------------------------------------------------------------------

def show_status(results_dir: Path, folder: Path, log_lines: int,
                report: Callable[[str], None] = print, every_task: bool = False) -> None:
    """Report every cell of the campaign in `folder` (orchestrator.plan.campaign_folders finds it), the trials of a
    cell that are in the same state on one line unless `every_task`, then the end of the log of each cell that ended
    without a result, the count of each state, and how to submit those cells again."""
    cells = campaign_status(folder)
    report(f"campaign {folder.name}{campaign_shape(cells)}")
    report(status_table(cells, every_task))
    shown = Shown.of(cells)
    for c in cells:
        if c.ended_without_result and log_lines > 0:
            for line in ended_lines(c, log_lines, shown):
                report(line)
    report(progress_bar(cells))  # last but the advice: the summary of the lines above
    missing = sum(c.ended_without_result for c in cells)
    if missing:
        report(f"\n{missing} cells ended without a result; submit only those again with: "
               f"{command('resubmit', folder.name, results_dir=results_dir)}")
    note = unknown_note(cells)
    if note:
        raise StateUnknown(f"{note}; their state is unknown, and resubmit submits nothing until it can be read")


@dataclass(frozen=True)
class Shown:
    """Which of a cell's coordinates beyond framework, index and id tell its tasks apart, and so are shown: the
    trial where the campaign runs several, the system where it runs on several."""

    trials: bool
    systems: bool

    @classmethod
    def of(cls, cells: list[CellStatus] | list[CellEntry]) -> Shown:
        """For a campaign's cells: its CellStatus, or its manifest's CellEntry."""
        return cls(any(c.trial for c in cells), len({c.system for c in cells}) > 1)

    def name(self, cell: CellStatus) -> str:
        """`jax 3 (cell)`, with its trial and system where they are shown: `jax 3 (cell, trial 2, system a100)`."""
        return self.name_of(cell.framework, cell.array_index, cell.cell_id, cell.trial, cell.system)

    def name_of(self, framework: str, array_index: int, cell_id: str, trial: int, system: str) -> str:
        more = [f"trial {trial}"] * self.trials + [f"system {system or '-'}"] * self.systems
        return f"{framework} {array_index} ({', '.join([cell_id, *more])})"


def campaign_shape(cells: list[CellStatus]) -> str:
    """What the lines below count, where a run is not simply a cell: `: 48 cells x 5 trials = 240 runs` (each run
    its own task, or a step of a paired task), `on systems a100, h100`; "" for one trial on one system."""
    shown = Shown.of(cells)
    parts = []
    if shown.trials:
        ids = {(c.system, c.cell_id) for c in cells}
        parts.append(f"{len(ids)} cells x {max(c.trial for c in cells) + 1} trials = {len(cells)} runs")
    if shown.systems:
        parts.append("on systems " + ", ".join(sorted({c.system or "-" for c in cells})))
    return ": " + " ".join(parts) if parts else ""


def status_table(cells: list[CellStatus], every_task: bool = False) -> str:
    """One line per task (`every_task`), or per run of consecutive trials of a cell in the same state with the same
    detail in the same job: their indices, trials and task ids as ranges, as squeue writes an array's pending tasks
    (`70_[0-4]`). The trial and system columns are there where they tell tasks apart (Shown)."""
    shown = Shown.of(cells)
    headers = ["framework", *["system"] * shown.systems, "index", "cell", *["trial"] * shown.trials, "task", "state",
               "detail"]
    rows = []
    for run in ([c] for c in cells) if every_task else same_state_runs(cells):
        first = run[0]
        rows.append([first.framework, *[first.system or "-"] * shown.systems,
                     array_expression([c.array_index for c in run]), first.cell_id,
                     *[array_expression([c.trial for c in run])] * shown.trials, task_range(run), first.state,
                     first.detail])
    return format_table(headers, rows)


def job_of(task_id: str) -> str:
    """The job part of a task id: 70 of 70_3 (a plain job's id is its own)."""
    return task_id.rsplit("_", 1)[0]


def same_state_runs(cells: list[CellStatus]) -> list[list[CellStatus]]:
    """The cells in order, consecutive trials of one cell with the same state, detail and job put together."""
    runs: list[list[CellStatus]] = []
    for cell in cells:
        last = runs[-1][-1] if runs else None
        if last is not None and cell.trial == last.trial + 1 and (
                cell.script, cell.framework, cell.system, cell.cell_id, cell.state, cell.detail,
                job_of(cell.task_id)) == (last.script, last.framework, last.system, last.cell_id, last.state,
                                          last.detail, job_of(last.task_id)):
            runs[-1].append(cell)
        else:
            runs.append([cell])
    return runs


def task_range(run: list[CellStatus]) -> str:
    """The task ids of a run of cells of one job: one id (a paired task runs every trial), or the job's array
    tasks as squeue writes them, `70_[0-2,4]`."""
    ids = list(dict.fromkeys(c.task_id for c in run))
    numbers = [task_id.rsplit("_", 1)[-1] for task_id in ids]
    if len(ids) == 1 or not all("_" in task_id for task_id in ids) or not all(n.isdigit() for n in numbers):
        return ",".join(ids)
    return f"{job_of(ids[0])}_[{array_expression([int(n) for n in numbers])}]"


def ended_lines(cell: CellStatus, log_lines: int, shown: Shown = Shown(False, False)) -> list[str]:
    """A cell that ended without a result: its state and reason, then the end of its log."""
    tail = log_tail(cell.log, log_lines)
    return [f"\n--- {shown.name(cell)}: {cell.state}: {cell.detail}",
            f"  end of {cell.log}:" if tail else "  (no log)", *(f"  | {line}" for line in tail)]


# Watching polls every `interval` seconds at first, backing off like waiting for Slurm, to a minute apart.
WATCH_MAX_S = 60.0
WATCH_MIN_S = 0.01  # --interval's least: a first poll every 10 ms, backing off


def check_interval(interval: float) -> None:
    """watch's --interval: from WATCH_MIN_S to WATCH_MAX_S seconds (the back-off's longest wait), so that nan, inf,
    0, a negative number or a flood of polls never reach the loop."""
    if not WATCH_MIN_S <= interval <= WATCH_MAX_S:  # false for nan too
        raise UsageError(f"--interval takes seconds from {WATCH_MIN_S:g} to {WATCH_MAX_S:g} (watch backs off to "
                         f"a minute between polls), not {interval:g}")


def watch_campaign(folder: Path, interval: float,
                   report: Callable[[str], None] = print, warn: Callable[[str], None] = print) -> int:
    """Report the campaign's progress until none of its cells is active (one sacct, and squeue, call per poll for
    the whole campaign), then warn of each cell that did not complete. Returns the exit code: 1 if any did not.
    Cells whose state is unknown are not ended: watch polls on, and raises StateUnknown (exit 3) only once the
    queue has stayed unreadable for watch_unreadable_s()."""
    check_interval(interval)
    report(f"campaign {folder.name}")
    unreadable_since = None  # when the queue last became unreadable, while it stays so
    records = AccountingWait()
    unreadable_limit_s = watch_unreadable_s()
    woken = OutputsWritten()  # the outputs of the cells active at the first poll, once it has been made
    for round_number in Backoff(interval, POLL_BACKOFF, WATCH_MAX_S).rounds(woken):
        cells = campaign_status(folder)
        if round_number == 0:
            woken.expect(task_outputs(c.results for c in cells if c.state in UNSETTLED))
        report(progress_bar(cells))
        # Each running cell's own progress, from the heartbeat its task writes (never from its log).
        for line in progress_lines([c for c in cells if c.state == "running"]):
            report(f"  {line}")
        note = unknown_note(cells)
        if note and unreadable_since is None:
            unreadable_since = time.monotonic()
            warn(f"{note}; watch goes on polling, for up to {unreadable_limit_s:.0f} s while it stays so")
        elif not note:
            unreadable_since = None
        if note and time.monotonic() - unreadable_since >= unreadable_limit_s:
            raise StateUnknown(f"campaign {folder.name}: {note} for {unreadable_limit_s:.0f} s; watch stops here")
        if records.over(cells, time.monotonic()):  # unknown cells are active: watch never stops on them
            break
    unfinished = [c for c in cells if c.state not in DONE]
    shown = Shown.of(cells)
    for c in unfinished:
        warn(f"{shown.name(c)}: {c.state}: {c.detail}")
    return 1 if unfinished else 0
