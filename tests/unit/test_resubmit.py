"""Only the cells without a result are submitted again, as one array per framework with only their indices;
status names each missing cell with its reason and the end of its log. Slurm is faked at the command line."""

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import (REPO_ROOT, fake_sbatch, fake_slurm_site, fake_tools, read_manifest, run_cli, shell_wait_for,
                     wait_until, write_result)

from bench_contract.run.failure import write_failure
from orchestrator.run.record import SUBMIT_LOCK
from orchestrator.run.executors.slurm import array_expression, blocks


@pytest.fixture
def queue_site(tmp_path):
    """sbatch numbering its jobs 4001, 4002, ...; sacct and squeue answering from files the test writes."""
    return fake_slurm_site(tmp_path, {
        "sacct": f'cat "{tmp_path}/sacct.txt" 2>/dev/null; true\n',
        # squeue fails (its words from squeue.fail on stderr, exit 1) while that file is there.
        "squeue": f'[ -f "{tmp_path}/squeue.fail" ] && {{ cat "{tmp_path}/squeue.fail" >&2; exit 1; }}\n'
                  f'cat "{tmp_path}/squeue.txt" 2>/dev/null; true\n',
        "scontrol": 'echo "MaxArraySize            = ${FAKE_MAX_ARRAY_SIZE:-1001}"\n',
    })


COMMAND = ("--benchmark", "digits", "--use-case", "1", "--batch-sizes", "8,16,32,64")


def submit_campaign(tmp_path, env, profile, *extra):
    proc = run_cli(*COMMAND, "--profile", str(profile), "--results-dir", str(tmp_path / "r"),
                   "--scripts-dir", str(tmp_path / "s"), *extra, env=env)
    assert proc.returncode == 0, proc.stderr
    return proc


def succeed(manifest, framework, index):
    cell = next(c for c in manifest["cells"] if c["framework"] == framework and c["array_index"] == index)
    write_result(cell["results"], cell["cell_id"])
    return cell


def test_resubmit_sends_only_the_missing_indices_and_status_names_each_reason(tmp_path, queue_site):
    env, calls, profile = queue_site
    submit_campaign(tmp_path, env, profile)
    manifest = read_manifest(tmp_path / "r")
    for index in (0, 2):
        succeed(manifest, "jax", index)
    for index in (0, 1, 2):
        succeed(manifest, "torch", index)
    crashed = next(c for c in manifest["cells"] if c["framework"] == "jax" and c["array_index"] == 1)
    write_failure(crashed["results"], {"cell_id": crashed["cell_id"]}, status="failed",
                  reason="exception: FileNotFoundError: no digits file (while loading the data)",
                  phase="loading the data", exit_code=1)
    folder = tmp_path / "r" / manifest["campaign"]
    (folder / "logs" / "jax_digits_1_4001_1.out").write_text("".join(f"line {i}\n" for i in range(30)))
    (tmp_path / "sacct.txt").write_text("4001_1|FAILED\n4001_3|TIMEOUT\n4002_3|PENDING\n")
    (tmp_path / "squeue.txt").write_text("4002_3 PENDING\n")

    status = run_cli("status", "--results-dir", str(tmp_path / "r"), "--log-lines", "3", env=env)
    assert status.returncode == 0, status.stderr
    assert "FAILED: exception: FileNotFoundError: no digits file (while loading the data)" in status.stdout
    assert "  | line 27\n  | line 28\n  | line 29\n" in status.stdout and "line 26" not in status.stdout
    assert "--- jax 3 (" in status.stdout and "timed out: TIMEOUT\n  (no log)" in status.stdout
    assert "2 cells ended without a result" in status.stdout

    proc = run_cli("resubmit", "--results-dir", str(tmp_path / "r"), env=env)
    assert proc.returncode == 0, proc.stderr
    jax_script = folder / "scripts" / "jax_digits_1.sh"
    # torch 3 is still pending and every other torch cell has a result: only jax goes again.
    assert calls.read_text().splitlines()[2:] == [f"--parsable --array=1,3 {jax_script}"]
    after = read_manifest(tmp_path / "r")
    assert after["submissions"]["jax"]["task_ids"] == ["4001_0", "4003_1", "4001_2", "4003_3"]
    assert [a["job_id"] for a in after["submissions"]["jax"]["arrays"]] == ["4001", "4003"]
    assert after["resubmissions"][0]["indices"] == [1, 3]

    (tmp_path / "sacct.txt").write_text("4001_1|FAILED\n4003_1|RUNNING\n4003_3|PENDING\n4002_3|PENDING\n")
    (tmp_path / "squeue.txt").write_text("4003_1 RUNNING\n4003_3 PENDING\n4002_3 PENDING\n")
    status = run_cli("status", "--results-dir", str(tmp_path / "r"), env=env)
    assert "RUNNING; previous attempt: exception: FileNotFoundError" in status.stdout
    again = run_cli("resubmit", "--results-dir", str(tmp_path / "r"), env=env)
    assert "nothing to submit" in again.stdout and len(calls.read_text().splitlines()) == 3


