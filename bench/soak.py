"""The soak of "nothing run twice" (#30): for SOAK_S (ten minutes), random launches, resubmits, collects, status
calls and readers of the merged dataset in one results folder on the local cluster, with random kills (SIGINT,
SIGTERM, SIGHUP, SIGKILL) of the commands and a queue whose squeue and sacct fail one call in five. Then, with the
queue reliable again, the campaigns are completed (resubmit --wait) and collected, and three things are counted:
- by Slurm's accounting (sacct), how often each cell's task started: exactly once per cell and trial;
- in the merged dataset, each cell and trial once, and every cell there;
- the readers' failures: none.
Tasks run the stand-in backend (bench/standin_backend.py), a second of CPU each, so the soak tests the
orchestrator, not a framework. `python -m bench --only soak`; SOAK_S sets its length.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

from bench.standin_backend import standin_env
from bench.submission import cluster_unavailable
from bench.timing import REPO_ROOT, Result

SOAK_S = float(os.environ.get("SOAK_S", "600"))
QUICK_SOAK_S = 5.0  # --quick: to check that the suite runs
QUEUE_FAILS_ONE_IN = 5
KILL_CHANCE = 0.3  # of each command, killed after a random moment of its first KILL_WITHIN_S
KILL_WITHIN_S = 3.0
SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGKILL)
# The commands that plan campaigns: digits, JAX, use case 1; each again and again, so that most runs resubmit.
COMMANDS = (("--batch-sizes", "8,16"), ("--batch-sizes", "32,64,128"), ("--batch-sizes", "8", "--trials", "3"))
SETTLE_ROUNDS = 8


class Soak:
    """One results folder, the commands run on it, and what they did."""

    def __init__(self, work: Path, seed: int) -> None:
        self.work, self.random = work, random.Random(seed)
        self.results, self.scripts = work / "results", work / "scripts"
        standin_env(work / "envs")
        self.profile = work / "profile.toml"
        self.profile.write_text((REPO_ROOT / "profiles" / "local_slurm.toml").read_text()
                                + f'\nenv_dir = "{work / "envs"}"\n')
        self.reliable = dict(os.environ)
        self.flaky = {**os.environ, "PATH": f"{flaky_queue(work / 'flaky')}:{os.environ['PATH']}"}
        self.ran: Counter = Counter()
        self.killed: Counter = Counter()
        self.lock = threading.Lock()

    def cli(self, *args: str, env: dict | None = None, kill: bool = False) -> int:
        """`python main.py ARGS` (the results and scripts folders added); with `kill`, it may be killed."""
        command = [sys.executable, str(REPO_ROOT / "main.py"), *args]
        if args and args[0].startswith("--"):
            command += ["--profile", str(self.profile), "--scripts-dir", str(self.scripts)]
        command += ["--results-dir", str(self.results)]
        proc = subprocess.Popen(command, cwd=REPO_ROOT, env=env or self.flaky, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, start_new_session=True)
        with self.lock:
            self.ran[args[0]] += 1
            chosen = self.random.choice(SIGNALS) if kill and self.random.random() < KILL_CHANCE else None
            when = self.random.uniform(0, KILL_WITHIN_S)
        try:
            return proc.wait(timeout=when) if chosen else proc.wait(timeout=600)
        except subprocess.TimeoutExpired:
            proc.send_signal(chosen)
            with self.lock:
                self.killed[chosen.name] += 1
            return proc.wait(timeout=600)

    def launch(self) -> None:
        args = self.random.choice(COMMANDS)
        self.cli("--benchmark", "digits", "--use-case", "1", "--frameworks", "jax", "--synthetic", *args, kill=True)

    def act(self, step, until: float) -> None:
        while time.monotonic() < until:
            step()

    def campaigns(self) -> list[Path]:
        return sorted(manifest.parent for manifest in self.results.glob("*/manifest.json"))

    def manifests(self) -> dict[str, dict]:
        """Each campaign's manifest as it is now, by campaign name."""
        from orchestrator.plan.campaign import load_manifest

        return {folder.name: load_manifest(folder) for folder in self.campaigns()}


