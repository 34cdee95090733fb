"""Submission: nothing lost, nothing run twice. sbatch, squeue, sacct, scontrol and sacctmgr are faked
on PATH, so these run without Slurm."""

import json
import re
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import (REPO_ROOT, default_signals, fake_sbatch, fake_slurm_site, fake_tools, read_manifest, run_cli,
                     shell_wait_for, wait_until, write_result)

ARGS = ("--benchmark", "digits", "--use-case", "1", "--batch-sizes", "8,16,32")


@pytest.fixture
def cluster(tmp_path):
    """Fake Slurm commands (fake_slurm_site: sbatch records each call with its job name and answers 4001, 4002...),
    framework environments that exist, and a profile. Returns (env, run) where run(*extra) is the CLI call."""
    env, _, profile = fake_slurm_site(tmp_path, {
        "sbatch": fake_sbatch(tmp_path / "sbatch_calls.txt", job_name=True),
        "scontrol": 'echo "MaxArraySize            = 1001"\necho "MaxJobCount             = 10000"\n',
        "sacctmgr": "exit 0\n",  # no association or QOS limits
        "squeue": "exit 0\n", "sacct": "exit 0\n",
        # submitit's executor refuses to start where `srun` is not on PATH (the unit tests run before, or without,
        # the local cluster's installation); the array it submits is never run here.
        "srun": "exit 0\n",
    })

    def run(*extra, timeout=60):
        return run_cli(*ARGS, "--profile", str(profile), "--results-dir", str(tmp_path / "r"),
                       "--scripts-dir", str(tmp_path / "s"), *extra, env=env, timeout=timeout)

    return env, run


def calls(tmp_path) -> list[str]:
    path = tmp_path / "sbatch_calls.txt"
    return path.read_text().splitlines() if path.exists() else []


def no_traceback(proc) -> None:
    assert "Traceback" not in proc.stderr, proc.stderr


def test_a_busy_controller_is_named_and_the_array_recorded_as_unknown(tmp_path, cluster):
    env, run = cluster
    fake_tools(Path(env["PATH"].split(":")[0]),
               sbatch=fake_sbatch(tmp_path / "sbatch_calls.txt", "exec sleep 30\n", job_name=True))
    env.update(ORCHESTRATOR_SBATCH_TIMEOUT_S="2", ORCHESTRATOR_SBATCH_SLOW_S="0.5")
    proc = run(timeout=25)
    no_traceback(proc)
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert lines[0].startswith("sbatch has not answered for 0 s: the controller is busy or full"), lines
    assert lines[-1].startswith("error: sbatch did not answer within 2 s for ") and "unknown" in lines[-1]
    assert len(lines) == 2, lines
    record = read_manifest(tmp_path / "r")
    [array] = record["arrays"]
    assert array["state"] == "unknown" and array["script"] == "jax" and array["offset"] == 0
    assert array["job_name"] == f"jax:{record['campaign']}:0"
    assert calls(tmp_path)[0].split()[0] == array["job_name"]  # sbatch got that job name
    assert "did not answer" in record["submission_error"]


def test_a_waiting_sbatch_is_said_in_its_own_words(tmp_path, cluster):
    """sbatch on a full controller says why it waits (and retries) on stderr at once: that line is the why."""
    env, run = cluster
    fake_tools(Path(env["PATH"].split(":")[0]),
               sbatch="echo 'sbatch: error: Slurm temporarily unable to accept job, sleeping and retrying' >&2\n"
                      "exec sleep 30\n")
    env.update(ORCHESTRATOR_SBATCH_TIMEOUT_S="2", ORCHESTRATOR_SBATCH_SLOW_S="0.5")
    proc = run(timeout=25)
    no_traceback(proc)
    assert proc.returncode == 1
    first, last = proc.stderr.strip().splitlines()
    assert first == ('sbatch has not answered for 0 s: it says "sbatch: error: Slurm temporarily unable to accept job, '
                     'sleeping and retrying": the controller is too busy to accept jobs now (`sdiag` and `squeue | wc '
                     '-l` say whether the controller is busy or full); waiting up to 2 s')
    assert last.startswith("error: sbatch did not answer within 2 s for ") and "(it said: sbatch: error: Slurm " \
        "temporarily unable to accept job, sleeping and retrying)" in last


def test_the_same_command_again_finds_the_unknown_array_in_slurm_before_submitting(tmp_path, cluster):
    env, run = cluster
    bin_dir = Path(env["PATH"].split(":")[0])
    fake_tools(bin_dir, sbatch="exec sleep 30\n")
    env.update(ORCHESTRATOR_SBATCH_TIMEOUT_S="1", ORCHESTRATOR_SBATCH_SLOW_S="0.5")
    assert run(timeout=25).returncode == 1
    name = read_manifest(tmp_path / "r")["arrays"][0]["job_name"]
    # Slurm did accept it, as job 4100: sacct finds it by its name; squeue and sacct say its tasks are pending.
    fake_tools(bin_dir, sbatch=fake_sbatch(tmp_path / "sbatch_calls.txt", answer="echo 4200\n", job_name=True))
    fake_tools(bin_dir, sacct=f'case "$*" in *--name=*{name}*) echo "4100_[0-2]|{name}";; '
                              '*4100*) echo "4100_[0-2]|PENDING";; esac\n')
    fake_tools(bin_dir, squeue='case "$*" in *4100*) printf "4100_0 PENDING\\n4100_1 PENDING\\n4100_2 PENDING\\n";; esac\n')
    proc = run()
    no_traceback(proc)
    assert proc.returncode == 0, proc.stderr
    assert "the array at offset 0 whose submission was unknown is found as job 4100" in proc.stdout
    assert [line.split()[-1].endswith("torch_digits_1.sh") for line in calls(tmp_path)] == [True]  # jax not again
    record = read_manifest(tmp_path / "r")
    assert record["arrays"][0]["state"] == "submitted" and record["arrays"][0]["job_id"] == "4100"
    assert record["submissions"]["jax"]["task_ids"] == ["4100_0", "4100_1", "4100_2"]