def test_the_same_command_again_completes_its_campaign(tmp_path, queue_site):
    env, calls, profile = queue_site
    submit_campaign(tmp_path, env, profile)
    manifest = read_manifest(tmp_path / "r")
    for framework in ("jax", "torch"):
        for index in (0, 1, 3):
            succeed(manifest, framework, index)
    (tmp_path / "sacct.txt").write_text("4001_2|CANCELLED by 0\n4002_2|NODE_FAIL\n")
    proc = submit_campaign(tmp_path, env, profile)
    assert "planned by the same command before" in proc.stdout
    assert read_manifest(tmp_path / "r")["campaign"] == manifest["campaign"]  # still one campaign
    folder = tmp_path / "r" / manifest["campaign"]
    assert calls.read_text().splitlines()[2:] == [
        f"--parsable --array=2 {folder / 'scripts' / 'jax_digits_1.sh'}",
        f"--parsable --array=2 {folder / 'scripts' / 'torch_digits_1.sh'}",
    ]
    # Asked to, it runs the completed cells again too; a separate campaign is another option.
    (tmp_path / "sacct.txt").write_text("")
    submit_campaign(tmp_path, env, profile, "--rerun-completed")
    assert calls.read_text().splitlines()[4].startswith("--parsable --array=0-3 ")
    submit_campaign(tmp_path, env, profile, "--new-campaign")
    assert len(list((tmp_path / "r").glob("*/manifest.json"))) == 2
    (new,) = [m.parent for m in (tmp_path / "r").glob("*/manifest.json") if m.parent != folder]
    assert calls.read_text().splitlines()[-1] == f"--parsable {new / 'scripts' / 'torch_digits_1.sh'}"  # its own copy


def test_a_changed_setting_is_a_new_campaign(tmp_path, queue_site):
    env, _, profile = queue_site
    submit_campaign(tmp_path, env, profile)
    submit_campaign(tmp_path, env, profile, "--epochs", "3")
    assert len(list((tmp_path / "r").glob("*/manifest.json"))) == 2


def test_indices_beyond_max_array_size_go_in_parts_with_their_offset(tmp_path, queue_site):
    env, calls, profile = queue_site
    env["FAKE_MAX_ARRAY_SIZE"] = "2"
    submit_campaign(tmp_path, env, profile, "--frameworks", "jax")
    manifest = read_manifest(tmp_path / "r")
    succeed(manifest, "jax", 0)
    proc = run_cli("resubmit", "--results-dir", str(tmp_path / "r"), env=env)
    assert proc.returncode == 0, proc.stderr
    script = tmp_path / "r" / manifest["campaign"] / "scripts" / "jax_digits_1.sh"
    assert calls.read_text().splitlines()[2:] == [f"--parsable --array=1 {script}",
                                                  f"--parsable --array=0-1 {script} 2"]
    assert read_manifest(tmp_path / "r")["submissions"]["jax"]["task_ids"] == ["4001_0", "4003_1", "4004_0", "4004_1"]


def test_array_expressions_and_parts():
    assert array_expression([9, 0, 1, 2, 5, 7, 8]) == "0-2,5,7-9"
    assert array_expression([3]) == "3"
    assert blocks([1, 3], None) == [(0, [1, 3])]
    assert blocks([1, 2, 5], 2) == [(0, [1]), (2, [0]), (4, [1])]


