"""The paired job's driver (bench_contract.run.driver) with stand-in launchers: bash functions, handed to the driver
as the paired script hands its launch functions (exported), that log what they were asked to run. No framework is
imported. The driver runs as a process of its own, as in a job, so that its signal handlers are its own."""

import os
import signal
import subprocess
import sys

import pytest
from helpers import REPO_ROOT, bash_functions, wait_until

from bench_contract.run.driver import Run, pair_trials
from bench_contract.spec import FIRST_STAGE

SPECS = {"jax": "/campaign/specs/jax.jsonl", "torch": "/campaign/specs/torch.jsonl"}
DRIVER = [sys.executable, "-m", "bench_contract.run.driver"]


def logging_launchers(log, jax_exit: int = 0, rule: str = "exit 1") -> dict[str, str]:
    """run_jax and run_torch log their framework, their arguments (specs file, line), their pid and DRIVER_ONLY;
    trials_needed runs `rule`."""
    line = f'echo "$FUNCNAME $1 $2 $$ ${{DRIVER_ONLY:-unset}}" >> {log}'
    return bash_functions(run_jax=f"{line}; exit {jax_exit}", run_torch=line, trials_needed=rule)


def driver_args(trials: int, *extra: str, pair: int = 1) -> list[str]:
    return ["--pair", str(pair), "--trials", str(trials), "--run", "jax", "run_jax", SPECS["jax"],
            "--run", "torch", "run_torch", SPECS["torch"], *extra]


def run_driver(args: list[str], launchers: dict[str, str], **kwargs) -> subprocess.CompletedProcess:
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(REPO_ROOT), "SLURM_ARRAY_TASK_ID": "1", **launchers}
    return subprocess.run([*DRIVER, *args], env=env, capture_output=True, text=True, timeout=120, **kwargs)


def logged(log) -> list[list[str]]:
    return [line.split() for line in log.read_text().splitlines()]


def test_a_pairs_runs_are_data_trial_by_trial_in_the_pairs_order():
    """Pair 1 of 3 trials: lines 3, 4 and 5 of both specs files, JAX first in even trials, PyTorch first in odd."""
    jax, torch = SPECS["jax"], SPECS["torch"]
    assert pair_trials(1, 3, SPECS) == [[Run("jax", jax, 3), Run("torch", torch, 3)],
                                        [Run("torch", torch, 4), Run("jax", jax, 4)],
                                        [Run("jax", jax, 5), Run("torch", torch, 5)]]