def test_an_unknown_array_that_sacct_does_not_list_yet_is_found_by_squeue(tmp_path, cluster):
    """Accounting lags the controller (and lists a held array only once it is eligible): an array accepted a moment
    ago is in squeue and not yet in sacct. It is found, not taken for never accepted and submitted a second time."""
    env, run = cluster
    bin_dir = Path(env["PATH"].split(":")[0])
    fake_tools(bin_dir, sbatch="exec sleep 30\n")
    env.update(ORCHESTRATOR_SBATCH_TIMEOUT_S="1", ORCHESTRATOR_SBATCH_SLOW_S="0.5")
    assert run(timeout=25).returncode == 1
    name = read_manifest(tmp_path / "r")["arrays"][0]["job_name"]
    fake_tools(bin_dir, sbatch=fake_sbatch(tmp_path / "sbatch_calls.txt", answer="echo 4200\n", job_name=True))
    fake_tools(bin_dir, sacct="exit 0\n")  # no record yet
    fake_tools(bin_dir, squeue=f'case "$*" in *--name=*{name}*) echo "4100|{name}";; '
                               '*4100*) printf "4100_0 PENDING\\n4100_1 PENDING\\n4100_2 PENDING\\n";; esac\n')
    proc = run()
    no_traceback(proc)
    assert proc.returncode == 0, proc.stderr
    assert "whose submission was unknown is found as job 4100" in proc.stdout
    assert [line.split()[0].split(":")[0] for line in calls(tmp_path)] == ["torch"]  # jax not again

    # Neither lists it, and squeue could not be asked: it stays unknown, and nothing is submitted.
    record = read_manifest(tmp_path / "r")
    record["arrays"][0]["state"] = "unknown"
    del record["submissions"]["jax"]
    next((tmp_path / "r").glob("*/manifest.json")).write_text(json.dumps(record))
    fake_tools(bin_dir, squeue="echo 'slurm_load_jobs error: Socket timed out' >&2\nexit 1\n")
    proc = run()
    assert proc.returncode == 1 and "nothing was submitted" in proc.stderr, proc.stdout + proc.stderr
    assert read_manifest(tmp_path / "r")["arrays"][0]["state"] == "unknown" and len(calls(tmp_path)) == 1


def test_a_manifest_that_cannot_be_written_after_sbatch_names_the_job_id(tmp_path, cluster):
    env, run = cluster
    # sbatch accepts the array, and then the manifest cannot be replaced (a folder now stands in its place).
    fake_tools(Path(env["PATH"].split(":")[0]),
               sbatch=f'm=$(ls -d {shlex.quote(str(tmp_path / "r"))}/*/manifest.json)\nrm -f "$m"\nmkdir "$m"\n'
                      'echo 4001\n')
    proc = run()
    no_traceback(proc)
    assert proc.returncode == 1
    [line] = proc.stderr.strip().splitlines()
    assert line.startswith("error: job 4001 (jax, array tasks 0 to 2) was submitted, but ") and "scancel 4001" in line


def test_a_limit_is_one_sentence_that_says_what_to_do_and_the_manifest_says_refused(tmp_path, cluster):
    env, run = cluster
    fake_tools(Path(env["PATH"].split(":")[0]),
               sbatch="echo 'sbatch: error: AssocMaxSubmitJobLimit' >&2\n"
                      "echo 'sbatch: error: Batch job submission failed: Job violates accounting/QOS policy "
                      "(job submit limit, user'\"'\"'s size and/or time limits)' >&2\nexit 1\n")
    proc = run()
    no_traceback(proc)
    assert proc.returncode == 1
    [line] = proc.stderr.strip().splitlines()
    assert "AssocMaxSubmitJobLimit" in line and "your association's MaxSubmitJobs is reached" in line
    assert "run the same command again once jobs have left the queue" in line
    [array] = read_manifest(tmp_path / "r")["arrays"]
    assert array["state"] == "refused" and "AssocMaxSubmitJobLimit" in array["reason"]


