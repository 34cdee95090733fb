"""The driver of a paired job: it runs the job's list of runs, one child process at a time, each in its framework's
own environment, and keeps the job's control flow in Python rather than in the script.

A paired script (templates/paired.sh.j2) keeps what Slurm must read and one launch function per framework, which
enters that framework's environment and execs its backend; it ends by exec-ing

    python -m bench_contract.run.driver --pair P --trials N --run jax run_jax SPECS --run torch run_torch SPECS
        [--rule trials_needed [--time-budget-s S --job-seconds "$SECONDS"]] --environment-fd 3

so the driver is the job's process from then on, and Slurm's warning signal (--signal=B:...) reaches it. What it
does, each for the reason given:

- The trials: trial t of pair P is line P*N+t (from 0) of each framework's specs file, the frameworks in
  bench_contract.spec.pair_order(t), so that an effect of the position within a pair falls on both alike.
- Each run is a process of its own, `bash -euo pipefail -c '"$@"' LAUNCHER SPECS LINE`, started from the job's
  environment as the script had it before it entered the driver's own (its `env -0`, read from a file
  descriptor): nothing of one framework's environment, or of the driver's, reaches the other framework's runs.
  The shell options are the script's, under which the launch functions were written: a failed `source` ends the
  run instead of running another interpreter.
- A stop signal (bench_contract.run.stop_signals: Slurm's warning signal, TERM, INT) is passed on to the running
  child, which writes its failure row and exits; the driver waits until it has ended, starts nothing more, and
  exits 143, as a job stopped by TERM does.
- A failed run does not stop the pair: the other runs go on, and the job ends failed (exit 1), saying how many.
- `--trials auto`: after the first FIRST_STAGE trials, Stein's rule (bench_contract.sequential) says how many
  trials the pair needs, within the job's time budget where there is one (the first stage's seconds, and the
  seconds left before the earliest warning signal). The rule reads the task files with pyarrow, so it runs as a
  child too, in the first framework's environment, through the script's rule launcher; if it fails, every
  planned trial runs.

The runs are data (Run: framework, specs file, line), grouped by trial, not code paths.

A pack (--pack N: `--pack-size N --pair-count P --pack-log FILE [--slots K] [--step-option=OPT ...]`, and --pair
is then the pack's index) runs pairs pack*N to pack*N+N-1 in one allocation, each pair as above, up to K of them side
by side (one per slot: the job asks Slurm for K tasks). Each run is a job step of its own, `srun --exact --ntasks=1
--nodes=1 --job-name=FRAMEWORK:CELL:tTRIAL` with the step options (its CPUs, its GPU, its memory), so that it runs
on CPUs and a GPU no other timed run holds, as in a job of its own; srun passes a stop signal on to the step. Each
run that ended is recorded in the pack's log (slot, start, end: which cells ran beside which), and a run whose
result file is already there is not run again, so that a pack resubmitted after a time limit, a node failure or
scancel runs only what it had not finished. A pack that reaches its time limit starts nothing more (Slurm
refuses new steps from then on) and waits for Slurm's signal, so that the job ends TIMEOUT, not failed.

Only the standard library and the contract's stdlib-only modules (spec, stop_signals): the driver starts before
either framework, in whatever interpreter the script gives it.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TextIO

from bench_contract.run.cpu_binding import PACK_SLOT_VARIABLE
from bench_contract.run.stop_signals import STOP_SIGNALS
from bench_contract.spec import FIRST_STAGE, FRAMEWORK_TITLES, PAIRED_ORDER, pair_order

# How each launcher runs: the script's own shell options, and "$@" so that the launch function's name and its
# arguments (specs file, line) come as data, unquoted by nobody. The last word is the shell's $0, in its messages.
SHELL = ("bash", "-euo", "pipefail", "-c", '"$@"', "bench_contract.run.driver")
STOPPED_EXIT = 143  # 128 + SIGTERM: what a job stopped by the warning signal or scancel ends with
FAILED_EXIT = 1
# Once a pack's job has reached its time limit, how long the driver waits for Slurm to end it: slurmctld checks
# the limits every 30 s and then signals the job, which ends TIMEOUT; a driver that exited first would end it FAILED.
TIME_LIMIT_WAIT_S = 120


class DriverError(Exception):
    """A driver called wrongly (by a script it was not rendered for): one sentence, exit 2."""


@dataclass(frozen=True)
class Run:
    """One backend run: its framework and its job spec, line `line` (from 0) of `specs_file`."""

    framework: str
    specs_file: str
    line: int


def pair_trials(pair: int, trials: int, specs_files: Mapping[str, str]) -> list[list[Run]]:
    """The runs of pair `pair`, trial by trial: trial t is line pair*trials+t of each framework's specs file (the
    orchestrator plans them so: orchestrator.plan.render.spec_line), in pair_order(t)."""
    return [[Run(fw, specs_files[fw], pair * trials + t) for fw in pair_order(t)] for t in range(trials)]


@dataclass(frozen=True)
class TimeBudget:
    """The seconds from the job's start to the earliest warning signal, and when the job started (monotonic)."""

    seconds: int
    job_start: float

    def left(self) -> int:
        """Whole seconds left, as bash's $SECONDS would count them (negative once past the budget)."""
        return int(self.seconds - (time.monotonic() - self.job_start))


