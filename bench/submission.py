"""Submitting a 1,000-cell matrix to the local Slurm cluster, and what waiting for it costs.

The cluster is shared, so every job is submitted held (`sbatch --hold`) and cancelled right after it is
counted: none of them ever runs or takes a node from anyone. Cancelling happens in `finally`, whatever fails.

- arrays: the orchestrator's own path, one `sbatch` per framework (split only above MaxArraySize);
- per cell: what a naive tool does, one `sbatch` per cell (the same script, as a one-task array at its offset);
- polling: `wait_for_slurm` on the held campaign, counting its squeue calls and their cost.
"""

from __future__ import annotations

import dataclasses
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from bench.planning import plan
from bench.timing import REPO_ROOT, Result, median_time, seconds

CELLS_PER_FRAMEWORK = 500  # x 2 frameworks = 1,000 cells
QUICK_CELLS_PER_FRAMEWORK, QUICK_POLL_WINDOW_S = 5, 2.0  # --quick: to check that the suite runs
RATIO_TARGET = 20.0
PER_CELL_BUDGET_S = 150.0  # past this, the rest of the per-cell calls are extrapolated (and the table says so)
POLL_WINDOW_S = 6.0


def cluster_unavailable() -> str | None:
    if shutil.which("sbatch") is None or shutil.which("scancel") is None:
        return "no sbatch on PATH"
    ping = subprocess.run(["scontrol", "ping"], capture_output=True, text=True, timeout=30)
    if ping.returncode != 0 or "UP" not in ping.stdout:
        return "the Slurm controller does not answer (set SLURM_CONF; scripts/local_slurm.sh up)"
    return None


def cancel(job_ids: list[str]) -> None:
    for start in range(0, len(job_ids), 500):
        subprocess.run(["scancel", *job_ids[start:start + 500]], capture_output=True, timeout=120)


LEAVE_WAIT_S = 180.0  # MinJobAge (30 s on the local cluster) plus the controller's purge interval, with margin


def wait_until_gone(job_ids: list[str], most_s: float = LEAVE_WAIT_S) -> float | None:
    """Wait until the controller has let go of the cancelled jobs (squeue -t all lists none of them), so that the
    next run finds MaxJobCount free again; returns the seconds waited, None if they were still there at the end."""
    start = time.perf_counter()
    while True:
        proc = subprocess.run(["squeue", "-h", "-t", "all", "-j", ",".join(job_ids), "-o", "%i"],
                              capture_output=True, text=True, timeout=120)
        if (proc.returncode == 0 and not proc.stdout.strip()) or "Invalid job id" in proc.stderr:
            return time.perf_counter() - start
        if time.perf_counter() - start > most_s:
            return None
        time.sleep(5)