def test_the_same_command_twice_at_once_submits_once_and_the_second_names_the_first(tmp_path, cluster):
    env, run = cluster
    started, go = tmp_path / "sbatch_started", tmp_path / "go"  # sbatch is held until the second has run
    fake_tools(Path(env["PATH"].split(":")[0]),
               sbatch=f'touch "{started}"\n' + fake_sbatch(tmp_path / "sbatch_calls.txt", shell_wait_for(go),
                                                            job_name=True))
    first = subprocess.Popen([sys.executable, str(REPO_ROOT / "main.py"), *ARGS, "--profile", str(tmp_path / "p.toml"),
                              "--results-dir", str(tmp_path / "r"), "--scripts-dir", str(tmp_path / "s")],
                             env=env, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_until(started.exists, first)
    second = run()
    go.touch()
    _, err = first.communicate(timeout=60)
    assert first.returncode == 0, err
    no_traceback(second)
    assert second.returncode == 1
    [line] = second.stderr.strip().splitlines()
    assert line.startswith("error: `") and f"(pid {first.pid} on " in line and ".launch.lock" in line
    assert len(calls(tmp_path)) == 2  # jax and torch, once each
    assert len(list((tmp_path / "r").glob("*/manifest.json"))) == 1


def test_a_campaign_over_a_known_submit_limit_is_refused_at_plan_time_with_the_numbers(tmp_path, cluster):
    env, run = cluster
    bin_dir = Path(env["PATH"].split(":")[0])
    fake_tools(bin_dir, sacctmgr='case "$*" in *assoc*) echo "acct|||normal";; *qos*) echo "normal|4|";; esac\n')
    proc = run()
    no_traceback(proc)
    assert proc.returncode == 2
    [line] = proc.stderr.strip().splitlines()
    assert "the campaign has 6 array tasks" in line and "MaxSubmitJobsPerUser of QOS normal is 4" in line
    assert "pair them into fewer jobs (--paired: 3)" in line  # 3 pairs, a job each
    assert calls(tmp_path) == [] and not list((tmp_path / "r").glob("*/manifest.json"))
    fake_tools(bin_dir, sacctmgr="exit 0\n")
    fake_tools(bin_dir, scontrol='echo "MaxArraySize            = 1001"\necho "MaxJobCount             = 5"\n')
    proc = run()
    assert proc.returncode == 2 and "the controller's MaxJobCount is 5" in proc.stderr


def test_the_limit_counts_the_jobs_as_submitted_paired_trials_and_packs_and_names_the_pack_that_fits(tmp_path,
                                                                                                     cluster):
    env, run = cluster
    fake_tools(Path(env["PATH"].split(":")[0]), sacctmgr='case "$*" in *qos*) echo "normal|2|";; esac\n')
    # 3 pairs of 3 trials each, a job per pair: 3 jobs (a pair's task runs all its trials), over the limit of 2.
    proc = run("--paired", "--pack", "0", "--trials", "3")
    no_traceback(proc)
    assert proc.returncode == 2 and calls(tmp_path) == []
    [line] = proc.stderr.strip().splitlines()
    assert "the campaign has 3 array tasks" in line and "(--paired --pack 2: 2)" in line, line
    proc = run("--paired", "--trials", "3", "--pack", "2")  # the pack it named: 2 jobs, within the limit
    assert proc.returncode == 0, proc.stderr
    assert len(calls(tmp_path)) == 1 and read_manifest(tmp_path / "r")["scripts"]["paired"]["array_tasks"] == 2


def test_a_resubmission_whose_sbatch_gave_no_answer_is_found_again_before_the_next(tmp_path, cluster):
    """`resubmit` names its arrays too and records an unknown outcome at once; the next resubmit looks the
    array up in Slurm by that name and submits nothing for the cells it holds."""
    env, run = cluster
    bin_dir = Path(env["PATH"].split(":")[0])
    assert run().returncode == 0  # jobs 4001 (jax) and 4002 (torch); nothing queued, no result: all to rerun
    fake_tools(bin_dir, sbatch="exec sleep 30\n")
    env.update(ORCHESTRATOR_SBATCH_TIMEOUT_S="1", ORCHESTRATOR_SBATCH_SLOW_S="0.5")
    resubmit = run_cli("resubmit", "--results-dir", str(tmp_path / "r"), env=env, timeout=30)
    no_traceback(resubmit)
    assert resubmit.returncode == 1
    [unknown] = [a for a in read_manifest(tmp_path / "r")["arrays"] if a["state"] == "unknown"]
    name = unknown["job_name"]
    assert name.endswith(":rerun1") and unknown["indices"] == [0, 1, 2]
    # Slurm had accepted it as job 4300, whose tasks are pending.
    fake_tools(bin_dir, sbatch=fake_sbatch(tmp_path / "sbatch_calls.txt", answer="echo 4400\n", job_name=True))
    fake_tools(bin_dir, sacct=f'case "$*" in *--name=*{name}*) echo "4300_[0-2]|{name}";; '
                              '*4300*) echo "4300_[0-2]|PENDING";; esac\n')
    fake_tools(bin_dir, squeue='case "$*" in *4300*) printf "4300_0 PENDING\\n4300_1 PENDING\\n4300_2 PENDING\\n";; esac\n')
    before = len(calls(tmp_path))
    again = run_cli("resubmit", "--results-dir", str(tmp_path / "r"), env=env, timeout=30)
    no_traceback(again)
    assert again.returncode == 0, again.stderr
    assert "whose submission was unknown is found as job 4300" in again.stdout
    submitted = calls(tmp_path)[before:]
    assert all(line.split()[-1].endswith("torch_digits_1.sh") for line in submitted) and submitted  # jax not again
    assert read_manifest(tmp_path / "r")["submissions"]["jax"]["task_ids"] == ["4300_0", "4300_1", "4300_2"]


# --- submitit: its arrays are named and recorded as sbatch's are ---------------------------------------------

def submitit_sbatch(tmp_path, then: str = "") -> str:
    """A fake sbatch as submitit calls it (`sbatch FILE`, the job name in FILE's #SBATCH lines): it records the
    name, runs `then` (which may exit), and answers as sbatch does without --parsable."""
    calls = tmp_path / "sbatch_calls.txt"
    return fake_sbatch(calls, then, f'n=$(wc -l < "{calls}")\necho "Submitted batch job $((4000 + n))"\n',
                       job_name=True)


def test_submitit_names_each_array_and_records_it_at_once(tmp_path, cluster):
    env, run = cluster
    fake_tools(Path(env["PATH"].split(":")[0]), sbatch=submitit_sbatch(tmp_path))
    proc = run("--executor", "submitit")
    no_traceback(proc)
    assert proc.returncode == 0, proc.stderr
    record = read_manifest(tmp_path / "r")
    campaign = record["campaign"]
    assert [line.split()[0] for line in calls(tmp_path)] == [f"jax:{campaign}:0", f"torch:{campaign}:0"]
    assert [(a["script"], a["state"], a["job_id"], a["job_name"]) for a in record["arrays"]] == [
        ("jax", "submitted", "4001", f"jax:{campaign}:0"), ("torch", "submitted", "4002", f"torch:{campaign}:0")]
    assert record["submissions"]["jax"]["task_ids"] == ["4001_0", "4001_1", "4001_2"]
    # Not waited for, its tasks may still be queued: said as for sbatch, never "6 of 6 array tasks finished".
    assert proc.stdout.strip().splitlines()[-1].startswith("submitted; follow with squeue, then run: "), proc.stdout


def test_a_submitit_refusal_is_one_sentence_and_recorded_as_refused(tmp_path, cluster):
    env, run = cluster
    fake_tools(Path(env["PATH"].split(":")[0]), sbatch=submitit_sbatch(
        tmp_path, "echo 'sbatch: error: QOSMaxSubmitJobPerUserLimit' >&2\necho 'sbatch: error: Batch job submission "
                  "failed: Job violates accounting/QOS policy' >&2\nexit 1"))
    proc = run("--executor", "submitit")
    no_traceback(proc)
    assert proc.returncode == 1
    [line] = proc.stderr.strip().splitlines()
    assert "QOSMaxSubmitJobPerUserLimit" in line and "your QOS's MaxSubmitJobsPerUser is reached" in line
    [array] = read_manifest(tmp_path / "r")["arrays"]
    assert array["state"] == "refused" and array["job_name"].startswith("jax:")


def test_an_unknown_submitit_array_is_found_again_before_anything_is_submitted_twice(tmp_path, cluster):
    """submitit raised after its sbatch call (here: an answer it cannot read): the array is recorded as unknown
    under its job name. The same command again finds it in Slurm by that name; since submitit never learnt its id,
    its tasks cannot get their work, so it is cancelled (never left to fail, or to run beside a second array),
    and its cells are submitted once more."""
    env, run = cluster
    bin_dir = Path(env["PATH"].split(":")[0])
    fake_tools(bin_dir, sbatch=submitit_sbatch(tmp_path, "echo 'sbatch: slurm_receive_msg: Socket timed out'\nexit 0"))
    proc = run("--executor", "submitit")
    no_traceback(proc)
    assert proc.returncode == 1
    [line] = proc.stderr.strip().splitlines()
    assert "submitit's sbatch call for " in line and "whether Slurm accepted it is unknown" in line
    [array] = read_manifest(tmp_path / "r")["arrays"]
    name = array["job_name"]
    campaign = read_manifest(tmp_path / "r")["campaign"]
    assert array["state"] == "unknown" and name == f"jax:{campaign}:0"
    fake_tools(bin_dir, sbatch=submitit_sbatch(tmp_path))
    fake_tools(bin_dir, sacct=f'case "$*" in *--name=*{name}*) echo "4100_[0-2]|{name}";; '
                              '*4100*) echo "4100_[0-2]|PENDING";; esac\n')
    fake_tools(bin_dir, scancel=f'echo "$*" >> "{tmp_path / "scancel_calls.txt"}"\n')
    proc = run("--executor", "submitit")
    no_traceback(proc)
    assert proc.returncode == 0, proc.stderr
    assert ("jax: the array at offset 0 whose submission was unknown is found as job 4100; submitit never learnt "
            "its job id, so its tasks could not get their work: it was cancelled") in proc.stdout
    assert (tmp_path / "scancel_calls.txt").read_text() == "4100\n"
    assert [line.split()[0].split(":")[0] for line in calls(tmp_path)] == ["jax", "jax", "torch"]
    record = read_manifest(tmp_path / "r")
    assert [(a["state"], a.get("job_id")) for a in record["arrays"]] == [
        ("cancelled", "4100"), ("submitted", "4002"), ("submitted", "4003")]
    assert record["submissions"]["jax"]["task_ids"] == ["4002_0", "4002_1", "4002_2"]


def test_a_submitit_resubmission_is_named_recorded_and_numbered_in_order(tmp_path, cluster):
    """submitit numbers a resubmitted array's tasks 0, 1, ... in the order of their cells (cells 0 and 2 run as
    tasks 0 and 1), both when submitit answers and when its array, found again after an unknown outcome, could not
    be cancelled."""
    env, run = cluster
    bin_dir = Path(env["PATH"].split(":")[0])
    fake_tools(bin_dir, sbatch=submitit_sbatch(tmp_path))
    assert run("--executor", "submitit").returncode == 0  # 4001 (jax), 4002 (torch)
    record = read_manifest(tmp_path / "r")
    for cell in record["cells"]:
        if cell["framework"] == "torch" or cell["array_index"] == 1:
            write_result(Path(cell["results"]), cell["cell_id"])
    fake_tools(bin_dir, sbatch=submitit_sbatch(tmp_path, "echo 'garbled'\nexit 0"))
    resubmit = run_cli("resubmit", "--results-dir", str(tmp_path / "r"), env=env)
    no_traceback(resubmit)
    assert resubmit.returncode == 1 and "is unknown" in resubmit.stderr
    [unknown] = [a for a in read_manifest(tmp_path / "r")["arrays"] if a["state"] == "unknown"]
    assert unknown["job_name"] == f"jax:{record['campaign']}:0:rerun1" and unknown["indices"] == [0, 2]
    name = unknown["job_name"]
    fake_tools(bin_dir, sacct=f'case "$*" in *--name=*{name}*) echo "4300_[0-1]|{name}";; '
                              '*4300*) echo "4300_[0-1]|PENDING";; esac\n')
    fake_tools(bin_dir, squeue='case "$*" in *4300*) printf "4300_0 PENDING\\n4300_1 PENDING\\n";; esac\n')
    fake_tools(bin_dir, sbatch=submitit_sbatch(tmp_path))
    # scancel fails (it is already gone from the queue, say): the array stays as found, its tasks numbered in order.
    fake_tools(bin_dir, scancel="echo 'scancel: error: Kill job error on job id 4300: Job/step already completing "
                                "or completed' >&2\nexit 1\n")
    before = len(calls(tmp_path))
    again = run_cli("resubmit", "--results-dir", str(tmp_path / "r"), env=env)
    no_traceback(again)
    assert again.returncode == 0, again.stderr
    assert "found as job 4300" in again.stdout and "nothing to submit" in again.stdout
    assert len(calls(tmp_path)) == before
    assert read_manifest(tmp_path / "r")["submissions"]["jax"]["task_ids"] == ["4300_0", "4001_1", "4300_1"]

    # Cell 1's result turns out bad: submitit answers this time, with one task, which it submits as a plain job.
    Path(record["cells"][1]["results"]).write_bytes(b"")
    fake_tools(bin_dir, sacct='case "$*" in *4300*) echo "4300_[0-1]|COMPLETED";; esac\n')
    fake_tools(bin_dir, squeue="exit 0\n")
    for cell in (record["cells"][0], record["cells"][2]):
        write_result(Path(cell["results"]), cell["cell_id"])
    third = run_cli("resubmit", "--results-dir", str(tmp_path / "r"), env=env)
    assert third.returncode == 0, third.stderr
    [line] = calls(tmp_path)[before:]
    assert line.split()[0] == f"jax:{record['campaign']}:1:rerun2"
    job = str(4000 + len(calls(tmp_path)))
    record = read_manifest(tmp_path / "r")
    assert record["submissions"]["jax"]["task_ids"] == ["4300_0", job, "4300_1"]  # one task: a plain job
    assert record["arrays"][-1] == {**record["arrays"][-1], "state": "submitted", "job_id": job, "indices": [1]}


def test_a_slow_submitit_sbatch_is_said_while_it_waits(tmp_path, cluster):
    env, run = cluster
    fake_tools(Path(env["PATH"].split(":")[0]), sbatch=submitit_sbatch(tmp_path, "sleep 1.5"))
    env.update(ORCHESTRATOR_SBATCH_SLOW_S="0.5")
    proc = run("--executor", "submitit")
    no_traceback(proc)
    assert proc.returncode == 0, proc.stderr
    waiting = [line for line in proc.stderr.splitlines() if re.match(r"sbatch has not answered for \d+ s: ", line)]
    # Once per framework's array, as for sbatch: submitit's sbatch call has the same time limit.
    assert len(waiting) == 2 and waiting[0].endswith("waiting up to 120 s"), proc.stderr


def test_an_unknown_array_is_never_submitted_again_while_the_queue_cannot_be_read(tmp_path, cluster):
    """A hung sbatch that in fact accepted the campaign's only array, then squeue and sacct failing.
    Before, with no job id to ask about, the queue counted as readable: the cell was "not submitted", the same
    command submitted it again, status said 1/1 ended and exit 0, and watch stopped at once."""
    env, run = cluster
    bin_dir = Path(env["PATH"].split(":")[0])
    fake_tools(bin_dir, sbatch=fake_sbatch(tmp_path / "sbatch_calls.txt", "exec sleep 30\n", job_name=True))
    env.update(ORCHESTRATOR_SBATCH_TIMEOUT_S="1", ORCHESTRATOR_SBATCH_SLOW_S="0.5")
    assert run("--frameworks", "jax", timeout=25).returncode == 1
    for tool in ("squeue", "sacct"):
        fake_tools(bin_dir, **{tool: f"echo '{tool}: error: Socket timed out on send/recv operation' >&2\nexit 1\n"})
    again = run("--frameworks", "jax")
    assert again.returncode == 1 and "nothing was submitted" in again.stderr, again.stdout + again.stderr
    assert "the answer to their array's submission was lost" in again.stderr
    assert len(calls(tmp_path)) == 1  # sbatch was not called again
    results = ["--results-dir", str(tmp_path / "r")]
    status = run_cli("status", *results, env=env)
    assert status.returncode == 3 and re.search(r"jax +0 +\S+ +unknown +the answer to its array's submission was "
                                                r"lost", status.stdout), status.stdout
    assert "0/3 ended (3 unknown)" in status.stdout
    resubmit = run_cli("resubmit", *results, env=env)
    assert resubmit.returncode == 1 and len(calls(tmp_path)) == 1
    watch = run_cli("watch", "--interval", "0.2", *results, env={**env, "ORCHESTRATOR_WATCH_UNREADABLE_S": "2"},
                    timeout=60)
    assert watch.returncode == 3, watch.stdout + watch.stderr  # waited, then said unknown: never "ended"


SOCKET_TIMEOUT = "sbatch: error: Batch job submission failed: Socket timed out on send/recv operation"


@pytest.mark.parametrize("executor", ["slurm", "submitit"])
def test_an_sbatch_that_lost_the_controllers_answer_is_unknown_and_found_again_by_name(tmp_path, cluster, executor):
    """sbatch exits 1 after "Socket timed out on send/recv operation", yet the controller took the
    array (as job 4100). Before, that was a refusal, and the next run submitted the cells again."""
    env, run = cluster
    bin_dir = Path(env["PATH"].split(":")[0])
    lost = f"echo '{SOCKET_TIMEOUT}' >&2\nexit 1"
    fake_tools(bin_dir, sbatch=submitit_sbatch(tmp_path, lost) if executor == "submitit" else
               fake_sbatch(tmp_path / "sbatch_calls.txt", f"{lost}\n", job_name=True))
    proc = run("--executor", executor, "--frameworks", "jax")
    no_traceback(proc)
    assert proc.returncode == 1 and "whether Slurm accepted it is unknown" in proc.stderr, proc.stderr
    assert "Socket timed out" in proc.stderr
    [array] = read_manifest(tmp_path / "r")["arrays"]
    assert array["state"] == "unknown", array
    name = array["job_name"]
    fake_tools(bin_dir, sacct=f'case "$*" in *--name=*{name}*) echo "4100_[0-2]|{name}";; '
                              '*4100*) echo "4100_[0-2]|PENDING";; esac\n')
    fake_tools(bin_dir, squeue='case "$*" in *4100*) printf "4100_0 PENDING\\n4100_1 PENDING\\n4100_2 PENDING\\n";; esac\n')
    fake_tools(bin_dir, scancel="exit 0\n")  # a submitit array found so is cancelled (reconcile.ORPHAN)
    again = run("--executor", executor, "--frameworks", "jax")
    assert "whose submission was unknown is found as job 4100" in again.stdout, again.stdout + again.stderr
    assert len(calls(tmp_path)) == (1 if executor == "slurm" else 2)  # submitit's orphan goes again; sbatch's not


def test_only_sbatchs_own_error_is_a_refusal():
    from orchestrator.run.sbatch_call import is_refusal

    assert is_refusal("sbatch: error: Batch job submission failed: Invalid account or account/partition combination")
    assert not is_refusal(SOCKET_TIMEOUT)
    assert not is_refusal("sbatch: error: Batch job submission failed: Unable to contact slurm controller (connect "
                          "failure)")
    assert not is_refusal("")  # exit 1 and no words: nothing says that nothing was submitted


def test_sbatch_gets_the_campaigns_own_script_not_the_shared_latest_copy(tmp_path, cluster):
    """Campaign A's sbatch is slow to read its script, and meanwhile a dry run of campaign B (other
    batch sizes, the same script names) rewrites slurm_scripts/. Before, A's array ran B's script: B's cells,
    written into B's folder, under A's job id."""
    env, run = cluster
    submitted = tmp_path / "submitted"
    submitted.mkdir()
    started, go = tmp_path / "sbatch_started", tmp_path / "go"  # A's sbatch is held until B has run
    fake_tools(Path(env["PATH"].split(":")[0]),
               sbatch=f'touch "{started}"\n{shell_wait_for(go)}'
                      f'for arg in "$@"; do case "$arg" in *.sh) cp "$arg" "{submitted}/$SBATCH_JOB_NAME.sh";; esac; '
                      'done\n'
                      + fake_sbatch(tmp_path / "sbatch_calls.txt", answer="echo 4001\n", job_name=True))
    a = subprocess.Popen([sys.executable, str(REPO_ROOT / "main.py"), *ARGS, "--frameworks", "jax", "--profile",
                          str(tmp_path / "p.toml"), "--results-dir", str(tmp_path / "r"), "--scripts-dir",
                          str(tmp_path / "s")], env=env, cwd=REPO_ROOT, text=True, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)
    wait_until(started.exists, a)
    b = run_cli("--benchmark", "digits", "--use-case", "1", "--batch-sizes", "64,128", "--frameworks", "jax",
                "--dry-run", "--profile", str(tmp_path / "p.toml"), "--results-dir", str(tmp_path / "rb"),
                "--scripts-dir", str(tmp_path / "s"), env=env)
    assert b.returncode == 0, b.stderr
    go.touch()
    out, err = a.communicate(timeout=60)
    assert a.returncode == 0, out + err
    record = read_manifest(tmp_path / "r")
    info = record["scripts"]["jax"]
    (copy,) = submitted.iterdir()
    assert copy.read_text() == Path(info["campaign_copy"]).read_text()  # A's own script, with A's cells
    assert Path(info["path"]).read_text() != copy.read_text()  # the latest copy is now B's, for reading


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGHUP, signal.SIGTERM, signal.SIGKILL],
                         ids=lambda s: s.name)