@dataclass(frozen=True)
class Rule:
    """Stein's rule after the first stage: the launcher that runs bench_contract.sequential, and the budget."""

    launcher: str
    budget: TimeBudget | None = None


class Children:
    """Starts children from the job's environment, one at a time per slot (a pack's slots run side by side, each
    from a thread of its own), and passes a stop signal on to every one running."""

    def __init__(self, environment: Mapping[str, str]):
        self.environment = dict(environment)
        self.running: set[subprocess.Popen] = set()
        self.stopped_by: int | None = None  # the first stop signal received
        self.out_of_time = False  # a pack's step refused or ended because the job reached its time limit

    def catch_stop_signals(self) -> None:
        for signum in STOP_SIGNALS:
            signal.signal(signum, self._forward)

    def _forward(self, signum: int, frame: Any) -> None:
        if self.stopped_by is None:
            self.stopped_by = signum
        # list() copies the set in one step under the GIL: a slot's thread may add or drop its child meanwhile.
        for child in list(self.running):
            self._pass_on(child, signum)

    @staticmethod
    def _pass_on(child: subprocess.Popen, signum: int) -> None:
        # A child leaves `running` only after wait() returned in its own thread, so its pid cannot have been reused.
        if child.returncode is None:
            try:
                os.kill(child.pid, signum)
            except ProcessLookupError:
                pass

    @property
    def stopped(self) -> bool:
        return self.stopped_by is not None or self.out_of_time

    @property
    def stop_reason(self) -> str:
        return "the job's time limit" if self.out_of_time else "a signal"

    def await_end_of_job(self, seconds: float) -> None:
        """Wait, up to `seconds`, for Slurm's signal that ends a job past its time limit."""
        deadline = time.monotonic() + seconds
        while self.stopped_by is None and time.monotonic() < deadline:
            time.sleep(0.2)

    def call(self, launcher: str, *args: str, capture: bool = False, prefix: Sequence[str] = (),
             extra: Mapping[str, str] | None = None) -> tuple[int, str]:
        """Run `[PREFIX] launcher ARGS` to its end, with the job's environment and `extra`: (exit code, its stdout
        where captured; else it goes to the job's log). PREFIX is a pack's `srun ...` that makes the run a job step
        of its own."""
        child = subprocess.Popen([*prefix, *SHELL, launcher, *args], env={**self.environment, **(extra or {})},
                                 text=True, stdout=subprocess.PIPE if capture else None)
        self.running.add(child)
        if self.stopped_by is not None:  # a signal came between the caller's check and the start
            self._pass_on(child, self.stopped_by)
        try:
            out, _ = child.communicate()
        finally:
            self.running.discard(child)
        return child.returncode, out or ""


def title(framework: str) -> str:
    return FRAMEWORK_TITLES.get(framework, framework)


def say(text: str, stream: TextIO) -> None:
    # Flushed at once: the children write to the same log, and their lines must come after the one that names them.
    print(text, file=stream, flush=True)


