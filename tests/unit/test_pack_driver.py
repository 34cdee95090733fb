"""The driver's pack mode (bench_contract.run.driver: --pack-size), with srun faked at the subprocess boundary: a
`srun` on PATH that records the options it was given and then runs the step's command in its own place (exec), as
srun runs a step and passes signals on to it. The launchers are bash functions, as in test_paired_driver."""

import json
import os
import signal
import subprocess
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from helpers import REPO_ROOT, bash_functions, wait_until

from bench_contract.run.driver import Pack, pack_pairs, slot_memory
from bench_contract.spec import pair_order
from orchestrator.plan.render import pack_of

DRIVER = [sys.executable, "-m", "bench_contract.run.driver"]
FAKE_SRUN = """#!/bin/bash
# Records its options and the step's command, then becomes the step (exec): a signal to srun reaches the step.
options=()
while [[ "$1" == --* ]]; do options+=("$1"); shift; done
echo "${options[*]} | $*" >> "$SRUN_LOG"
exec "$@"
"""
# The job's end time as squeue -o %e says it: JOB_END where the test gives one, else a job with no time limit.
FAKE_SQUEUE = '#!/bin/bash\necho "${JOB_END:-N/A}"\n'


def pack_specs(tmp_path: Path, pairs: int, trials: int) -> dict[str, str]:
    """Specs files of `pairs` pairs of `trials` trials each, one JSON object a line, as the plan writes them (the
    driver reads each run's identity and result path)."""
    specs = {}
    for framework in ("jax", "torch"):
        path = tmp_path / "specs" / f"{framework}.jsonl"
        path.parent.mkdir(exist_ok=True)
        path.write_text("".join(json.dumps({
            "framework": framework, "cell_id": f"{framework}-c{pair}", "pair_key": f"p{pair}", "trial": trial,
            "results_path": str(tmp_path / "results" / f"{framework}-c{pair}" / f"trial{trial}.parquet")}) + "\n"
            for pair in range(pairs) for trial in range(trials)))
        specs[framework] = str(path)
    return specs


def pack_args(specs: dict[str, str], tmp_path: Path, *, pack: int, size: int, count: int, trials: int,
              slots: int = 1, options: tuple[str, ...] = ("--cpus-per-task=1",)) -> list[str]:
    return ["--pair", str(pack), "--trials", str(trials), "--run", "jax", "run_jax", specs["jax"],
            "--run", "torch", "run_torch", specs["torch"], "--pack-size", str(size), "--pair-count", str(count),
            "--slots", str(slots), *(f"--step-option={o}" for o in options),
            "--pack-log", str(tmp_path / "packs" / "pack.jsonl")]


def environment(tmp_path: Path, **bodies: str) -> dict[str, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "srun").write_text(FAKE_SRUN)
    (bin_dir / "srun").chmod(0o755)
    (bin_dir / "squeue").write_text(FAKE_SQUEUE)
    (bin_dir / "squeue").chmod(0o755)
    return {"PATH": f"{bin_dir}:{os.environ['PATH']}", "PYTHONPATH": str(REPO_ROOT), "SLURM_ARRAY_TASK_ID": "1",
            "SLURM_JOB_ID": "77", "SRUN_LOG": str(tmp_path / "srun.log"), **bash_functions(**bodies)}


def logging(log: Path, exit_code: str = "0") -> str:
    """A launcher that logs its name, specs file's framework and line, and whether it runs inside the fake srun."""
    return f'echo "$FUNCNAME $2" >> {log}; exit {exit_code}'


def run_log(tmp_path: Path) -> list[dict]:
    path = tmp_path / "packs" / "pack.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def srun_calls(tmp_path: Path) -> list[str]:
    path = tmp_path / "srun.log"
    return path.read_text().splitlines() if path.exists() else []


def test_the_pack_plan_is_the_same_in_the_driver_and_the_renderer():
    assert [pack_pairs(p, 3, 8) for p in range(3)] == [[0, 1, 2], [3, 4, 5], [6, 7]]
    assert [pack_of(pair, 3) for pair in range(8)] == [0, 0, 0, 1, 1, 1, 2, 2]
    assert pack_of(5, 0) == 5  # unpacked: a task per pair