def test_a_command_stopped_while_sbatch_works_leaves_the_array_unknown_and_the_rerun_finds_it(tmp_path, cluster,
                                                                                              signum):
    """Ctrl-C, a dropped ssh session, a kill (even -9) while a slow sbatch works, which in fact took
    the array as job 4100. Before, nothing was recorded and the rerun submitted the cells again."""
    env, run = cluster
    bin_dir = Path(env["PATH"].split(":")[0])
    started = tmp_path / "sbatch_started"
    fake_tools(bin_dir, sbatch=fake_sbatch(tmp_path / "sbatch_calls.txt", f'touch "{started}"\nexec sleep 30\n',
                                           job_name=True))
    launch = subprocess.Popen([sys.executable, str(REPO_ROOT / "main.py"), *ARGS, "--frameworks", "jax", "--profile",
                               str(tmp_path / "p.toml"), "--results-dir", str(tmp_path / "r"), "--scripts-dir",
                               str(tmp_path / "s")], env=env, cwd=REPO_ROOT, text=True, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, start_new_session=True,  # a signal for it alone, not sbatch
                              preexec_fn=default_signals)
    wait_until(started.exists, launch)
    launch.send_signal(signum)
    _, err = launch.communicate(timeout=60)
    if signum != signal.SIGKILL:
        assert launch.returncode == 128 + signum and err.strip().splitlines()[-1] == f"error: stopped by {signum.name}"
    [array] = read_manifest(tmp_path / "r")["arrays"]
    assert array["state"] == "unknown" and "stopped or killed" in array["reason"], array
    name = array["job_name"]
    fake_tools(bin_dir, sbatch=fake_sbatch(tmp_path / "sbatch_calls.txt", answer="echo 4200\n", job_name=True))
    fake_tools(bin_dir, sacct=f'case "$*" in *--name=*{name}*) echo "4100_[0-2]|{name}";; '
                              '*4100*) echo "4100_[0-2]|PENDING";; esac\n')
    fake_tools(bin_dir, squeue='case "$*" in *4100*) printf "4100_0 PENDING\\n4100_1 PENDING\\n4100_2 PENDING\\n";; esac\n')
    again = run("--frameworks", "jax")
    assert again.returncode == 0, again.stdout + again.stderr
    assert "whose submission was unknown is found as job 4100" in again.stdout
    assert len(calls(tmp_path)) == 1  # not submitted again
    assert read_manifest(tmp_path / "r")["submissions"]["jax"]["task_ids"] == ["4100_0", "4100_1", "4100_2"]