def run_pair(children: Children | Slot, launchers: Mapping[str, str], trials: list[list[Run]], pair: int,
             rule: Rule | None = None, out: TextIO = sys.stdout, err: TextIO = sys.stderr) -> int:
    """Run the trials of one pair in order (each trial's runs in their order) and return the job's exit code."""
    planned = len(trials)
    order = " then ".join(title(fw) for fw in PAIRED_ORDER)
    say(f"pair {pair} (array task {os.environ.get('SLURM_ARRAY_TASK_ID', 'none')}) on {socket.gethostname()}: "
        f"{'up to ' if rule else ''}{planned} trial(s), {order} in even trials, the other way round in odd ones", out)
    wanted, failed = planned, 0
    pair_start = time.monotonic()
    for trial, runs in enumerate(trials):
        if trial >= wanted:
            break
        for run in runs:
            if children.stopped:
                return stopped(children, trial, err)
            say(f"trial {trial}: {title(run.framework)} (line {run.line + 1})", out)
            code, _ = children.call(launchers[run.framework], run.specs_file, str(run.line))
            if code != 0 and children.stopped:  # cut by a stop signal or refused at the time limit, not failed
                return stopped(children, trial, err)
            if code != 0:
                say(f"{title(run.framework)} trial {trial} failed", err)
                failed += 1
        if rule is not None and trial + 1 == FIRST_STAGE:
            wanted = ask_rule(children, rule, trials, pair, time.monotonic() - pair_start, err)
        if children.stopped:  # during the trial's last run, or the rule
            return stopped(children, trial, err)
    if failed:
        say(f"{failed} run(s) of pair {pair} failed", err)
        return FAILED_EXIT
    return 0


@dataclass(frozen=True)
class Pack:
    """A pack (--pack): the pairs one job runs, how many side by side (slots), the options each run's job step asks
    srun for (its CPUs, GPU and memory), and the file that records each run's slot, start and end."""

    pairs: list[int]
    slots: int
    step_options: tuple[str, ...]
    log: str
    nodes: tuple[str, ...] = ()  # the job's nodes where it has several (--pack-nodes), each holding its share of slots

    def slot_options(self, number: int) -> tuple[str, ...]:
        """Slot `number`'s step options: the pack's, and where the job spans nodes, the slot's own node, so that
        both sides of a pair run on one node, as in a job of their own (srun would take any node with room)."""
        if len(self.nodes) < 2:
            return self.step_options
        return (*self.step_options, f"--nodelist={self.nodes[number * len(self.nodes) // self.slots]}")


def job_nodes(environment: Mapping[str, str]) -> tuple[str, ...]:
    """The job's nodes, one name each (`scontrol show hostnames` of SLURM_JOB_NODELIST), where it has several; ()
    where it has one or scontrol cannot say (the slots' steps then go where srun finds room)."""
    listed = environment.get("SLURM_JOB_NODELIST", "")
    if environment.get("SLURM_JOB_NUM_NODES", "1") in ("", "1") or not listed:
        return ()
    try:
        proc = subprocess.run(["scontrol", "show", "hostnames", listed], capture_output=True, text=True, timeout=60,
                              env=dict(environment), check=False)
    except (OSError, subprocess.TimeoutExpired):
        return ()
    return tuple(proc.stdout.split()) if proc.returncode == 0 else ()


def job_past_end(environment: Mapping[str, str]) -> bool:
    """Whether the job has reached its end time (squeue's %e of SLURM_JOB_ID, in local time as datetime.now()).
    From then on Slurm refuses every new step ("Job/step already completing"), up to 30 s before it ends the job:
    the pack stops there, rather than failing each pair left. False where squeue cannot say, or the job has no time
    limit."""
    job = environment.get("SLURM_JOB_ID", "")
    if not job:
        return False
    try:
        proc = subprocess.run(["squeue", "-h", "-j", job, "-o", "%e"], capture_output=True, text=True, timeout=30,
                              env=dict(environment), check=False)
        return datetime.now() >= datetime.fromisoformat(proc.stdout.strip())
    except (OSError, subprocess.TimeoutExpired, ValueError):
        return False


def pack_pairs(pack: int, size: int, count: int) -> list[int]:
    """The pairs of pack `pack`: `size` pairs in order, the last pack the rest of the `count` (the orchestrator plans
    them so: orchestrator.plan.render.pack_of)."""
    return list(range(pack * size, min((pack + 1) * size, count)))


