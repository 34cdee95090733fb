"""The soak of "nothing run twice" (#30, #65): for SOAK_S (ten minutes), random launches, resubmits, collects, status
calls and readers of the merged dataset in one results folder on the local cluster, under a faulty Slurm
(bench/soak_faults.py: an sbatch that is slow, hung, a wrapper whose child submits, or loses its answer, chosen per
call; squeue and sacct failing one call in five), with random kills (SIGINT, SIGTERM, SIGHUP, SIGKILL) of the
commands, at any moment or while their sbatch works. The kills go to the command's process only: stopping its sbatch
is the product's part. The launches vary: JAX, PyTorch, both, paired jobs, sbatch or submitit as executor, arrays
whole or split in parts (a profile's max_array_size).

Then, with the queue reliable again, the campaigns are completed (resubmit --wait) and collected, and the soak
counts (bench/soak_counts.py), per cell and trial: the tasks Slurm's accounting has submitted and started for it,
and the jobs it ran that no manifest records; the distinct runs that published its result, from a ledger the
stand-in backend appends to; and its row in the merged dataset, from that run. Besides: sbatch processes that
outlived their command, commands that ended in a traceback or did not end, and the readers' failures. Each must
be none (and each cell once).

Tasks run the stand-in backend (bench/standin_backend.py), a second of CPU each, so the soak tests the orchestrator,
not a framework. `python -m bench --only soak`; SOAK_S sets its length.
"""

from __future__ import annotations

import datetime as dt
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

from bench import soak_counts, soak_faults
from bench.soak_faults import COMMAND_TAG, QUEUE_FAILS_ONE_IN, SOAK_WORK
from bench.standin_backend import standin_env
from bench.submission import cluster_unavailable
from bench.timing import REPO_ROOT, Result

if TYPE_CHECKING:
    from orchestrator.plan.manifest import Manifest

SOAK_S = float(os.environ.get("SOAK_S", "600"))
QUICK_SOAK_S = 5.0  # --quick: to check that the suite runs
KILL_CHANCE = 0.3  # of each command, at any moment of its first KILL_WITHIN_S
KILL_WITHIN_S = 3.0
SBATCH_KILL_CHANCE = 0.7  # of each command not killed so, that calls sbatch: within WHILE_SBATCH_S of its first call
WHILE_SBATCH_S = 2.0
# Of the kills while sbatch works, this share is SIGKILL (the rest SIGINT, SIGTERM, SIGHUP alike): the command cannot
# stop its sbatch then, which lives on until its watchdog kills it, and whether it accepts its array before or after
# the next run looks is what the record's `answer_by` is for.
SBATCH_SIGKILL_SHARE = 0.5
SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGKILL)
# sbatch's time limit in the random phase: a hung sbatch ends (is killed) after this, not after the default 120 s.
SBATCH_TIMEOUT_S = 8.0
COMMAND_LIMIT_S = 120.0  # a command still running after this has hung: it is killed and counted
SOAK_TASK_MEM = "1G"  # a paired job's driver and one stand-in run at a time; 8 such jobs fit a local node
REAPED_S = 1.5  # after a command has ended, its sbatch processes have been killed and reaped within this
SETTLE_ROUNDS = 8
# The launches, each a command run again and again (so that most runs resubmit what is missing or find it queued):
# its options, its profile (whole arrays, or "split": at most SPLIT_ARRAY tasks an array), and its executor.
SPLIT_ARRAY = 2
# Some launches plan a new campaign (--new-campaign), so that there is something to submit all along: a command run
# again once its campaign is complete submits nothing.
NEW_CAMPAIGN_CHANCE = 0.35
DIGITS = ("--benchmark", "digits", "--use-case", "1", "--synthetic")
LAUNCHES = (
    (("--frameworks", "jax", "--batch-sizes", "8,16"), "whole", "slurm"),
    (("--frameworks", "torch", "--batch-sizes", "32,64,128"), "split", "slurm"),
    (("--frameworks", "jax,torch", "--batch-sizes", "8,16,32", "--trials", "2", "--paired"), "split", "slurm"),
    (("--frameworks", "jax,torch", "--batch-sizes", "16,32"), "whole", "slurm"),
    (("--frameworks", "jax", "--batch-sizes", "8", "--trials", "3"), "split", "submitit"),
    (("--frameworks", "jax,torch", "--batch-sizes", "64", "--trials", "2", "--paired"), "whole", "submitit"),
)