# --- Nothing run twice: refusals, lost answers, damaged manifests, orphan sbatch calls --------------------------------

UNMATCHED = "sbatch: fatal: {script}: line 12: Unmatched `'` in [--output=/scratch/o'brien/r/logs/x_%A_%a.out]"
GETOPT = "sbatch: unrecognized option '--nosuch'\nTry \"sbatch --help\" for more information"


@pytest.mark.parametrize("said, code", [(UNMATCHED, 1), (GETOPT, 255)], ids=["fatal", "getopt"])
def test_sbatchs_fatal_error_is_a_refusal_not_an_unknown_outcome(tmp_path, cluster, said, code):
    """An sbatch that cannot parse a line of the script (`fatal:`) or an option (getopt's words, then
    Slurm's `Try "sbatch --help"`) submitted nothing. Before, that was "unknown": every rerun said "never
    accepted" and failed the same way, status exited 3 and watch polled for ten minutes."""
    env, run = cluster
    bin_dir = Path(env["PATH"].split(":")[0])
    refuse = f"cat >&2 <<'SAID'\n{said.format(script='$1')}\nSAID\nexit {code}\n"
    fake_tools(bin_dir, sbatch=fake_sbatch(tmp_path / "sbatch_calls.txt", refuse, job_name=True))
    for attempt in (1, 2):
        proc = run("--frameworks", "jax")
        no_traceback(proc)
        assert proc.returncode == 1, proc.stderr
        [line] = proc.stderr.strip().splitlines()
        assert line.startswith("error: sbatch refused ") and "unknown" not in line, line
        assert "never accepted" not in proc.stdout
        assert [a["state"] for a in read_manifest(tmp_path / "r")["arrays"]] == ["refused"] * attempt
        assert len(calls(tmp_path)) == attempt  # nothing was submitted: the rerun asks sbatch again
    results = ["--results-dir", str(tmp_path / "r")]
    status = run_cli("status", *results, env=env)
    assert status.returncode == 0 and "unknown" not in status.stdout, status.stdout + status.stderr
    watch = run_cli("watch", "--interval", "0.05", *results, env=env, timeout=30)
    assert watch.returncode == 1 and "not submitted" in watch.stderr, watch.stdout + watch.stderr