def flaky_queue(folder: Path) -> Path:
    """squeue and sacct that fail one call in QUEUE_FAILS_ONE_IN, as a controller that times out does."""
    folder.mkdir(parents=True)
    for name in ("squeue", "sacct"):
        real = shutil.which(name)
        (folder / name).write_text(
            f"#!/bin/bash\nif [ $((RANDOM % {QUEUE_FAILS_ONE_IN})) -eq 0 ]; then\n"
            f"  echo '{name}: error: Socket timed out on send/recv operation' >&2; exit 1\nfi\nexec {real} \"$@\"\n")
        (folder / name).chmod(0o755)
    return folder


READER = """
import sys, time
from pathlib import Path
from orchestrator.results.report import read_merged
from orchestrator.results.views import summary_frame
merged, until = Path(sys.argv[1]), time.monotonic() + float(sys.argv[2])
reads = failures = 0
while time.monotonic() < until:
    if not merged.exists():
        time.sleep(0.5)
        continue
    for read in (summary_frame, read_merged):
        reads += 1
        try:
            read(merged)
        except Exception as exc:
            failures += 1
            print(f"{read.__name__}: {type(exc).__name__}: {exc}", file=sys.stderr)
print(reads, failures)
"""


def soak(work: Path, seconds: float, seed: int = 0) -> dict:
    """Run the soak in `work`; returns its figures."""
    run = Soak(work, seed)
    started = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(time.time() - 60))  # sacct -S reads local time
    until = time.monotonic() + seconds
    reader = subprocess.Popen([sys.executable, "-c", READER, str(run.results / "merged.parquet"), str(seconds)],
                              cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    steps = [run.launch, run.launch,
             lambda: run.cli("resubmit", kill=True) if run.campaigns() else time.sleep(1),
             lambda: run.cli("collect", kill=True),
             lambda: (run.cli("status"), time.sleep(1))]
    actors = [threading.Thread(target=run.act, args=(step, until)) for step in steps]
    for actor in actors:
        actor.start()
    for actor in actors:
        actor.join()
    reads, failures = map(int, reader.communicate(timeout=600)[0].split())
    unfinished = settle(run)
    manifests = run.manifests()  # as the soak left them: read once for the three counts
    runs, unrecorded = task_starts(run, manifests, started)
    merged = merged_runs(run, manifests)
    cells = {(name, cell["array_index"]) for name, manifest in manifests.items() for cell in manifest["cells"]}
    never = sorted(cells - set(runs))
    if never:  # what sacct and the manifests say of them, to look into
        print(f"soak: cells no task of which started, by sacct: {never}\n{sacct_lines(run, started)}",
              file=sys.stderr)
    return {"campaigns": len(manifests), "cells": len(cells), "commands": dict(run.ran),
            "killed": dict(run.killed), "unfinished": unfinished, "unrecorded_jobs": unrecorded,
            "ran_twice": sorted(c for c, n in runs.items() if n > 1), "never_ran": never,
            "merged_twice": sorted(c for c, n in merged.items() if n > 1), "not_merged": sorted(cells - set(merged)),
            "reads": reads, "read_failures": failures}


def settle(run: Soak) -> int:
    """With the queue reliable: resubmit each campaign and wait, until every cell has a result; then collect.
    Returns the cells still without a result after SETTLE_ROUNDS."""
    from bench_contract.results import result_problem

    left = 0
    for _ in range(SETTLE_ROUNDS):
        wait_for_killed_sbatch(run)
        for folder in run.campaigns():
            run.cli("resubmit", folder.name, "--wait", env=run.reliable)
        left = sum(result_problem(cell["results"]) is not None for manifest in run.manifests().values()
                   for cell in manifest["cells"])
        if not left:
            break
    run.cli("collect", env=run.reliable)
    return left


def wait_for_killed_sbatch(run: Soak) -> None:
    """Sleep until the sbatch of every killed command can no longer accept its array (each unknown array's
    `answer_by`): before then resubmit rightly leaves those cells alone, as a user's would, and a round of settle
    would pass without running them."""
    import datetime as dt

    answers = [dt.datetime.fromisoformat(entry["answer_by"]) for manifest in run.manifests().values()
               for entry in manifest.get("arrays", []) if entry.get("state") == "unknown" and entry.get("answer_by")]
    if answers:
        time.sleep(max(0.0, (max(answers) - dt.datetime.now(dt.UTC)).total_seconds() + 1.0))


def task_starts(run: Soak, manifests: dict[str, dict], since: str) -> tuple[Counter, list[str]]:
    """(campaign, array index) -> how many of its tasks started, by sacct: every array job named for a campaign
    here (`jax:<campaign>:<offset>[:rerunN]`), each task mapped to its cell by the manifest's record of that array
    (task i of an array at `offset` runs cell offset + i); and the jobs Slurm ran for a campaign here that no
    manifest records (each a cell run that nothing knows of)."""
    arrays = {entry["job_id"]: (name, entry) for name, manifest in manifests.items()
              for entry in manifest.get("arrays", []) if entry.get("job_id")}
    out = sacct_lines(run, since)
    starts: Counter = Counter()
    unrecorded: list[str] = []
    for line in out.splitlines():
        job, name, start = line.split("|")
        parts = name.split(":")
        if len(parts) < 3 or parts[1] not in manifests or start in ("Unknown", "None", "") or "_" not in job:
            continue
        job_id, task = job.split("_", 1)
        if not task.isdigit():
            continue
        if job_id not in arrays:
            unrecorded.append(job)
            continue
        campaign, entry = arrays[job_id]
        starts[(campaign, entry["offset"] + int(task))] += 1
    return starts, unrecorded


def sacct_lines(run: Soak, since: str) -> str:
    return subprocess.run(["sacct", "-X", "-n", "-P", "-S", since, "-o", "JobID,JobName,Start"],
                          capture_output=True, text=True, check=True, env=run.reliable).stdout


def merged_runs(run: Soak, manifests: dict[str, dict]) -> Counter:
    """(campaign, array index) -> how many runs of it the merged dataset holds (distinct start times)."""
    from orchestrator.results.store import read_merged_rows

    index = {(name, cell["cell_id"], cell["trial"]): cell["array_index"] for name, manifest in manifests.items()
             for cell in manifest["cells"]}
    merged = read_merged_rows(run.results / "merged.parquet", ["campaign", "cell_id", "trial", "started_at"])
    runs = merged.to_pandas().drop_duplicates().groupby(["campaign", "cell_id", "trial"]).size()
    return Counter({(c, index[(c, cell, t)]): n for (c, cell, t), n in runs.items() if (c, cell, t) in index})


def measure(repeats: int, quick: bool = False) -> list[Result]:
    length_s = QUICK_SOAK_S if quick else SOAK_S
    step = f"soak: {length_s:.0f} s of random commands and kills, queue failing 1 call in {QUEUE_FAILS_ONE_IN}"
    reason = cluster_unavailable()
    if reason:
        return [Result(step, "not measured", "each cell once", reason)]
    work = Path(tempfile.mkdtemp(prefix="bench-soak-"))
    try:
        figures = soak(work, length_s)
    finally:
        cancel_all(work)
    wrong = {key: figures[key] for key in ("ran_twice", "never_ran", "merged_twice", "not_merged", "unrecorded_jobs")
             if figures[key]}
    verdict = "met" if not wrong and not figures["read_failures"] and not figures["unfinished"] else "missed"
    measured = (f"{figures['cells']} cells in {figures['campaigns']} campaigns: {len(figures['ran_twice'])} ran "
                f"twice, {len(figures['never_ran'])} never; {figures['read_failures']} of {figures['reads']} reads "
                "failed")
    note = (f"commands {figures['commands']}, killed {figures['killed']}"
            + (f"; {wrong}" if wrong else "") + (f"; {figures['unfinished']} unfinished" if figures["unfinished"] else ""))
    print(f"soak figures: {figures}", file=sys.stderr)
    return [Result(step, measured, "each cell once, merged once; no read fails", verdict, note)]


def cancel_all(work: Path) -> None:
    """Cancel whatever of the soak's jobs is still queued, and remove its folder."""
    from orchestrator.plan.campaign import load_manifest

    for manifest in (work / "results").glob("*/manifest.json"):
        for entry in load_manifest(manifest.parent).get("arrays", []):
            if entry.get("job_name"):
                subprocess.run(["scancel", f"--name={entry['job_name']}"], capture_output=True)
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    result = measure(1)[0]
    print(result)
    sys.exit(0 if result.verdict == "met" else 1)