def test_collect_names_every_missing_cell_apart_from_the_measurements(tmp_path, queue_site):
    import pyarrow.parquet as pq

    env, _, profile = queue_site
    submit_campaign(tmp_path, env, profile, "--frameworks", "jax")
    manifest = read_manifest(tmp_path / "r")
    succeed(manifest, "jax", 0)
    Path(manifest["cells"][0]["results"]).unlink()  # collect reads results: make a real one
    from helpers import task_file
    real = task_file(tmp_path / "elsewhere", "jax", 8, 100.0, campaign=manifest["campaign"])
    Path(manifest["cells"][0]["results"]).write_bytes(real.read_bytes())
    oom = manifest["cells"][1]
    write_failure(oom["results"], {"cell_id": oom["cell_id"]}, status="failed", reason="out of memory: MemoryError",
                  phase="loading the data", exit_code=1)
    folder = tmp_path / "r" / manifest["campaign"]
    (folder / "logs" / "jax_digits_1_4001_1.out").write_text("start\nMemoryError\n")
    (tmp_path / "sacct.txt").write_text("4001_1|FAILED\n4001_2|CANCELLED by 0\n4001_3|COMPLETED\n")
    proc = run_cli("collect", "--results-dir", str(tmp_path / "r"), env=env)
    assert proc.returncode == 0, proc.stderr
    assert "3 cells have no result" in proc.stdout
    failures = pq.read_table(tmp_path / "r" / "failures.parquet").to_pylist()
    assert [(f["array_index"], f["state"], f["reason"]) for f in failures] == [
        (1, "failed", "FAILED: out of memory: MemoryError"),
        (2, "cancelled", "CANCELLED"),
        (3, "no result", "COMPLETED, but no result file"),
    ]
    assert failures[0]["log_tail"] == "start\nMemoryError" and "  | MemoryError" in proc.stdout
    merged = pq.read_table(tmp_path / "r" / "merged.parquet")
    assert set(merged["cell_id"].to_pylist()) == {"jax-8"}  # only the measurement, never a failure row