def test_a_lost_answer_is_said_once_in_the_sentence_of_unknown_cells(tmp_path, cluster):
    """The sentence for cells whose array's answer was lost said so twice ("was lost (the answer to its
    array's submission was lost (...")."""
    env, run = cluster
    fake_tools(Path(env["PATH"].split(":")[0]), sbatch="exit 1\n")  # silence: it may have been accepted
    assert run("--frameworks", "jax").returncode == 1
    status = run_cli("status", "--results-dir", str(tmp_path / "r"), env=env)
    assert status.returncode == 3, status.stdout + status.stderr
    [line] = status.stderr.strip().splitlines()
    assert line.count("submission was lost") == 1, line
    assert line.startswith("error: 3 cells may still be queued or running, and the answer to their array's "
                           "submission was lost (sbatch exited with status 1 for "), line


def test_a_damaged_manifest_is_one_sentence_for_every_command_and_never_planned_over(tmp_path, cluster):
    """A campaign's manifest.json cut short. Before, status, resubmit and watch ended in a
    JSONDecodeError, collect merged and then crashed, and the same command again planned a second campaign (the
    search for the same one skipped what it could not read) and submitted its cells again."""
    env, run = cluster
    assert run("--frameworks", "jax").returncode == 0
    [path] = (tmp_path / "r").glob("*/manifest.json")
    campaign = path.parent.name
    path.write_text(path.read_text()[:300])  # cut short, as by a disk that filled up under another tool
    results = ("--results-dir", str(tmp_path / "r"))
    commands = {"status": ("status", *results), "status --campaign": ("status", "--campaign", campaign, *results),
                "resubmit": ("resubmit", *results), "watch": ("watch", "--interval", "0.05", *results),
                "campaigns": ("campaigns", *results), "collect": ("collect", *results)}
    for name, argv in commands.items():
        proc = run_cli(*argv, env=env, timeout=60)
        no_traceback(proc)
        assert proc.returncode == 1, (name, proc.stdout, proc.stderr)
        [line] = proc.stderr.strip().splitlines()[-1:]
        assert line.startswith(f"error: campaign {campaign}'s manifest {path} cannot be read ("), (name, line)
        assert "nothing is planned or submitted over it" in line and "--benchmark digits" in line, (name, line)
    assert "merged 0 rows" in run_cli(*commands["collect"], env=env).stdout  # merged all the same, then said
    again = run("--frameworks", "jax")
    no_traceback(again)
    assert again.returncode == 1 and f"campaign {campaign}'s manifest" in again.stderr, again.stdout + again.stderr
    assert len(calls(tmp_path)) == 1  # nothing submitted again
    assert [p.parent.name for p in (tmp_path / "r").glob("*/manifest.json")] == [campaign]  # no second campaign