def test_a_pack_runs_its_pairs_in_order_each_run_an_srun_step_of_its_own(tmp_path):
    """Pack 1 of size 2 of 5 pairs: pairs 2 and 3, each pair's trials in pair_order, each run `srun --exact
    --ntasks=1 --nodes=1 --job-name=FRAMEWORK:CELL:tTRIAL` and the step options, and recorded in the pack's log."""
    specs, log = pack_specs(tmp_path, 5, 2), tmp_path / "runs.log"
    env = environment(tmp_path, run_jax=logging(log), run_torch=logging(log))
    proc = subprocess.run([*DRIVER, *pack_args(specs, tmp_path, pack=1, size=2, count=5, trials=2,
                                               options=("--cpus-per-task=2", "--gpus-per-task=1"))],
                          env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    expected = [(fw, pair * 2 + t) for pair in (2, 3) for t in range(2) for fw in pair_order(t)]
    assert [tuple(line.split()) for line in log.read_text().splitlines()] == [
        (f"run_{fw}", str(line)) for fw, line in expected]
    steps = srun_calls(tmp_path)
    assert len(steps) == len(expected)
    for step, (fw, line) in zip(steps, expected):
        pair, trial = divmod(line, 2)
        options, command = step.split(" | ")
        assert options == (f"--exact --ntasks=1 --nodes=1 --job-name={fw}:{fw}-c{pair}:t{trial} --cpus-per-task=2 "
                           "--gpus-per-task=1")
        assert command.split()[-3:] == [f"run_{fw}", specs[fw], str(line)]
    records = run_log(tmp_path)
    assert [(r["framework"], r["cell_id"], r["trial"], r["slot"], r["exit"], r["job"]) for r in records] == [
        (fw, f"{fw}-c{line // 2}", line % 2, 0, 0, "77") for fw, line in expected]
    assert all(r["start"] <= r["end"] for r in records)
    # One slot: each run starts after the one before it ended.
    assert all(a["end"] <= b["start"] for a, b in zip(records, records[1:]))


def test_a_run_whose_result_is_there_is_not_run_again(tmp_path):
    """A pack resubmitted after it was stopped: the runs that ended (their result files there) are not started."""
    specs, log = pack_specs(tmp_path, 1, 2), tmp_path / "runs.log"
    done = Path(json.loads(Path(specs["jax"]).read_text().splitlines()[0])["results_path"])
    done.parent.mkdir(parents=True)
    done.write_bytes(b"PAR1")
    env = environment(tmp_path, run_jax=logging(log), run_torch=logging(log))
    proc = subprocess.run([*DRIVER, *pack_args(specs, tmp_path, pack=0, size=1, count=1, trials=2)], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert log.read_text().splitlines() == ["run_torch 0", "run_torch 1", "run_jax 1"]
    assert len(srun_calls(tmp_path)) == 3
    assert "JAX jax-c0 trial 0 has its result already" in proc.stdout


def test_a_failed_step_does_not_stop_the_pack_and_the_job_ends_failed(tmp_path):
    specs, log = pack_specs(tmp_path, 2, 1), tmp_path / "runs.log"
    env = environment(tmp_path, run_jax=logging(log, "3"), run_torch=logging(log))
    proc = subprocess.run([*DRIVER, *pack_args(specs, tmp_path, pack=0, size=2, count=2, trials=1)], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    assert log.read_text().splitlines() == ["run_jax 0", "run_torch 0", "run_jax 1", "run_torch 1"]
    assert [r["exit"] for r in run_log(tmp_path)] == [3, 0, 3, 0]
    assert proc.stderr.splitlines()[-1] == "2 pair(s) of the pack failed"


def test_side_by_side_each_slot_runs_one_pair_at_a_time_both_frameworks_in_the_same_slot(tmp_path):
    """Two slots, three pairs: pairs 0 and 1 start together, one per slot; each waits until the other slot's first
    run has started (so they overlap), and pair 2 takes the slot that frees first. Within a slot, one run at a
    time, a pair's two frameworks one after the other."""
    specs = pack_specs(tmp_path, 3, 1)
    started = tmp_path / "started"
    started.mkdir()
    # Each run marks its start, then waits (at most 20 s) until two runs have started: side by side, the first two
    # see each other at once; one after another, they would not.
    # Each also logs the slot its step was told (cpu_binding counts it as the local task, so that slots side by side
    # take different CPUs where Slurm binds none).
    body = (f'echo "$FUNCNAME $2 $BENCH_PACK_SLOT" >> {tmp_path}/seen; touch {started}/"$FUNCNAME-$2"; '
            f'for _ in $(seq 200); do [ "$(ls {started} | wc -l)" -ge 2 ] && exit 0; sleep 0.1; done; exit 9')
    env = environment(tmp_path, run_jax=body, run_torch=body)
    proc = subprocess.run([*DRIVER, *pack_args(specs, tmp_path, pack=0, size=3, count=3, trials=1, slots=2)],
                          env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    records = run_log(tmp_path)
    assert len(records) == 6 and {r["exit"] for r in records} == {0}
    by_slot = {slot: sorted((r for r in records if r["slot"] == slot), key=lambda r: r["start"]) for slot in (0, 1)}
    assert by_slot[0] and by_slot[1]
    for runs in by_slot.values():
        assert all(a["end"] <= b["start"] for a, b in zip(runs, runs[1:]))  # one run at a time in a slot
        pairs = [r["pair_key"] for r in runs]
        assert all(pairs.count(key) == 2 for key in pairs)  # a pair's two runs in the same slot
    first = {slot: runs[0] for slot, runs in by_slot.items()}
    assert first[0]["pair_key"] != first[1]["pair_key"]
    assert max(r["start"] for r in first.values()) < min(r["end"] for r in first.values())  # they overlapped
    seen = {tuple(line.split()) for line in (tmp_path / "seen").read_text().splitlines()}
    assert seen == {(f"run_{r['framework']}", r["pair_key"][1:], str(r["slot"])) for r in records}


@pytest.mark.parametrize("signum, past_end, step_exit", [(signal.SIGTERM, False, 99), (signal.SIGUSR1, False, 99),
                                                        (signal.SIGTERM, True, 99), (signal.SIGTERM, True, 0)])
def test_a_stop_signal_reaches_every_running_step_and_no_further_run_starts(tmp_path, signum, past_end, step_exit):
    """A signal while steps run: scancel or Slurm's warning signal before the job's end, or Slurm's own TERM at the
    time limit, when squeue says the end time has passed (the pack then says so: the job ends TIMEOUT), whether the
    steps it cut failed (the slot asks squeue) or ended cleanly (the pack asks)."""
    specs, log = pack_specs(tmp_path, 4, 1), tmp_path / "runs.log"
    name = signal.Signals(signum).name
    waiting = (f'trap \'kill "$s"; echo "$FUNCNAME $2 got {name}" >> {log}; exit {step_exit}\' {name}; sleep 60 & '
               f's=$!; echo "$FUNCNAME $2 started" >> {log}; wait "$s"')
    end = datetime.now() + timedelta(minutes=-1 if past_end else 10)
    env = {**environment(tmp_path, run_jax=waiting, run_torch=waiting), "JOB_END": end.isoformat(timespec="seconds")}
    driver = subprocess.Popen([*DRIVER, *pack_args(specs, tmp_path, pack=0, size=4, count=4, trials=1, slots=2)],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_until(lambda: log.exists() and log.read_text().count("started") == 2, driver)  # both slots' traps set
    driver.send_signal(signum)
    _, err = driver.communicate(timeout=60)
    lines = log.read_text().splitlines()
    assert sorted(lines) == sorted(["run_jax 0 started", "run_jax 1 started",
                                    f"run_jax 0 got {name}", f"run_jax 1 got {name}"])
    assert driver.returncode == 143
    reason = "the job's time limit" if past_end else "a signal"
    assert err.splitlines()[-1] == f"pack stopped by {reason}; 2 of its 4 pair(s) ended"
    assert len(srun_calls(tmp_path)) == 2


@pytest.mark.parametrize("past_end", [True, False])
def test_a_pack_past_its_time_limit_starts_nothing_more_and_waits_for_slurm_to_end_it(tmp_path, past_end):
    """Slurm refuses a step once the job has reached its end time (srun exits 1), up to 30 s before it signals the
    job: the pack starts no further pair and waits for that signal (the job then ends TIMEOUT, not FAILED). A step
    that fails before the job's end is a failed run, and the pack goes on."""
    specs, log = pack_specs(tmp_path, 3, 1), tmp_path / "runs.log"
    end = datetime.now() + timedelta(minutes=-1 if past_end else 10)
    env = {**environment(tmp_path, run_jax=logging(log, "1"), run_torch=logging(log, "1")),
           "JOB_END": end.isoformat(timespec="seconds")}
    driver = subprocess.Popen([*DRIVER, *pack_args(specs, tmp_path, pack=0, size=3, count=3, trials=1)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if past_end:
        wait_until(lambda: len(run_log(tmp_path)) == 1, driver)
        time.sleep(1)
        assert driver.poll() is None  # waiting for Slurm's signal
        driver.send_signal(signal.SIGTERM)
    _, err = driver.communicate(timeout=60)
    if past_end:
        assert driver.returncode == 143 and len(srun_calls(tmp_path)) == 1
        assert err.splitlines() == ["stopped by the job's time limit during trial 0",  # refused, not failed
                                    "pack stopped by the job's time limit; 1 of its 3 pair(s) ended"]
    else:
        assert driver.returncode == 1 and len(srun_calls(tmp_path)) == 6
        assert err.splitlines()[-1] == "3 pair(s) of the pack failed"


@pytest.mark.parametrize("extra, message", [
    (["--pack-size", "2"], "--pack-size, --pair-count and --pack-log go together"),
    (["--pack-size", "2", "--pair-count", "3", "--pack-log", "x", "--pair", "2"], "pack 2 must hold a pair"),
    (["--pack-size", "2", "--pair-count", "3", "--pack-log", "x", "--slots", "0"], "--slots 1 or more"),
])
def test_a_pack_called_wrongly_says_so_in_one_sentence(tmp_path, extra, message):
    specs = pack_specs(tmp_path, 3, 1)
    args = ["--pair", "0", "--trials", "1", "--run", "jax", "run_jax", specs["jax"], "--run", "torch", "run_torch",
            specs["torch"], *extra]
    proc = subprocess.run([*DRIVER, *args], env=environment(tmp_path, run_jax="exit 0", run_torch="exit 0"),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stdout == "" and not srun_calls(tmp_path)
    assert len(proc.stderr.splitlines()) == 1 and message in proc.stderr


def test_a_slot_asks_for_its_node_s_share_of_the_job_s_memory_only_where_slots_share_a_node():
    job = {"SLURM_MEM_PER_NODE": "8000"}
    assert slot_memory([], 2, job) == ("--mem=4000M",)
    assert slot_memory([], 4, {**job, "SLURM_NTASKS_PER_NODE": "2"}) == ("--mem=4000M",)  # 4 slots over 2 nodes
    assert slot_memory([], 2, {**job, "SLURM_NTASKS_PER_NODE": "1"}) == ()  # one slot per node: the node's all
    assert slot_memory(["--mem-per-gpu=8G"], 2, job) == ()  # memory per GPU: each step its own GPUs'


def test_where_a_pack_spans_nodes_each_slot_keeps_to_its_own_node():
    """Four slots over two nodes: slots 0-1 on the first, 2-3 on the second, so that a pair's two runs (which its
    slot runs one after the other) share a node; on one node srun is left to place the step."""
    spread = Pack([0], 4, ("--cpus-per-task=1",), "log", ("n1", "n2"))
    assert [spread.slot_options(n)[-1] for n in range(4)] == ["--nodelist=n1"] * 2 + ["--nodelist=n2"] * 2
    assert Pack([0], 2, ("--cpus-per-task=1",), "log").slot_options(1) == ("--cpus-per-task=1",)