def measure(repeats: int, quick: bool = False) -> list[Result]:
    from orchestrator.plan.profile import load_profile
    from orchestrator.run import limits, sbatch_call
    from orchestrator.run.executors import Submission
    from orchestrator.run.executors.slurm import submit_sbatch

    per_framework, window_s = (QUICK_CELLS_PER_FRAMEWORK, QUICK_POLL_WINDOW_S) if quick else (CELLS_PER_FRAMEWORK,
                                                                                              POLL_WINDOW_S)
    cells = 2 * per_framework
    reason = cluster_unavailable()
    if reason:
        return [Result(f"submit {cells:,} cells", "not measured", f">= {RATIO_TARGET:.0f}x", reason)]
    profile = load_profile(REPO_ROOT / "profiles" / "local_slurm.toml")
    profile = dataclasses.replace(profile, extra_sbatch=profile.extra_sbatch + ("--hold",))
    work = Path(tempfile.mkdtemp(prefix="bench-submit-"))
    submitted: list[str] = []
    try:
        plan(work / "r", work / "s", per_framework, dry_run=True, profile=profile)
        scripts = sorted((work / "s").glob("*.sh"))
        assert len(scripts) == 2 and all("#SBATCH --hold" in s.read_text() for s in scripts)
        limit = limits.array_limit(profile)
        held: list[list[Submission]] = []

        def by_arrays():
            subs = [submit_sbatch(s.name.split("_")[0], s, per_framework, limit) for s in scripts]
            held.append(subs)
            submitted.extend(j for sub in subs for j in sub.job_ids)

        arrays_s = median_time(by_arrays, repeats)
        calls_per_submission = sum(len(sub.job_ids) for sub in held[0])
        polling = measure_polling(held[0], window_s)
        cancel(submitted)

        per_cell_calls, start = 0, time.perf_counter()
        for script in scripts:
            for index in range(per_framework):
                if time.perf_counter() - start > PER_CELL_BUDGET_S:
                    break
                submitted.append(sbatch_call.sbatch(script, str(index), options=("--hold", "--array=0-0")))
                per_cell_calls += 1
        per_cell_s = time.perf_counter() - start
        extrapolated = per_cell_calls < cells
        if extrapolated:
            per_cell_s *= cells / per_cell_calls
    finally:
        cancel(submitted)
        shutil.rmtree(work, ignore_errors=True)
    ratio = per_cell_s / arrays_s
    per_cell_note = (f"{per_cell_calls} calls timed, extrapolated to {cells}" if extrapolated
                     else f"{cells} real sbatch calls, measured once")
    rows = [
        Result(f"submit {cells:,} cells: one array per framework", seconds(arrays_s), "", "",
               f"{calls_per_submission} sbatch calls (MaxArraySize {limit}); all held, then cancelled"),
        Result(f"submit {cells:,} cells: one sbatch per cell", seconds(per_cell_s), "", "", per_cell_note),
        Result("speed-up of arrays over one sbatch per cell", f"{ratio:.0f}x", *(("", "") if quick else (
               f">= {RATIO_TARGET:.0f}x", "met" if ratio >= RATIO_TARGET else f"missed ({ratio:.1f}x)")),
               "ratio of the two rows above, same run"),
        *polling,
    ]
    if quick:  # the controller keeps cancelled jobs for MinJobAge (30 s here): a quick run does not wait for that
        return rows
    gone_s = wait_until_gone(submitted) if submitted else 0.0
    return [*rows, Result("cancelled jobs gone from the controller", "not within" if gone_s is None else seconds(gone_s),
                          f"<= {LEAVE_WAIT_S:.0f} s", "missed" if gone_s is None else "met",
                          f"{len(submitted)} held jobs cancelled; waited for, so that the next run finds MaxJobCount "
                          "free")]


def measure_polling(subs, window_s: float) -> list[Result]:
    """Run the real wait loop on the held campaign for a few seconds, counting what it asks Slurm."""
    from orchestrator.errors import OrchestratorError
    from orchestrator.run import queue, wait

    calls: list[tuple[str, float]] = []
    started: list[float] = []  # when each squeue call began, from the start of the wait
    whole_campaign: list[bool] = []  # per squeue call: did it ask for every job of the campaign at once?
    every_job = {job for sub in subs for job in sub.job_ids}
    real_run = queue.subprocess.run

    def counting_run(args, *a, **kw):
        start = time.perf_counter()
        if Path(args[0]).name == "squeue":
            started.append(start - wait_start)
        try:
            return real_run(args, *a, **kw)
        finally:
            calls.append((Path(args[0]).name, time.perf_counter() - start))
            if Path(args[0]).name == "squeue":
                whole_campaign.append(set(args[args.index("-j") + 1].split(",")) == every_job)

    queue.subprocess.run = counting_run  # the wait loop's own calls, counted where it makes them (queue.query)
    wait_start = time.perf_counter()
    try:
        wait.wait_for_slurm(subs, timeout_s=window_s, report=lambda line: None)
    except OrchestratorError:
        pass  # the held jobs never finish: the wait ends at its timeout, as intended here
    finally:
        queue.subprocess.run = real_run
    squeue = [t for name, t in calls if name == "squeue"]
    if not squeue:
        return [Result("status polling", "not measured", "", "wait_for_slurm made no squeue call", failed=True)]
    tasks = sum(len(s.task_ids) for s in subs)
    one = statistics.median(squeue)
    # Each gap at least the back-off's delay (5% slack for timer jitter): no tight loop.
    gaps = [b - a for a, b in zip(started, started[1:])]
    backed_off = all(gap >= 0.95 * min(wait.POLL_FIRST_S * wait.POLL_BACKOFF ** i, wait.POLL_MAX_S)
                     for i, gap in enumerate(gaps))
    return [Result(f"status poll of the {tasks:,}-cell campaign", f"{one * 1000:.0f} ms", "1 call per poll, back-off",
                   "met" if all(whole_campaign) and backed_off else "missed",
                   f"{len(squeue)} squeue calls at {', '.join(f'{t:.1f}' for t in started)} s, each for all "
                   f"{tasks} tasks; back-off "
                   f"{wait.POLL_FIRST_S:.0f} s x{wait.POLL_BACKOFF} up to {wait.POLL_MAX_S:.0f} s: "
                   f"{wait.SQUEUE_POLLS.polls_within(3600)} polls in the first hour")]