def manifest_of_another_kind(data: dict, change: str) -> dict:
    """A manifest as an earlier version wrote it (no version field; the first use case beside the list), as a later
    one may (a higher version), or with a field this version needs taken out."""
    from orchestrator.plan.manifest import VERSION

    if change == "earlier":
        return {key: value for key, value in data.items() if key != "version"} | {"use_case": 1}
    if change == "later":
        return data | {"version": VERSION + 1}
    del data["cells"][0]["results"]
    return data


@pytest.mark.parametrize("change, said", [
    ("earlier", "was written by an earlier version of jaxtorch-bench (manifest version 1, this one reads {v}), so "
                "nothing is planned or submitted over it"),
    ("later", "was written by a later version of jaxtorch-bench (manifest version {w}, this one reads {v}): run that "
              "version on it"),
    ("a field missing", "cannot be read (cells[0].results is missing), so which of its cells were submitted is "
                        "unknown and nothing is planned or submitted over it"),
])
def test_a_manifest_of_another_version_is_one_sentence_for_every_command_and_never_planned_over(
        tmp_path, cluster, change, said):
    """No shim reads an earlier version's manifest (nor a later one's); each command says which
    version wrote it in one sentence, and where this version could plan anew, the command that does so."""
    from orchestrator.plan.manifest import VERSION

    env, run = cluster
    assert run("--frameworks", "jax").returncode == 0
    [path] = (tmp_path / "r").glob("*/manifest.json")
    campaign = path.parent.name
    path.write_text(json.dumps(manifest_of_another_kind(json.loads(path.read_text()), change)))
    said = said.format(v=VERSION, w=VERSION + 1)
    results = ("--results-dir", str(tmp_path / "r"))
    for argv in (("status", *results), ("resubmit", *results), ("watch", "--interval", "0.05", *results),
                 ("campaigns", *results), ("collect", *results), ARGS):
        proc = run_cli(*argv, *(("--profile", str(tmp_path / "p.toml"), *results) if argv == ARGS else ()), env=env,
                       timeout=60)
        no_traceback(proc)
        assert proc.returncode == 1, (argv, proc.stdout, proc.stderr)
        [line] = proc.stderr.strip().splitlines()[-1:]
        assert line.startswith(f"error: campaign {campaign}'s manifest {path} {said}"), (argv, line)
        assert ("--benchmark digits" in line) == (change != "later"), (argv, line)  # the command that plans anew
    assert len(calls(tmp_path)) == 1  # nothing submitted again
    assert [p.parent.name for p in (tmp_path / "r").glob("*/manifest.json")] == [campaign]  # no second campaign