def test_each_run_is_a_process_of_its_own_started_from_the_jobs_environment_not_the_drivers(tmp_path):
    """The script saves its environment on file descriptor 3 before it enters the driver's (here DRIVER_ONLY): the
    runs get the saved one."""
    log = tmp_path / "runs.log"
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(REPO_ROOT), "SLURM_ARRAY_TASK_ID": "1",
           **logging_launchers(log)}
    proc = subprocess.run(["bash", "-c", 'exec 3< <(env -0); export DRIVER_ONLY=yes; exec "$@" --environment-fd 3',
                           "job", *DRIVER, *driver_args(2)], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    runs = logged(log)
    assert [(fw, specs, line) for fw, specs, line, _, _ in runs] == [
        ("run_jax", SPECS["jax"], "2"), ("run_torch", SPECS["torch"], "2"),
        ("run_torch", SPECS["torch"], "3"), ("run_jax", SPECS["jax"], "3")]
    assert len({pid for _, _, _, pid, _ in runs}) == 4
    assert {driver_only for *_, driver_only in runs} == {"unset"}
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("pair 1 (array task 1) on ") and lines[0].endswith(
        ": 2 trial(s), JAX then PyTorch in even trials, the other way round in odd ones")
    assert lines[1:] == ["trial 0: JAX (line 3)", "trial 0: PyTorch (line 3)", "trial 1: PyTorch (line 4)",
                         "trial 1: JAX (line 4)"]


def test_a_failed_run_does_not_stop_the_pair_and_the_job_ends_failed(tmp_path):
    log = tmp_path / "runs.log"
    proc = run_driver(driver_args(2), logging_launchers(log, jax_exit=3))
    assert [run[0] for run in logged(log)] == ["run_jax", "run_torch", "run_torch", "run_jax"]
    assert proc.returncode == 1
    assert proc.stderr.splitlines() == ["JAX trial 0 failed", "JAX trial 1 failed", "2 run(s) of pair 1 failed"]


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGUSR1, signal.SIGINT])
def test_a_stop_signal_reaches_the_running_child_and_no_further_run_starts(tmp_path, signum):
    log = tmp_path / "runs.log"
    name = signal.Signals(signum).name
    waiting = (f'trap \'kill "$s"; echo "$FUNCNAME got {name}" >> {log}; exit 99\' {name}; sleep 60 & s=$!; '
               f'echo "$FUNCNAME started" >> {log}; wait "$s"')
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(REPO_ROOT), "SLURM_ARRAY_TASK_ID": "1",
           **bash_functions(run_jax=waiting, run_torch=waiting)}
    driver = subprocess.Popen([*DRIVER, *driver_args(2)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True)
    wait_until(lambda: log.exists() and "started" in log.read_text(), driver)  # the child's trap is set
    driver.send_signal(signum)
    _, err = driver.communicate(timeout=60)
    assert log.read_text().splitlines() == ["run_jax started", f"run_jax got {name}"]
    assert driver.returncode == 143
    assert err.splitlines() == ["stopped by a signal during trial 0"]  # the run cut, not failed of its own


def test_a_signal_while_the_rule_runs_stops_the_job_before_another_trial(tmp_path):
    """The rule's child signals the driver (as Slurm would, at that moment) and waits: the driver passes the signal on,
    and ends without a further trial and without calling the rule failed."""
    log = tmp_path / "runs.log"
    rule = ('trap \'kill "$s"; exit 138\' USR1; sleep 60 & s=$!; kill -USR1 "$PPID"; wait "$s"')
    proc = run_driver(driver_args(8, "--rule", "trials_needed"), logging_launchers(log, rule=rule))
    assert len(logged(log)) == 2 * FIRST_STAGE
    assert proc.returncode == 143
    assert proc.stderr.splitlines() == [f"stopped by a signal during trial {FIRST_STAGE - 1}"]


def test_the_rule_after_the_first_stage_says_the_trials_within_the_jobs_time_budget(tmp_path):
    """The rule gets both specs files (JAX's first), the pair, the first stage's seconds and the seconds left: a
    budget of 1000 s from the job's start, of which the job had used 100 s when the driver started."""
    log, asked = tmp_path / "runs.log", tmp_path / "rule.args"
    launchers = logging_launchers(log, rule=f'echo "$@" > {asked}; echo 6')
    proc = run_driver(driver_args(8, "--rule", "trials_needed", "--time-budget-s", "1000", "--job-seconds", "100"),
                      launchers)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0].endswith(": up to 8 trial(s), JAX then PyTorch in even trials, the other way "
                                                "round in odd ones")
    jax_specs, torch_specs, pair, first_stage_s, left_s = asked.read_text().split()
    assert (jax_specs, torch_specs, pair) == (SPECS["jax"], SPECS["torch"], "1")
    # Whole seconds, each rounded down: together the 900 s left when the driver started, less the seconds before its
    # first trial (Python's start, well under the 5 s allowed on a loaded machine), never more.
    assert 900 - 5 <= int(first_stage_s) + int(left_s) <= 900
    assert [line for _, _, line, _, _ in logged(log)] == [str(8 + t) for t in range(6) for _ in range(2)]


@pytest.mark.parametrize("rule", ["exit 1", "echo many"], ids=["failed", "no number"])
def test_a_rule_that_fails_leaves_every_planned_trial_to_run(tmp_path, rule):
    log = tmp_path / "runs.log"
    proc = run_driver(driver_args(7, "--rule", "trials_needed"), logging_launchers(log, rule=rule))
    assert proc.returncode == 0 and len(logged(log)) == 2 * 7
    assert "the sequential rule failed: all 7 trials run" in proc.stderr.splitlines()


@pytest.mark.parametrize("args, message", [
    (["--pair", "0", "--trials", "2", "--run", "jax", "run_jax", "J"],
     "--run names the frameworks jax; a pair needs each of jax, torch once"),
    (driver_args(2, "--time-budget-s", "100", "--job-seconds", "0"),
     "--time-budget-s and --job-seconds go together, and with --rule"),
    (driver_args(2, "--environment-fd", "9"), "cannot read the job's environment from file descriptor 9"),
])
def test_a_driver_called_wrongly_says_so_in_one_sentence(tmp_path, args, message):
    proc = run_driver(args, logging_launchers(tmp_path / "runs.log"))
    assert proc.returncode == 2 and proc.stdout == ""
    assert len(proc.stderr.splitlines()) == 1 and proc.stderr.startswith("error: ") and message in proc.stderr
    assert not (tmp_path / "runs.log").exists()