def spec_entry(specs_file: str, line: int) -> dict[str, Any]:
    """Line `line` (from 0) of a specs file, as the JSON object it is (only the identity and the results path are
    read: the driver never checks a spec, the backend does)."""
    with open(specs_file, encoding="utf-8") as stream:
        for number, text in enumerate(stream):
            if number == line:
                return json.loads(text)
    raise DriverError(f"{specs_file} has no line {line + 1}")


def step_name(spec: Mapping[str, Any]) -> str:
    """A run's job step name, which sacct shows: framework, cell and trial, so that Slurm's accounting of a pack's
    steps can be read against the rows (one step per run)."""
    return f"{spec['framework']}:{spec['cell_id']}:t{spec['trial']}"


class RunLog:
    """The pack's record of its runs, one JSON line each (cell, framework, trial, slot, step, start, end, exit code),
    written as each ends, so that a pack stopped midway keeps the record of the runs it finished. One file per job,
    written by this process alone; the slots' threads take turns."""

    def __init__(self, path: str):
        self.path = path
        self.lock = threading.Lock()

    def write(self, entry: Mapping[str, Any]) -> None:
        with self.lock:
            os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
            with open(self.path, "a", encoding="utf-8") as stream:
                stream.write(json.dumps(entry, sort_keys=True) + "\n")
                stream.flush()
                os.fsync(stream.fileno())


class Slot:
    """One slot of a pack: runs its pairs' runs one at a time, each as a job step of its own (`srun --exact
    --ntasks=1 --nodes=1` and the pack's step options: its own CPUs, and its own GPU where the job has GPUs), so that
    a run's measurement is as isolated as in a job of its own. A run whose result is already there (a pack
    resubmitted after it was stopped) is not run again. Stein's rule reads files only: it runs as a child of the
    driver, not as a step, so that the steps are the runs."""

    def __init__(self, number: int, children: Children, pack: Pack, log: RunLog, out: TextIO):
        self.number, self.children, self.pack, self.log, self.out = number, children, pack, log, out

    @property
    def stopped(self) -> bool:
        return self.children.stopped

    @property
    def stop_reason(self) -> str:
        return self.children.stop_reason

    def call(self, launcher: str, *args: str, capture: bool = False) -> tuple[int, str]:
        if capture:
            return self.children.call(launcher, *args, capture=True)
        specs_file, line = args
        spec = spec_entry(specs_file, int(line))
        if os.path.exists(spec["results_path"]):
            say(f"slot {self.number}: {title(spec['framework'])} {spec['cell_id']} trial {spec['trial']} has its "
                "result already (an earlier job of this pack ran it): not run again", self.out)
            return 0, ""
        name = step_name(spec)
        prefix = ("srun", "--exact", "--ntasks=1", "--nodes=1", f"--job-name={name}",
                  *self.pack.slot_options(self.number))
        start = time.time()
        # The slot, so that slots side by side on a node that binds no CPUs take different ones (cpu_binding).
        code, out = self.children.call(launcher, *args, prefix=prefix, extra={PACK_SLOT_VARIABLE: str(self.number)})
        if code != 0 and job_past_end(self.children.environment):
            self.children.out_of_time = True  # the pack's other slots start nothing more either
        self.log.write({"cell_id": spec["cell_id"], "pair_key": spec.get("pair_key", ""),
                        "framework": spec["framework"], "trial": spec["trial"], "slot": self.number, "step": name,
                        "job": os.environ.get("SLURM_JOB_ID", ""), "start": start, "end": time.time(),
                        "exit": code})
        return code, out


def slot_memory(options: Sequence[str], slots: int, environment: Mapping[str, str]) -> tuple[str, ...]:
    """A slot's share of the job's memory per node (the profile's mem or the partition's default), where slots share
    the node and the plan gave none per GPU: a step that asks for no memory gets all of the job's, and the other
    slots' steps would wait for it. Slurm says the job's memory in SLURM_MEM_PER_NODE (megabytes), and the
    slots on each node in SLURM_NTASKS_PER_NODE (a pack spread over nodes, --pack-nodes, has fewer than `slots`)."""
    given = any(option.startswith("--mem") for option in options)
    per_node = environment.get("SLURM_MEM_PER_NODE", "")
    on_node = environment.get("SLURM_NTASKS_PER_NODE", "")
    sharing = int(on_node) if on_node.isdigit() else slots
    if given or sharing < 2 or not per_node.isdigit():
        return ()
    return (f"--mem={int(per_node) // sharing}M",)