def alive(pid_file: Path) -> bool:
    """Whether the process whose pid the file holds still runs (a zombie, killed and not yet reaped, does not)."""
    try:
        stat = Path(f"/proc/{pid_file.read_text().strip()}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def launched(tmp_path, env, *extra) -> subprocess.Popen:
    """The launch command in its own session, so that a signal reaches it alone, as a `kill PID` does."""
    return subprocess.Popen([sys.executable, str(REPO_ROOT / "main.py"), *ARGS, "--frameworks", "jax", "--profile",
                             str(tmp_path / "p.toml"), "--results-dir", str(tmp_path / "r"), "--scripts-dir",
                             str(tmp_path / "s"), *extra], env=env, cwd=REPO_ROOT, text=True, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True, preexec_fn=default_signals)


@pytest.mark.parametrize("executor", ["slurm", "submitit"])
@pytest.mark.parametrize("stop", ["SIGTERM", "timeout"])
def test_sbatch_and_its_children_are_stopped_with_the_command(tmp_path, cluster, stop, executor):
    """A site's sbatch that is a wrapper, whose child submits. Before, a SIGTERM to the command left
    sbatch running (an orphan that accepted its array after the rerun had submitted the cells again), and the
    command's own timeout killed the wrapper alone, so that its child submitted later, untracked. submitit's
    sbatch call the same (found by the soak): a SIGTERM left the command waiting for its sbatch, which
    had no time limit, and then left the wrapper's child to submit."""
    env, _ = cluster
    go = tmp_path / "go"
    fake_tools(Path(env["PATH"].split(":")[0]),
               sbatch=f'echo $$ > "{tmp_path / "sbatch.pid"}"\n'
                      f'( echo $BASHPID > "{tmp_path / "child.pid"}"\n{shell_wait_for(go)}'
                      f'  echo accepted >> "{tmp_path / "accepted"}" ) &\n'
                      f'touch "{tmp_path / "started"}"\nexec sleep 30\n')
    if stop == "timeout":
        env.update(ORCHESTRATOR_SBATCH_TIMEOUT_S="2", ORCHESTRATOR_SBATCH_SLOW_S="0.5")
    launch = launched(tmp_path, env, "--executor", executor)
    wait_until(lambda: (tmp_path / "started").exists() and (tmp_path / "child.pid").exists(), launch)
    if stop == "SIGTERM":
        launch.send_signal(signal.SIGTERM)
    _, err = launch.communicate(timeout=60)
    assert launch.returncode == (143 if stop == "SIGTERM" else 1), err
    assert "Traceback" not in err, err
    wait_until(lambda: not alive(tmp_path / "sbatch.pid") and not alive(tmp_path / "child.pid"), seconds=10,
               what="sbatch and its child killed with the command")
    go.touch()  # what would have made the child submit: nothing is left to do it
    assert not (tmp_path / "accepted").exists()
    [array] = read_manifest(tmp_path / "r")["arrays"]
    assert array["state"] == "unknown" and "answer_by" in array, array


def orphan_sbatch(tmp_path, accept: Path) -> str:
    """A slow sbatch that, once `accept` exists, takes the array as job 4100: from then on squeue lists it by its
    job name (the file `named`) and its tasks as pending. The name is sbatch's (SBATCH_JOB_NAME) or submitit's
    (its file's #SBATCH line)."""
    named = tmp_path / "named"
    return fake_sbatch(tmp_path / "sbatch_calls.txt",
                       f'echo $$ > "{tmp_path / "sbatch.pid"}"\ntouch "{tmp_path / "started"}"\n'
                       f'{shell_wait_for(accept, 60)}[ -e "{accept}" ] || exit 1\necho "4100|$name" > "{named}"\n',
                       answer="echo 4100\n", job_name=True)


@pytest.mark.parametrize("executor", ["slurm", "submitit"])
def test_an_orphan_sbatch_of_a_killed_command_is_never_taken_for_never_accepted(tmp_path, cluster, executor):
    """`kill -9` while a slow sbatch works. The orphan sbatch lives on; the same command run at once
    must not conclude from an empty queue that the array was never accepted. Before, it said "not in Slurm: it
    was never accepted" and submitted the cells, and the orphan then accepted its own array: the cells ran twice.
    submitit's record of its call said no `answer_by` until the soak found it; the array its orphan
    accepts is then cancelled, as submitit's tasks cannot get their work, and its cells submitted once more."""
    env, run = cluster
    bin_dir = Path(env["PATH"].split(":")[0])
    accept = tmp_path / "accept"
    fake_tools(bin_dir, sbatch=orphan_sbatch(tmp_path, accept))
    fake_tools(bin_dir, squeue=f'case "$*" in *--name=*) cat "{tmp_path / "named"}" 2>/dev/null; true;; '
                               '*4100*) printf "4100_0 PENDING\\n4100_1 PENDING\\n4100_2 PENDING\\n";; esac\n')
    fake_tools(bin_dir, scancel=f'echo "$*" >> "{tmp_path / "scancel_calls.txt"}"\n')
    launch = launched(tmp_path, env, "--executor", executor)
    wait_until((tmp_path / "started").exists, launch)
    launch.kill()
    launch.communicate(timeout=60)
    assert alive(tmp_path / "sbatch.pid")  # SIGKILL: nothing could stop it
    again = run("--frameworks", "jax", "--executor", executor)
    no_traceback(again)
    assert again.returncode == 1 and "nothing was submitted" in again.stderr, again.stdout + again.stderr
    assert "its sbatch may still be accepted until " in again.stderr and "never accepted" not in again.stdout
    assert len(calls(tmp_path)) == 1
    accept.touch()  # the orphan's array is accepted now, after that run looked
    wait_until((tmp_path / "named").exists, what="the orphan's acceptance")
    if executor == "submitit":
        fake_tools(bin_dir, sbatch=submitit_sbatch(tmp_path))
    third = run("--frameworks", "jax", "--executor", executor)
    assert third.returncode == 0 and "is found as job 4100" in third.stdout, third.stdout + third.stderr
    if executor == "slurm":
        assert len(calls(tmp_path)) == 1  # the cells are queued once
        assert read_manifest(tmp_path / "r")["submissions"]["jax"]["task_ids"] == ["4100_0", "4100_1", "4100_2"]
    else:
        assert (tmp_path / "scancel_calls.txt").read_text() == "4100\n" and len(calls(tmp_path)) == 2
        assert [a["state"] for a in read_manifest(tmp_path / "r")["arrays"]] == ["cancelled", "submitted"]


@pytest.mark.parametrize("executor", ["slurm", "submitit"])
def test_an_orphan_sbatch_is_killed_by_its_watchdog_and_then_the_queue_has_the_last_word(tmp_path, cluster,
                                                                                         executor):
    """The orphan of a `kill -9` lives no longer than the command would have waited for it
    (ORCHESTRATOR_SBATCH_TIMEOUT_S): its watchdog kills it. Once that time and the grace for a request on its way
    (answer_by) are past, an array no lookup finds was never accepted, and its cells are submitted once. submitit's
    sbatch had no watchdog until the soak found it."""
    env, run = cluster
    fake_tools(Path(env["PATH"].split(":")[0]), sbatch=orphan_sbatch(tmp_path, tmp_path / "never"))
    env.update(ORCHESTRATOR_SBATCH_TIMEOUT_S="2")
    launch = launched(tmp_path, env, "--executor", executor)
    wait_until((tmp_path / "started").exists, launch)
    launch.kill()
    launch.communicate(timeout=60)
    wait_until(lambda: not alive(tmp_path / "sbatch.pid"), seconds=30, what="the watchdog's kill")
    [array] = read_manifest(tmp_path / "r")["arrays"]
    from orchestrator.plan.manifest import is_past

    wait_until(lambda: is_past(array["answer_by"]), seconds=60, poll_s=0.2, what="answer_by")
    fake_tools(Path(env["PATH"].split(":")[0]), sbatch=submitit_sbatch(tmp_path) if executor == "submitit" else
               fake_sbatch(tmp_path / "sbatch_calls.txt", answer="echo 4200\n", job_name=True))
    again = run("--frameworks", "jax", "--executor", executor)
    assert again.returncode == 0 and "never accepted" in again.stdout, again.stdout + again.stderr
    assert len(calls(tmp_path)) == 2
    assert read_manifest(tmp_path / "r")["submissions"]["jax"]["task_ids"][0] in ("4200_0", "4002_0")