def soak_profile(env_dir: Path) -> str:
    """The local cluster's profile on its load partition: the soak's tasks are stand-ins, never timed, and on the
    debug partition (one core a node) they would wait behind whatever else runs there, as the jobs of the tests
    beside it in `make test`, past the settle rounds' time. With SOAK_TASK_MEM: the load partition's default
    (scripts/local_slurm.sh: 200 MB) holds a stand-in task, not a paired job's driver beside its runs, which
    Slurm then kills for its memory (seen: 217 MB)."""
    base = (REPO_ROOT / "profiles" / "local_slurm.toml").read_text()
    on_load, replaced = re.subn(r'(?m)^partition = "debug"$', 'partition = "load"', base)
    if replaced != 1:
        raise RuntimeError('profiles/local_slurm.toml no longer says partition = "debug": update the soak\'s profile')
    return on_load + f'\nenv_dir = "{env_dir}"\nmem = "{SOAK_TASK_MEM}"\n'


class Soak:
    """One results folder, the commands run on it, and what they did."""

    def __init__(self, work: Path, seed: int) -> None:
        self.work, self.random = work, random.Random(seed)
        self.results, self.scripts, self.logs = work / "results", work / "scripts", work / "logs"
        self.logs.mkdir(parents=True)
        self.ledger = work / "ledger.jsonl"
        standin_env(work / "envs", ledger=self.ledger)
        base = soak_profile(work / "envs")
        self.profiles = {"whole": work / "profile.toml", "split": work / "profile-split.toml"}
        self.profiles["whole"].write_text(base)
        self.profiles["split"].write_text(base + f"max_array_size = {SPLIT_ARRAY}\n")
        self.calls = work / "sbatch-calls"
        self.reliable = dict(os.environ)
        self.faulty = {**os.environ, SOAK_WORK: str(work), "ORCHESTRATOR_SBATCH_TIMEOUT_S": f"{SBATCH_TIMEOUT_S:g}",
                       "PATH": f"{soak_faults.faulty_slurm(work / 'faulty', self.calls)}:{os.environ['PATH']}"}
        self.lock = threading.Lock()
        self.numbered = 0
        self.ran: Counter = Counter()
        self.killed: Counter = Counter()
        self.exits: Counter = Counter()
        self.killed_in_sbatch: Counter = Counter()
        self.tracebacks: list[str] = []
        self.hung: list[str] = []
        self.outlived: list[str] = []
        self.checks: list[threading.Timer] = []
        self.said: Counter = Counter()

    def cli(self, *args: str, reliable: bool = False, kill: bool = False) -> int:
        """`python main.py ARGS` (the results and scripts folders added), tagged for the processes it starts; with
        `kill`, it may be killed (kill_at). Its stderr is read for a traceback; its sbatch processes are looked for
        once they should all have ended. A command killed while its sbatch worked is followed at once by a
        resubmit of the campaign it was submitting, as a user runs a command again after a Ctrl-C: that is when
        an sbatch that outlived its command could have its array taken for never accepted."""
        with self.lock:
            self.numbered += 1
            tag = f"c{self.numbered}"
            self.ran[args[0]] += 1
            signum, moment, delay = self.kill_plan(args[0]) if kill else (None, "", 0.0)
        command = [sys.executable, str(REPO_ROOT / "main.py"), *args]
        if args[0].startswith("--"):
            command += ["--scripts-dir", str(self.scripts)]
        command += ["--results-dir", str(self.results)]
        env = self.reliable if reliable else {**self.faulty, COMMAND_TAG: tag}
        err = self.logs / f"{tag}.err"
        with err.open("w") as stderr:
            proc = subprocess.Popen(command, cwd=REPO_ROOT, env=env, stdout=subprocess.DEVNULL, stderr=stderr,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
        sent, in_sbatch = self.kill_at(proc, tag, signum, moment, delay) if signum else (None, False)
        try:
            code = proc.wait(timeout=COMMAND_LIMIT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            code = proc.wait()
            with self.lock:
                self.hung.append(f"{tag}: {' '.join(args)}" + (f" (after {sent.name})" if sent else ""))
        self.after(proc, tag, args, sent, err)
        with self.lock:
            self.exits[code] += 1
        campaign = soak_faults.campaign_called(self.calls, tag) if in_sbatch else None
        if campaign:
            self.cli("resubmit", campaign, kill=True)
        return code

    def kill_plan(self, command: str) -> tuple[signal.Signals | None, str, float]:
        """Whether and how to kill a command: at any moment of its first KILL_WITHIN_S (KILL_CHANCE), else, for a
        command that may submit, while its sbatch works (SBATCH_KILL_CHANCE, within WHILE_SBATCH_S of its first
        sbatch call, SIGKILL for SBATCH_SIGKILL_SHARE of them); the signal at random."""
        if self.random.random() < KILL_CHANCE:
            return self.random.choice(SIGNALS), "any", self.random.uniform(0, KILL_WITHIN_S)
        if command in ("--benchmark", "resubmit") and self.random.random() < SBATCH_KILL_CHANCE:
            signum = signal.SIGKILL if self.random.random() < SBATCH_SIGKILL_SHARE else self.random.choice(SIGNALS[:3])
            return signum, "sbatch", self.random.uniform(0, WHILE_SBATCH_S)
        return None, "", 0.0

    def kill_at(self, proc: subprocess.Popen, tag: str, signum: signal.Signals, moment: str,
                delay: float) -> tuple[signal.Signals | None, bool]:
        """Send `signum` to the command's process only, `delay` s after it catches signals ("any") or after its first
        sbatch call ("sbatch"; not at all if it ends first); counted, and counted as during sbatch if an sbatch
        process of it lived then. Returns the signal sent (None when the command had ended before), and whether an
        sbatch of it lived then.

        The moments count from when the command catches signals: a signal before its first line runs is the Python
        interpreter's, starting up (its site module, tens of milliseconds), which prints a traceback of its own and
        which no program can catch."""
        given_up = time.monotonic() + COMMAND_LIMIT_S
        started = (lambda: soak_faults.sbatch_called(self.calls, tag)) if moment == "sbatch" else (
            lambda: soak_faults.catches_signals(proc.pid))
        while not started():
            if proc.poll() is not None or time.monotonic() > given_up:
                return None, False
            time.sleep(0.01)
        try:
            proc.wait(timeout=delay)
            return None, False
        except subprocess.TimeoutExpired:
            pass
        in_sbatch = bool(soak_faults.sbatch_processes(self.work, tag))
        proc.send_signal(signum)
        with self.lock:
            self.killed[signum.name] += 1
            self.killed_in_sbatch[signum.name] += in_sbatch
        return signum, in_sbatch

    def after(self, proc: subprocess.Popen, tag: str, args: tuple[str, ...], sent: signal.Signals | None,
              err: Path) -> None:
        """Once the command has ended: a traceback on its stderr is counted; and its sbatch processes are looked
        for once none may live: at once (REAPED_S), or, after SIGKILL, once the watchdog's time is up."""
        said = err.read_text(errors="replace")
        last = said.strip().splitlines()[-1] if said.strip() else ""
        with self.lock:  # what the commands said last, by kind: campaign names, job ids and times left out
            self.said[re.sub(r"\S*\d\S*", "#", last)[:120]] += 1
        if "Traceback (most recent call last)" in said:
            with self.lock:
                self.tracebacks.append(f"{tag}: {' '.join(args)}" + (f" (after {sent.name})" if sent else "")
                                       + ": " + " | ".join(said.strip().splitlines()[-6:]))
        wait_s = REAPED_S + (SBATCH_TIMEOUT_S if sent == signal.SIGKILL else 0.0)

        def look() -> None:
            left = soak_faults.sbatch_processes(self.work, tag)
            if left:
                with self.lock:
                    self.outlived.append(f"{tag} ({' '.join(args)}; {sent.name if sent else 'not killed'}): "
                                         f"{sorted(left.values())}")
                soak_faults.end_processes(left)

        check = threading.Timer(wait_s, look)
        check.start()
        with self.lock:
            self.checks.append(check)

    def launch(self) -> None:
        options, profile, executor = self.random.choice(LAUNCHES)
        new = ("--new-campaign",) if self.random.random() < NEW_CAMPAIGN_CHANCE else ()
        self.cli(*DIGITS, *options, *new, "--profile", str(self.profiles[profile]), "--executor", executor, kill=True)

    def resubmit(self) -> None:
        names = [folder.name for folder in self.campaigns()]
        if names:
            self.cli("resubmit", self.random.choice(names), kill=True)
        else:
            time.sleep(1)

    def act(self, step, until: float) -> None:
        while time.monotonic() < until:
            step()

    def campaigns(self) -> list[Path]:
        return sorted(manifest.parent for manifest in self.results.glob("*/manifest.json"))

    def manifests(self) -> dict[str, Manifest]:
        """Each campaign's manifest as it is now, by campaign name."""
        from orchestrator.plan.manifest import load_manifest

        return {folder.name: load_manifest(folder) for folder in self.campaigns()}


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
    steps = [run.launch, run.launch, run.resubmit,
             lambda: run.cli("collect", kill=True),
             lambda: (run.cli("status"), time.sleep(1))]
    actors = [threading.Thread(target=run.act, args=(step, until), daemon=True) for step in steps]
    try:
        for actor in actors:
            actor.start()
        for actor in actors:
            actor.join()
        for check in run.checks:
            check.join()
        reads, failures = map(int, reader.communicate(timeout=600)[0].split())
    finally:
        reader.kill()  # ended already, unless the soak itself was stopped
        reader.wait()
    unfinished = settle(run)
    manifests = run.manifests()  # as the soak left them: read once for the counts
    lines = soak_counts.sacct_lines(run.reliable, started, manifests)
    counts = soak_counts.count(manifests, lines, soak_counts.ledger_runs(run.ledger),
                               soak_counts.merged_jobs(run.results / "merged.parquet"))
    if counts["never_submitted"] or counts["never_started"]:  # what sacct, the manifests and the ledger said
        odd = {campaign for campaign, _, _ in counts["never_submitted"] + counts["never_started"]}
        print(f"soak: cells no task of which sacct has (or has started): {counts['never_submitted']}, "
              f"{counts['never_started']}\nsacct:\n" + "\n".join("|".join(line) for line in lines)
              + "".join(f"\narrays of {name}: {manifests[name].arrays}" for name in sorted(odd))
              + "\nledger:\n" + "".join(line for line in ledger_lines(run.ledger)
                                         if any(name in line for name in odd)), file=sys.stderr)
    return {**counts, "campaigns": len(manifests), "commands": dict(run.ran), "exits": dict(run.exits),
            "killed": dict(run.killed), "killed_in_sbatch": dict(run.killed_in_sbatch),
            "sbatch_calls": dict(soak_faults.sbatch_calls(run.calls)), "tracebacks": run.tracebacks,
            "hung": run.hung, "sbatch_outlived": run.outlived, "unfinished": unfinished, "reads": reads,
            "read_failures": failures, "said": dict(run.said.most_common())}


def ledger_lines(ledger: Path) -> list[str]:
    """The ledger's lines; none where no run has published a result yet (the stand-in creates it with its first)."""
    return ledger.read_text().splitlines(keepends=True) if ledger.exists() else []


def settle(run: Soak) -> int:
    """With the queue reliable: resubmit each campaign and wait, until every cell has a result; then collect.
    Returns the cells still without a result after SETTLE_ROUNDS."""
    from bench_contract.results import result_problem

    left = 0
    for _ in range(SETTLE_ROUNDS):
        wait_for_killed_sbatch(run)
        for folder in run.campaigns():
            run.cli("resubmit", folder.name, "--wait", reliable=True)
        left = sum(result_problem(cell.results) is not None for manifest in run.manifests().values()
                   for cell in manifest.cells)
        if not left:
            break
    if left:  # say why: what the last round's commands printed, and what the queue holds
        for err in sorted(run.logs.glob("*.err"), key=lambda path: path.stat().st_mtime)[-len(run.campaigns()):]:
            print(f"soak: {left} cells without a result after settling; {err.name} said:\n{err.read_text()[-2000:]}",
                  file=sys.stderr)
        print(subprocess.run(["squeue", "-a", "-o", "%i %j %P %T %R"], capture_output=True, text=True).stdout,
              file=sys.stderr)
    run.cli("collect", reliable=True)
    return left


def wait_for_killed_sbatch(run: Soak) -> None:
    """Sleep until the sbatch of every killed command can no longer accept its array (each unknown array's
    `answer_by`): before then resubmit rightly leaves those cells alone, as a user's would, and a round of settle
    would pass without running them."""
    answers = [dt.datetime.fromisoformat(when) for manifest in run.manifests().values()
               for when in soak_counts.answer_bys(manifest)]
    if answers:
        time.sleep(max(0.0, (max(answers) - dt.datetime.now(dt.UTC)).total_seconds() + 1.0))


# The figures that must be empty (or zero) for the soak to be met.
MUST_BE_NONE = ("submitted_twice", "never_submitted", "started_twice", "never_started", "ran_twice", "never_ran",
                "not_merged", "merged_from_another_run", "unrecorded_jobs", "orphans_ran", "tracebacks", "hung",
                "sbatch_outlived", "unfinished", "read_failures")


def measure(repeats: int, quick: bool = False) -> list[Result]:
    length_s = QUICK_SOAK_S if quick else SOAK_S
    step = (f"soak: {length_s:.0f} s of random commands and kills, sbatch slow, hung, a wrapper or losing its answer, "
            f"queue failing 1 call in {QUEUE_FAILS_ONE_IN}")
    reason = cluster_unavailable()
    if reason:
        return [Result(step, "not measured", "each cell once", reason)]
    work = Path(tempfile.mkdtemp(prefix="bench-soak-"))
    try:
        figures = soak(work, length_s)
    finally:
        cancel_all(work)
    wrong = {key: figures[key] for key in MUST_BE_NONE if figures[key]}
    twice = {key for name in ("submitted_twice", "started_twice", "ran_twice") for key in figures[name]}
    never = {key for name in ("never_submitted", "never_started", "never_ran") for key in figures[name]}
    measured = (f"{figures['cells']} cells in {figures['campaigns']} campaigns: {len(twice)} ran twice, "
                f"{len(never)} never; {figures['read_failures']} of {figures['reads']} reads failed")
    note = (f"commands {figures['commands']}, killed {figures['killed']} ({figures['killed_in_sbatch']} while sbatch "
            f"worked), sbatch calls {figures['sbatch_calls']}, orphans {figures['orphans']}"
            + (f"; {wrong}" if wrong else ""))
    print(f"soak figures: {figures}", file=sys.stderr)
    return [Result(step, measured, "each cell submitted, run and merged once; no read fails",
                   "missed" if wrong else "met", note)]


def cancel_all(work: Path) -> None:
    """End the soak's sbatch processes still alive, cancel whatever of its jobs is still queued, and remove its
    folder."""
    from orchestrator.plan.manifest import load_manifest

    soak_faults.end_processes(soak_faults.sbatch_processes(work))
    for manifest in (work / "results").glob("*/manifest.json"):
        for entry in load_manifest(manifest.parent).arrays:
            if entry.job_name:
                subprocess.run(["scancel", f"--name={entry.job_name}"], capture_output=True)
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    result = measure(1)[0]
    print(result)
    sys.exit(0 if result.verdict == "met" else 1)