def run_pack(children: Children, launchers: Mapping[str, str], pack: Pack, trials: int,
             specs_files: Mapping[str, str], rule: Rule | None = None, out: TextIO = sys.stdout,
             err: TextIO = sys.stderr) -> int:
    """Run the pack's pairs, each as run_pair runs one, up to `pack.slots` of them side by side (one thread per
    slot, each taking the next pair when its last has ended). A failed run or pair does not stop the others; a stop
    signal stops them all, and so does the job's time limit (its end reached, Slurm refuses new steps), after which
    the driver waits for Slurm to end the job, as a TIMEOUT. The job's exit code: 143 when stopped, 1 when a run
    failed, else 0."""
    say(f"pack of {len(pack.pairs)} pair(s) ({', '.join(map(str, pack.pairs))}) on {socket.gethostname()}, "
        f"{pack.slots} side by side; each run a job step of its own", out)
    pending = iter(pack.pairs)
    taking = threading.Lock()
    codes: list[int] = []
    log = RunLog(pack.log)

    def work(number: int) -> None:
        slot = Slot(number, children, pack, log, out)
        while not children.stopped:
            with taking:
                pair = next(pending, None)
            if pair is None:
                return
            try:
                codes.append(run_pair(slot, launchers, pair_trials(pair, trials, specs_files), pair, rule, out, err))
            except (OSError, ValueError, KeyError, DriverError) as exc:  # a specs line unread: that pair fails
                say(f"pair {pair} failed: {exc}", err)
                codes.append(FAILED_EXIT)

    threads = [threading.Thread(target=work, args=(number,), daemon=True)
               for number in range(min(pack.slots, len(pack.pairs)))]
    for thread in threads:
        thread.start()
    for thread in threads:
        while thread.is_alive():  # a timed join, so that the main thread runs the signal handler at once
            thread.join(0.2)
    if children.stopped:
        # Slurm's own signal at the time limit: a step it cut has said so already (Slot.call); otherwise ask.
        if children.stopped_by is not None and not children.out_of_time and job_past_end(children.environment):
            children.out_of_time = True
        say(f"pack stopped by {children.stop_reason}; {len(codes)} of its {len(pack.pairs)} pair(s) ended", err)
        if children.stopped_by is None:  # the time limit: Slurm's own signal ends the job
            children.await_end_of_job(TIME_LIMIT_WAIT_S)
        return STOPPED_EXIT
    failed = sum(code != 0 for code in codes)
    if failed:
        say(f"{failed} pair(s) of the pack failed", err)
        return FAILED_EXIT
    return 0


def stopped(children: Children | Slot, trial: int, err: TextIO) -> int:
    say(f"stopped by {children.stop_reason} during trial {trial}", err)
    return STOPPED_EXIT


def ask_rule(children: Children | Slot, rule: Rule, trials: list[list[Run]], pair: int, first_stage_s: float,
             err: TextIO) -> int:
    """Ask Stein's rule how many trials the pair needs in all (bench_contract.sequential's command line: each
    framework's specs file in PAIRED_ORDER, the pair, and with a budget the first stage's whole seconds and the
    whole seconds left); every planned trial where it fails. The rule prints why to the job's log itself."""
    specs = {run.framework: run.specs_file for run in trials[0]}
    args = [specs[fw] for fw in PAIRED_ORDER] + [str(pair)]
    if rule.budget is not None:
        args += [str(int(first_stage_s)), str(rule.budget.left())]
    code, answer = children.call(rule.launcher, *args, capture=True)
    try:
        if code != 0:
            raise ValueError(f"exit code {code}")
        return int(answer.strip())
    except ValueError:
        if not children.stopped:
            say(f"the sequential rule failed: all {len(trials)} trials run", err)
        return len(trials)