def test_the_local_executor_runs_only_the_missing_cells_again(tmp_path):
    """A stand-in environment whose `python` writes the cell's result file, except for the cells listed in
    broken.txt (it exits 1 for them): the campaign's local run fails there, and resubmit runs only those."""
    env_dir = tmp_path / "envs"
    ran = tmp_path / "ran.txt"
    for framework in ("jax", "torch"):
        bin_dir = env_dir / framework / "bin"
        bin_dir.mkdir(parents=True)
        (bin_dir / "activate").write_text(f'export PATH={shlex.quote(str(bin_dir))}:"$PATH"\n')
        fake_tools(bin_dir, python=(
            f'echo "{framework} $4" >> {shlex.quote(str(ran))}\n'
            f'grep -qx "{framework} $4" {shlex.quote(str(tmp_path / "broken.txt"))} && exit 1\n'
            'path=$(sed -n "$(( $4 + 1 ))p" "$3" | python3 -c "import json,sys; print(json.load(sys.stdin)[\'results_path\'])")\n'
            'mkdir -p "$(dirname "$path")"\n'
            f'{shlex.quote(sys.executable)} -c "import sys; sys.path[:0] = sys.argv[2:]; '
            'from helpers import write_result; write_result(sys.argv[1])" '
            f'"$path" {shlex.quote(str(REPO_ROOT))} {shlex.quote(str(REPO_ROOT / "tests"))}\n'))
    (tmp_path / "broken.txt").write_text("jax 1\ntorch 0\n")
    profile = tmp_path / "p.toml"
    profile.write_text(f"env_dir = {json.dumps(str(env_dir))}\n")
    proc = run_cli(*COMMAND, "--executor", "local", "--profile", str(profile), "--results-dir", str(tmp_path / "r"),
                   "--scripts-dir", str(tmp_path / "s"))
    assert proc.returncode == 1 and "FAILED jax array task 1" in proc.stdout
    assert "2 cells ended without a result" in run_cli("status", "--results-dir", str(tmp_path / "r")).stdout
    (tmp_path / "broken.txt").write_text("")
    ran.write_text("")
    proc = run_cli("resubmit", "--results-dir", str(tmp_path / "r"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert ran.read_text().splitlines() == ["jax 1", "torch 0"]
    status = run_cli("status", "--results-dir", str(tmp_path / "r")).stdout
    assert "8/8 ended (8 completed)" in status


@pytest.mark.parametrize("extra, script, expected", [
    # Each trial is its own task: only the trial without a result goes again.
    (("--trials", "2"), "jax", "--array=3"),
    # A paired task runs both frameworks' trials of one pair: it goes again when any of them lacks a result.
    (("--trials", "2", "--paired", "--pack", "0"), "paired", "--array=1"),
])
def test_trials_and_pairs_are_resubmitted_by_their_task(tmp_path, queue_site, extra, script, expected):
    env, calls, profile = queue_site
    submit_campaign(tmp_path, env, profile, *extra)
    manifest = read_manifest(tmp_path / "r")
    missing = next(c for c in manifest["cells"] if c["framework"] == "jax" and c["batch_size"] == 16
                   and c["trial"] == 1)
    for cell in manifest["cells"]:
        if cell is not missing:
            write_result(cell["results"], cell["cell_id"])
    proc = run_cli("resubmit", "--results-dir", str(tmp_path / "r"), env=env)
    assert proc.returncode == 0, proc.stderr
    name = manifest["scripts"][script]["name"]
    assert calls.read_text().splitlines()[len(manifest["submissions"]):] == [
        f"--parsable {expected} {tmp_path / 'r' / manifest['campaign'] / 'scripts' / name}"]


# --- Nothing lost, nothing run twice ----------------------------------------------------------------------

def real_result(manifest, cell):
    """The cell's result file as a backend writes it (every column), so that collect merges it."""
    from helpers import task_file

    made = task_file(Path(cell["results"]).parent / "made", cell["framework"], cell["batch_size"], 100.0,
                     campaign=manifest["campaign"])
    Path(cell["results"]).parent.mkdir(parents=True, exist_ok=True)
    made.replace(cell["results"])


def sbatch_lines(calls):
    return calls.read_text().splitlines()[2:]  # after the campaign's own two


@pytest.mark.parametrize("again", ["resubmit", "the same command"])
def test_a_bad_result_is_moved_aside_and_its_cell_runs_again(tmp_path, queue_site, again):
    """An empty or truncated result file is no result. resubmit (and the same command again) moves it
    aside, never deleting it, and runs its cell again; collect then has every cell once."""
    import pyarrow.parquet as pq

    env, calls, profile = queue_site
    submit_campaign(tmp_path, env, profile)
    manifest = read_manifest(tmp_path / "r")
    for cell in manifest["cells"]:
        real_result(manifest, cell)
    cell_of = {(c["framework"], c["array_index"]): c for c in manifest["cells"]}
    empty, truncated = Path(cell_of["jax", 1]["results"]), Path(cell_of["torch", 2]["results"])
    empty.write_bytes(b"")
    whole = truncated.read_bytes()
    truncated.write_bytes(whole[: len(whole) - 100])
    (tmp_path / "sacct.txt").write_text("".join(f"{j}_{i}|COMPLETED\n" for j in (4001, 4002) for i in range(4)))

    status = run_cli("status", "--results-dir", str(tmp_path / "r"), env=env)
    assert "bad result: an empty file (COMPLETED)" in status.stdout
    assert "bad result: not a whole Parquet file" in status.stdout and "2 cells ended without a result" in status.stdout

    proc = (run_cli("resubmit", "--results-dir", str(tmp_path / "r"), env=env) if again == "resubmit"
            else submit_campaign(tmp_path, env, profile))
    assert proc.returncode == 0, proc.stderr
    folder = tmp_path / "r" / manifest["campaign"]
    assert sbatch_lines(calls) == [f"--parsable --array=1 {folder / 'scripts' / 'jax_digits_1.sh'}",
                                   f"--parsable --array=2 {folder / 'scripts' / 'torch_digits_1.sh'}"]
    assert not empty.exists() and not truncated.exists()
    (aside_empty,) = empty.parent.glob(f"{empty.name}.bad-*")
    (aside_truncated,) = truncated.parent.glob(f"{truncated.name}.bad-*")
    assert aside_empty.read_bytes() == b"" and aside_truncated.read_bytes() == whole[: len(whole) - 100]
    assert f"moved aside to {aside_empty.name}" in proc.stdout

    # The two tasks run again and publish their results.
    real_result(manifest, cell_of["jax", 1])
    real_result(manifest, cell_of["torch", 2])
    (tmp_path / "sacct.txt").write_text("4003_1|COMPLETED\n4004_2|COMPLETED\n")
    assert "8/8 ended (8 completed)" in run_cli("status", "--results-dir", str(tmp_path / "r"), env=env).stdout
    collected = run_cli("collect", "--results-dir", str(tmp_path / "r"), env=env)
    assert collected.returncode == 0, collected.stderr
    merged = pq.read_table(tmp_path / "r" / "merged.parquet").to_pandas()
    throughput = merged[merged.metric == "throughput"]
    assert sorted(throughput.cell_id) == sorted(f"{f}-{b}" for f in ("jax", "torch") for b in (8, 16, 32, 64))


SQUEUE_DOWN = "slurm_load_jobs error: Socket timed out on send/recv operation"


@pytest.mark.parametrize("broken", ["squeue", "sacct"])
def test_nothing_is_submitted_while_the_queue_cannot_be_read(tmp_path, queue_site, broken):
    """A failed squeue (or sacct) call is never "not queued": resubmit, and the same command again,
    submit nothing, exit non-zero and name the failed command in one sentence."""
    env, calls, profile = queue_site
    submit_campaign(tmp_path, env, profile)
    manifest = read_manifest(tmp_path / "r")
    succeed(manifest, "jax", 0)
    (tmp_path / "squeue.txt").write_text("".join(f"{j}_{i} PENDING\n" for j in (4001, 4002) for i in range(4)))
    if broken == "squeue":
        (tmp_path / "squeue.fail").write_text(SQUEUE_DOWN + "\n")
        said = f"squeue failed: exit status 1: {SQUEUE_DOWN}"
    else:
        env = fake_tools(tmp_path / "failbin", env,
                         sacct="echo 'sacct: error: slurmdbd: Connection refused' >&2\nexit 1\n")
        said = "sacct failed: exit status 1: sacct: error: slurmdbd: Connection refused"

    status = run_cli("status", "--results-dir", str(tmp_path / "r"), env=env)
    assert status.returncode == 3 and f"unknown    {said}" in status.stdout
    assert "ended without a result" not in status.stdout
    for proc in (run_cli("resubmit", "--results-dir", str(tmp_path / "r"), env=env),
                 run_cli("resubmit", "--rerun-completed", "--results-dir", str(tmp_path / "r"), env=env),
                 run_cli(*COMMAND, "--profile", str(profile), "--results-dir", str(tmp_path / "r"),
                         "--scripts-dir", str(tmp_path / "s"), env=env)):
        assert proc.returncode == 1, proc.stdout + proc.stderr
        (sentence,) = proc.stderr.strip().splitlines()
        assert sentence == (f"error: campaign {manifest['campaign']}: nothing was submitted, since 7 cells may still be "
                            f"queued or running, and the queue could not be read ({said}); run it again once the "
                            "queue can be read")
    assert sbatch_lines(calls) == [] and "resubmissions" not in read_manifest(tmp_path / "r")

    # Read again, the queue says they are pending: still nothing to submit. Once they have ended, only they go.
    (tmp_path / "squeue.fail").unlink(missing_ok=True)
    (tmp_path / "failbin" / "sacct").unlink(missing_ok=True)
    assert "nothing to submit" in run_cli("resubmit", "--results-dir", str(tmp_path / "r"), env=env).stdout
    (tmp_path / "squeue.txt").write_text("")
    (tmp_path / "sacct.txt").write_text("".join(f"{j}_[{0 if j == 4002 else 1}-3]|CANCELLED by 0\n"
                                                for j in (4001, 4002)))
    proc = run_cli("resubmit", "--results-dir", str(tmp_path / "r"), env=env)
    assert proc.returncode == 0, proc.stderr
    assert [line.split()[1] for line in sbatch_lines(calls)] == ["--array=1-3", "--array=0-3"]


def test_a_second_rerun_of_the_completed_cells_submits_nothing_while_the_first_is_queued(tmp_path, queue_site):
    """A cell whose latest task is queued is queued, whatever result an earlier run left."""
    env, calls, profile = queue_site
    submit_campaign(tmp_path, env, profile)
    manifest = read_manifest(tmp_path / "r")
    for framework in ("jax", "torch"):
        for index in range(4):
            succeed(manifest, framework, index)
    proc = run_cli("resubmit", "--rerun-completed", "--results-dir", str(tmp_path / "r"), env=env)
    assert proc.returncode == 0, proc.stderr
    assert [line.split()[1] for line in sbatch_lines(calls)] == ["--array=0-3", "--array=0-3"]
    (tmp_path / "squeue.txt").write_text("".join(f"{j}_{i} PENDING\n" for j in (4003, 4004) for i in range(4)))

    status = run_cli("status", "--results-dir", str(tmp_path / "r"), env=env).stdout
    assert "0/8 ended (8 pending)" in status and "PENDING; a result of an earlier run is there" in status
    again = run_cli("resubmit", "--rerun-completed", "--results-dir", str(tmp_path / "r"), env=env)
    assert again.returncode == 0 and "nothing to submit" in again.stdout
    same = submit_campaign(tmp_path, env, profile, "--rerun-completed")
    assert "nothing to submit" in same.stdout
    assert len(sbatch_lines(calls)) == 2

    # With the queue unreadable, a result does not say whether its rerun is still queued: nothing goes.
    (tmp_path / "squeue.fail").write_text(SQUEUE_DOWN + "\n")
    status = run_cli("status", "--results-dir", str(tmp_path / "r"), env=env)
    assert status.returncode == 3 and "8 cells may still be queued or running" in status.stderr
    assert run_cli("resubmit", "--rerun-completed", "--results-dir", str(tmp_path / "r"), env=env).returncode == 1
    assert len(sbatch_lines(calls)) == 2


def test_two_resubmits_at_once_submit_each_cell_once_and_the_second_names_the_first(tmp_path, queue_site):
    """Resubmit holds the results folder's submission lock, the one the default command holds: a second
    resubmit, or the same command again, while the first submits, refuses in one sentence and submits nothing."""
    env, calls, profile = queue_site
    submit_campaign(tmp_path, env, profile)  # jobs 4001 and 4002: nothing queued, no result, so every cell goes again
    started, go = tmp_path / "sbatch_started", tmp_path / "go"  # sbatch is held until both others have run
    fake_tools(tmp_path / "fakebin", sbatch=f'touch "{started}"\n' + fake_sbatch(calls, shell_wait_for(go)))
    first = subprocess.Popen([sys.executable, str(REPO_ROOT / "main.py"), "resubmit", "--results-dir",
                              str(tmp_path / "r")], env=env, cwd=REPO_ROOT, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    wait_until(started.exists, first)
    second = run_cli("resubmit", "--results-dir", str(tmp_path / "r"), env=env)
    same = run_cli(*COMMAND, "--profile", str(profile), "--results-dir", str(tmp_path / "r"),
                   "--scripts-dir", str(tmp_path / "s"), env=env)
    go.touch()
    out, err = first.communicate(timeout=60)
    assert first.returncode == 0, out + err
    for refused in (second, same):
        assert refused.returncode == 1, refused.stdout + refused.stderr
        [line] = refused.stderr.strip().splitlines()
        campaign = read_manifest(tmp_path / "r")["campaign"]
        assert line.startswith(f"error: `resubmit {campaign}` (pid {first.pid} on ")
        assert "holds " in line and ".launch.lock: wait for it to finish" in line
    assert [line.split()[1] for line in sbatch_lines(calls)] == ["--array=0-3", "--array=0-3"]  # once each
    assert len(read_manifest(tmp_path / "r")["resubmissions"]) == 2
    assert "nothing to submit" not in second.stdout + same.stdout


def test_waiting_holds_no_lock_and_its_failures_are_recorded_in_the_manifest_as_it_is_then(tmp_path, queue_site):
    """`--wait` may last hours: the submission lock is let go once every array is recorded, so that a resubmit
    (here: of the running campaign, which has nothing to submit) is not refused meanwhile. The failures found
    at the end are written into the manifest as read again then, keeping what others recorded meanwhile."""
    env, calls, profile = queue_site
    (tmp_path / "squeue.txt").write_text("".join(f"{j}_{i} RUNNING\n" for j in (4001, 4002) for i in range(4)))
    first = subprocess.Popen([sys.executable, str(REPO_ROOT / "main.py"), *COMMAND, "--wait", "--profile",
                              str(profile), "--results-dir", str(tmp_path / "r"), "--scripts-dir", str(tmp_path / "s")],
                             env=env, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # Both arrays submitted and recorded: the submission lock is let go just after the second's record is saved.
    wait_until(lambda: len(calls.read_text().splitlines() if calls.exists() else []) >= 2
               and not (tmp_path / "r" / SUBMIT_LOCK).exists(), first)
    during = run_cli("resubmit", "--results-dir", str(tmp_path / "r"), env=env)
    assert during.returncode == 0, during.stdout + during.stderr
    assert "nothing to submit" in during.stdout
    folder = next((tmp_path / "r").glob("*/manifest.json")).parent
    noted = json.loads((folder / "manifest.json").read_text())
    noted["collect_job"] = {"job_id": "99", "script": "c.sh", "after": ["4001"], "submitted_at": "2026-01-01T00:00:00"}
    (folder / "manifest.json").write_text(json.dumps(noted))
    (tmp_path / "sacct.txt").write_text("4001_[0-3]|COMPLETED\n4002_0|COMPLETED\n4002_1|FAILED\n4002_[2-3]|COMPLETED\n")
    (tmp_path / "squeue.txt").write_text("")
    out, err = first.communicate(timeout=120)
    assert first.returncode == 1 and "FAILED torch array task 1: FAILED" in out, out + err
    after = read_manifest(tmp_path / "r")
    assert after["collect_job"]["job_id"] == "99" and after["submissions"]["torch"]["failed"] == {"1": "FAILED"}
    assert not after["submissions"]["jax"].get("failed")


def read_only(folder: Path, *argv: str, env: dict) -> subprocess.CompletedProcess:
    """`python main.py ARGV` with `folder` read-only: mounted so in a mount namespace of its own where this runs as
    root (root writes into any folder whatever its mode), else by its mode."""
    command = [sys.executable, str(REPO_ROOT / "main.py"), *argv]
    if os.geteuid() != 0:
        folder.chmod(0o555)
        try:
            return subprocess.run(command, env=env, cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
        finally:
            folder.chmod(0o755)
    where = shlex.quote(str(folder))
    mount = f"mount --bind {where} {where} && mount -o remount,bind,ro {where} && exec {shlex.join(command)}"
    proc = subprocess.run(["unshare", "-m", "sh", "-c", mount], env=env, cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=60)
    if proc.stderr.startswith(("unshare:", "mount:")):  # no mount namespace for this container, say
        pytest.skip(f"no read-only mount here: {proc.stderr.strip()}")
    return proc


def test_resubmit_into_a_folder_it_cannot_write_is_one_sentence(tmp_path, queue_site):
    """Resubmit in a results folder on a read-only file system ended in a traceback (OSError:
    Read-only file system, on the lock), where launch and collect refuse in one sentence."""
    env, calls, profile = queue_site
    submit_campaign(tmp_path, env, profile)
    before = calls.read_text()
    proc = read_only(tmp_path / "r", "resubmit", "--results-dir", str(tmp_path / "r"), env=env)
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 2, proc.stderr
    [line] = proc.stderr.strip().splitlines()
    assert line == f"error: results folder {tmp_path / 'r'} cannot be written: {tmp_path / 'r'} is not writable"
    assert calls.read_text() == before  # nothing submitted