def job_environment(fd: int) -> dict[str, str]:
    """The job's environment as `env -0` wrote it to file descriptor `fd` (NUL-separated NAME=VALUE entries)."""
    try:
        with os.fdopen(fd, "rb") as stream:
            data = stream.read()
    except OSError as exc:
        raise DriverError(f"cannot read the job's environment from file descriptor {fd} ({exc.strerror}); the "
                          f"script passes it with `exec {fd}< <(env -0)`") from exc
    entries = [entry.partition(b"=") for entry in data.split(b"\0") if entry]
    environment = {os.fsdecode(name): os.fsdecode(value) for name, _, value in entries}
    if "PATH" not in environment:
        raise DriverError(f"file descriptor {fd} holds no environment with a PATH; the script passes it with "
                          f"`exec {fd}< <(env -0)`")
    return environment


class Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one sentence, not argparse's usage block
        raise DriverError(message)


def parse(argv: Sequence[str]) -> argparse.Namespace:
    parser = Parser(prog="python -m bench_contract.run.driver", add_help=False)
    parser.add_argument("--pair", type=int, required=True)
    parser.add_argument("--trials", type=int, required=True)
    parser.add_argument("--run", nargs=3, action="append", required=True,
                        metavar=("FRAMEWORK", "LAUNCHER", "SPECS_FILE"))
    parser.add_argument("--rule", metavar="LAUNCHER")
    parser.add_argument("--time-budget-s", type=int)
    parser.add_argument("--job-seconds", type=int)
    parser.add_argument("--environment-fd", type=int)
    # A pack (--pack): --pair is the pack's index; its pairs, slots, each step's srun options and the runs' record.
    parser.add_argument("--pack-size", type=int)
    parser.add_argument("--pair-count", type=int)
    parser.add_argument("--slots", type=int, default=1)
    # Given as --step-option=VALUE: the value (an srun option) starts with "--", which argparse would otherwise
    # take for an option of the driver's own.
    parser.add_argument("--step-option", action="append", default=[])
    parser.add_argument("--pack-log")
    args = parser.parse_args(argv)
    packed = (args.pack_size, args.pair_count, args.pack_log)
    if any(value is not None for value in packed) and (None in packed or args.pack_size < 1 or args.slots < 1
                                                        or args.pair_count <= args.pair * args.pack_size):
        raise DriverError("--pack-size, --pair-count and --pack-log go together (--pack-size and --slots 1 or more), "
                          f"and pack {args.pair} must hold a pair of the --pair-count")
    frameworks = [framework for framework, _, _ in args.run]
    if sorted(frameworks) != sorted(PAIRED_ORDER):
        raise DriverError(f"--run names the frameworks {', '.join(frameworks)}; a pair needs each of "
                          f"{', '.join(PAIRED_ORDER)} once")
    if args.pair < 0 or args.trials < 1:
        raise DriverError(f"--pair must be 0 or more and --trials 1 or more, got {args.pair} and {args.trials}")
    if (args.time_budget_s is None) != (args.job_seconds is None) or (args.time_budget_s is not None
                                                                       and args.rule is None):
        raise DriverError("--time-budget-s and --job-seconds go together, and with --rule")
    return args


def main(argv: Sequence[str]) -> int:
    """The paired job's entry point (the module's docstring says its command line)."""
    started = time.monotonic()
    try:
        args = parse(argv)
        environment = os.environ if args.environment_fd is None else job_environment(args.environment_fd)
    except DriverError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    children = Children(environment)
    children.catch_stop_signals()
    budget = None if args.time_budget_s is None else TimeBudget(args.time_budget_s, started - args.job_seconds)
    rule = None if args.rule is None else Rule(args.rule, budget)
    launchers = {framework: launcher for framework, launcher, _ in args.run}
    specs = {framework: specs_file for framework, _, specs_file in args.run}
    if args.pack_size is not None:
        pack = Pack(pack_pairs(args.pair, args.pack_size, args.pair_count), args.slots,
                    tuple(args.step_option) + slot_memory(args.step_option, args.slots, environment), args.pack_log,
                    job_nodes(environment))
        return run_pack(children, launchers, pack, args.trials, specs, rule)
    return run_pair(children, launchers, pair_trials(args.pair, args.trials, specs), args.pair, rule)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
