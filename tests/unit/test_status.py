"""status/watch: one sacct and one squeue call per poll for the whole campaign, states named for users."""

import json

from helpers import fake_queue, fake_tools, run_cli, status_states, write_manifest, write_result


def campaign(tmp_path, with_results=()):
    folder = tmp_path / "results" / "camp-1"
    cells = []
    for framework in ("jax", "torch"):
        for index in range(3):
            result = folder / "rows" / framework / f"{framework}-{index}.parquet"
            if (framework, index) in with_results:
                write_result(result, f"{framework}-{index}")
            cells.append({"framework": framework, "array_index": index, "cell_id": f"{framework}-{index}",
                          "results": str(result)})
    write_manifest(folder, cells, executor="slurm", submissions={
        "jax": {"job_id": "70", "task_ids": ["70_0", "70_1", "70_2"]},
        "torch": {"job_id": "71", "task_ids": ["71_0", "71_1", "71_2"]},
    })
    return folder


def test_states_come_from_sacct_squeue_and_the_result_files(tmp_path):
    campaign(tmp_path, with_results={("jax", 0), ("torch", 0)})
    env, log = fake_queue(
        tmp_path,
        sacct=["70_0|COMPLETED", "70_1|TIMEOUT", "70_2|COMPLETED", "71_0|COMPLETED", "71_1|CANCELLED by 0",
               "71_2|PENDING"],
        squeue=["71_2 PENDING"],
    )
    proc = run_cli("status", "--results-dir", str(tmp_path / "results"), env=env)
    assert proc.returncode == 0, proc.stderr
    states = {line.split()[2]: line.split()[4] for line in proc.stdout.splitlines() if line.startswith(("jax ", "torch "))}
    assert states == {"jax-0": "completed", "jax-1": "timed", "jax-2": "no", "torch-0": "completed",
                      "torch-1": "cancelled", "torch-2": "pending"}
    assert "timed out" in proc.stdout and "no result" in proc.stdout
    calls = log.read_text().splitlines()
    assert len(calls) == 2 and all("70,71" in call for call in calls)  # one call each, for the whole campaign


def test_watch_ends_when_nothing_is_active_and_names_what_did_not_complete(tmp_path):
    campaign(tmp_path, with_results={("jax", 0), ("jax", 1), ("jax", 2), ("torch", 0), ("torch", 1)})
    env, _ = fake_queue(tmp_path, sacct=["71_2|FAILED"], squeue=[])
    proc = run_cli("watch", "--results-dir", str(tmp_path / "results"), env=env)
    assert proc.returncode == 1
    assert "5/6 ended" not in proc.stdout and "6/6 ended" in proc.stdout
    assert proc.stderr.strip() == "torch 2 (torch-2): failed: FAILED"


def test_no_campaign_is_a_clear_error(tmp_path):
    proc = run_cli("status", "--results-dir", str(tmp_path))
    assert proc.returncode == 2 and "no campaign in" in proc.stderr
    proc = run_cli("status", "nope", "--results-dir", str(tmp_path))
    assert proc.returncode == 2 and "no campaign 'nope'" in proc.stderr


def test_a_task_slurm_killed_for_its_memory_is_reported_as_out_of_memory(tmp_path):
    from orchestrator.run.status import slurm_memory_kill

    # slurmstepd's own lines (Slurm 22.05): the polling kill (OverMemoryKill), as seen on the local cluster,
    # and the cgroup handler's.
    polled = tmp_path / "polled.out"
    polled.write_text("step 3\nslurmstepd-n1: error: StepId=7353.batch exceeded memory limit "
                      "(310718464 > 209715200), being killed\nslurmstepd-n1: error: Exceeded job memory limit\n"
                      "slurmstepd-n1: error: *** JOB 7353 ON n1 CANCELLED AT 2026-11-22T05:13:25 ***\n")
    assert slurm_memory_kill(str(polled)) == ("out of memory: Slurm killed the task, 296 MiB used against the "
                                              "200 MiB it asked for (the profile's mem)")
    cgroup = tmp_path / "cgroup.out"
    cgroup.write_text("slurmstepd: error: Detected 1 oom-kill event(s) in StepId=12.batch. Some of your "
                      "processes may have been killed by the cgroup out-of-memory handler.\n")
    assert "cgroup out-of-memory handler" in slurm_memory_kill(str(cgroup))
    plain = tmp_path / "plain.out"
    plain.write_text("Traceback: the memory limit of this model was exceeded\n")  # not Slurm's words
    assert slurm_memory_kill(str(plain)) is None and slurm_memory_kill("") is None


def test_an_empty_or_truncated_result_is_a_bad_result_never_a_completion(tmp_path):
    """A result counts only when it reads (bench_contract.results.unreadable_reason)."""
    folder = campaign(tmp_path, with_results={("jax", 0), ("jax", 1), ("jax", 2), ("torch", 0)})
    rows = folder / "rows" / "jax"
    (rows / "jax-0.parquet").write_bytes(b"")  # empty
    whole = (rows / "jax-1.parquet").read_bytes()
    (rows / "jax-1.parquet").write_bytes(whole[: len(whole) // 2])  # truncated
    env, _ = fake_queue(tmp_path, sacct=["70_0|COMPLETED", "70_1|COMPLETED", "70_2|COMPLETED",
                                         "71_0|COMPLETED", "71_1|COMPLETED", "71_2|COMPLETED"],
                        squeue=[])
    proc = run_cli("status", "--results-dir", str(tmp_path / "results"), env=env)
    assert proc.returncode == 0, proc.stderr
    states = status_states(proc.stdout)
    assert states["jax-0"] == ("failed", "bad result: an empty file (COMPLETED)")
    assert states["jax-1"][0] == "failed" and states["jax-1"][1].startswith("bad result: not a whole Parquet file")
    assert states["jax-2"] == ("completed", "result written") and states["torch-0"][0] == "completed"
    assert "4 cells ended without a result" in proc.stdout  # jax 0, jax 1, torch 1, torch 2


def failing(name, tmp_path, body):
    """Replace the fake `name` in tmp_path/bin with a script of `body`."""
    fake_tools(tmp_path / "bin", **{name: f"{body}\n"})


def test_a_failed_squeue_or_sacct_is_unknown_never_not_queued(tmp_path):
    """squeue failing (exit status, missing command) or sacct failing leaves the cells that may still be
    queued unknown, with the failed command and its words; a cell with a result stays completed."""
    campaign(tmp_path, with_results={("jax", 0)})
    env, _ = fake_queue(tmp_path, sacct=["70_1|PENDING"], squeue=["70_1 PENDING"])
    failing("squeue", tmp_path, 'echo "slurm_load_jobs error: Unable to contact slurm controller" >&2; exit 1')
    proc = run_cli("status", "--results-dir", str(tmp_path / "results"), env=env)
    states = status_states(proc.stdout)
    assert states.pop("jax-0") == ("completed", "result written")
    assert set(states.values()) == {
        ("unknown", "squeue failed: exit status 1: slurm_load_jobs error: Unable to contact slurm controller")}
    assert "ended without a result" not in proc.stdout and "0/6 ended" not in proc.stdout
    # The table, then one sentence on stderr and exit code 3: unknown, neither success nor "ended without a result".
    assert proc.returncode == 3, proc.stdout + proc.stderr
    [line] = proc.stderr.strip().splitlines()
    assert line.startswith("error: 5 cells may still be queued or running, and the queue could not be read (squeue "
                           "failed: exit status 1:") and "resubmit submits nothing until it can be read" in line

    (tmp_path / "bin" / "squeue").unlink()  # no squeue at all: PATH is the fake folder only
    proc = run_cli("status", "--results-dir", str(tmp_path / "results"), env={**env, "PATH": str(tmp_path / "bin")})
    assert proc.returncode == 3
    assert set(status_states(proc.stdout).values()) == {("completed", "result written"),
                                                    ("unknown", "squeue failed: 'squeue' is not on PATH")}

    failing("squeue", tmp_path, "true")
    failing("sacct", tmp_path, 'echo "sacct: error: Problem talking to the database: Connection refused" >&2; exit 1')
    proc = run_cli("status", "--results-dir", str(tmp_path / "results"), env=env)
    assert "sacct failed: exit status 1: sacct: error: Problem talking to the database" in proc.stdout
    assert "ended without a result" not in proc.stdout and proc.returncode == 3

    # Without accounting, squeue alone says what is queued: that is no failure.
    failing("sacct", tmp_path, 'echo "sacct: error: Slurm accounting storage is disabled" >&2; exit 1')
    proc = run_cli("status", "--results-dir", str(tmp_path / "results"), env=env)
    assert "unknown" not in proc.stdout and "5 cells ended without a result" in proc.stdout
    assert proc.returncode == 0, proc.stderr


def test_a_timed_out_squeue_is_unknown(tmp_path, monkeypatch):
    from orchestrator.run import queue
    from orchestrator.run.status import campaign_status

    folder = campaign(tmp_path)
    env, _ = fake_queue(tmp_path, sacct=[], squeue=[])
    failing("squeue", tmp_path, "sleep 5")
    monkeypatch.setenv("PATH", env["PATH"])
    monkeypatch.setattr(queue, "QUERY_TIMEOUT_S", 0.3)
    cells = campaign_status(folder)
    assert {(c.state, c.detail) for c in cells} == {("unknown", "squeue failed: no answer within 0 s")}


def test_sacct_range_records_and_a_forgotten_job(tmp_path):
    """sacct lists tasks that have not started as one record, 71_[0-2%1]; one cancelled while pending keeps such a
    record (70_[1-2]). squeue refuses the id of a job the controller has forgotten when it is the only one asked
    about: that is its answer that nothing is queued, not a failure."""
    campaign(tmp_path, with_results={("jax", 0)})
    env, _ = fake_queue(tmp_path, sacct=["70_0|COMPLETED", "70_[1-2]|CANCELLED by 0", "71_[0-2%1]|PENDING"],
                        squeue=[])
    proc = run_cli("status", "--results-dir", str(tmp_path / "results"), env=env)
    states = {cell: state for cell, (state, _) in status_states(proc.stdout).items()}
    assert states == {"jax-0": "completed", "jax-1": "cancelled", "jax-2": "cancelled", "torch-0": "pending",
                      "torch-1": "pending", "torch-2": "pending"}

    manifest = json.loads((tmp_path / "results" / "camp-1" / "manifest.json").read_text())
    manifest["cells"] = manifest["cells"][:3]
    del manifest["submissions"]["torch"]
    (tmp_path / "results" / "camp-1" / "manifest.json").write_text(json.dumps(manifest))
    failing("sacct", tmp_path, "true")
    failing("squeue", tmp_path, 'echo "slurm_load_jobs error: Invalid job id specified" >&2; exit 1')
    proc = run_cli("status", "--results-dir", str(tmp_path / "results"), env=env)
    assert "unknown" not in proc.stdout and "2 cells ended without a result" in proc.stdout

    from orchestrator.run.queue import task_ids_of

    assert task_ids_of("2001_[0-1,5]") == ["2001_0", "2001_1", "2001_5"]
    assert task_ids_of("2001_[0-4:2%1]") == ["2001_0", "2001_2", "2001_4"]
    assert task_ids_of("2001_3") == ["2001_3"] and task_ids_of("2001") == ["2001"]


def test_a_queued_rerun_of_a_completed_cell_is_queued_and_watch_waits_for_it(tmp_path):
    """The queue is read before the result file; a cell whose latest task is queued is queued."""
    every = {(f, i) for f in ("jax", "torch") for i in range(3)}
    campaign(tmp_path, with_results=every)
    env, _ = fake_queue(tmp_path, sacct=[], squeue=[])
    polls = tmp_path / "polls"
    # The rerun of torch 2 is pending for the first two polls, then it has ended.
    failing("squeue", tmp_path, f'echo x >> "{polls}"; [ "$(wc -l < "{polls}")" -le 2 ] && echo "71_2 PENDING"; true')
    proc = run_cli("status", "--results-dir", str(tmp_path / "results"), env=env)
    assert status_states(proc.stdout)["torch-2"] == ("pending", "PENDING; a result of an earlier run is there")
    assert "5/6 ended" in proc.stdout
    proc = run_cli("watch", "--interval", "0.1", "--results-dir", str(tmp_path / "results"), env=env)
    assert proc.returncode == 0, proc.stderr
    assert "5/6 ended" in proc.stdout and "6/6 ended (6 completed)" in proc.stdout


def test_watch_goes_on_while_the_queue_cannot_be_read_and_ends_when_it_can(tmp_path):
    """A controller restart: squeue fails for 7 polls, then the tasks read as ended. watch neither ends on the unknown
    cells nor gives up on the failing polls: it says so once and goes on to the end (exit 0: every cell completed)."""
    campaign(tmp_path, with_results={(f, i) for f in ("jax", "torch") for i in range(3)})
    env, _ = fake_queue(tmp_path, sacct=[], squeue=[])
    polls = tmp_path / "polls"
    failing("squeue", tmp_path, f'echo x >> "{polls}"; [ "$(wc -l < "{polls}")" -le 7 ] && '
                                '{ echo "slurm_load_jobs error: Unable to contact slurm controller" >&2; exit 1; }; true')
    # torch's cells, rerun with --rerun-completed, are unknown while the queue cannot be read, results or not.
    manifest = json.loads((tmp_path / "results" / "camp-1" / "manifest.json").read_text())
    manifest["resubmissions"] = [{"script": "torch", "indices": [2], "job_ids": ["71"], "executor": "slurm",
                                  "rerun_completed": True, "submitted_at": "2026-01-01T00:00:00+00:00"}]
    (tmp_path / "results" / "camp-1" / "manifest.json").write_text(json.dumps(manifest))
    proc = run_cli("watch", "--interval", "0.05", "--results-dir", str(tmp_path / "results"),
                   env={**env, "ORCHESTRATOR_WATCH_UNREADABLE_S": "60"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    bars = [line for line in proc.stdout.splitlines() if line.startswith("[")]
    assert len(bars) == 8 and all("3/6 ended (3 completed, 3 unknown)" in bar for bar in bars[:7])
    assert "6/6 ended (6 completed)" in bars[-1]
    [said] = [line for line in proc.stderr.splitlines() if "could not be read" in line]
    assert said.startswith("3 cells may still be queued or running") and "watch goes on polling" in said


def test_watch_waits_for_the_accounting_record_of_a_task_that_left_the_queue(tmp_path):
    """Accounting lags the controller: for two polls torch 1 is in neither squeue nor sacct, then sacct has its
    record. watch names it cancelled, as Slurm recorded it, not "no result" at the first poll that missed it."""
    campaign(tmp_path, with_results={(f, i) for f in ("jax", "torch") for i in range(3)} - {("torch", 1)})
    env, _ = fake_queue(tmp_path, sacct=[], squeue=[])
    polls = tmp_path / "polls"
    failing("sacct", tmp_path,
            f'echo x >> "{polls}"; [ "$(wc -l < "{polls}")" -gt 2 ] && echo "71_1|CANCELLED by 0"; true')
    proc = run_cli("watch", "--interval", "0.05", "--results-dir", str(tmp_path / "results"), env=env)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stderr.strip() == "torch 1 (torch-1): cancelled: CANCELLED"
    # A record that never comes: watch names the cell once the lag it allows is over.
    failing("sacct", tmp_path, "true")
    proc = run_cli("watch", "--interval", "0.05", "--results-dir", str(tmp_path / "results"),
                   env={**env, "ORCHESTRATOR_WATCH_ACCOUNTING_LAG_S": "0.5"})
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stderr.strip() == "torch 1 (torch-1): no result: the task is not queued and wrote no result"


def test_watch_gives_up_with_exit_3_when_the_queue_stays_unreadable(tmp_path):
    campaign(tmp_path)
    env, _ = fake_queue(tmp_path, sacct=[], squeue=[])
    failing("squeue", tmp_path, "exit 1")
    proc = run_cli("watch", "--interval", "0.05", "--results-dir", str(tmp_path / "results"),
                   env={**env, "ORCHESTRATOR_WATCH_UNREADABLE_S": "1"})
    assert proc.returncode == 3, proc.stdout + proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("error: campaign camp-1: 6 cells may still be queued") and "squeue failed: exit status 1" \
        in last and last.endswith("for 1 s; watch stops here")
    assert "Traceback" not in proc.stderr


def test_a_cell_that_ran_on_another_device_than_its_system_expects_is_named_from_its_task_file(tmp_path):
    """device_note reads the device from a task file as a backend writes it (the context stored once)."""
    from helpers import cell_record, task_file

    from orchestrator.plan.manifest import CellEntry
    from orchestrator.run.status import device_note

    path = task_file(tmp_path, "jax", 32, 100.0, device="NVIDIA A100-SXM4-80GB")
    cell = CellEntry(**cell_record(framework="jax", array_index=0, cell_id="jax-32", results=str(path), system="h100"))
    assert device_note(cell, "H100") == (
        "; ran on 'NVIDIA A100-SXM4-80GB', not on system h100's device ('H100'): check its constraint")
    assert device_note(cell, "A100") == ""


def test_the_wait_for_accounting_starts_anew_when_a_cell_is_active_again():
    """A task left the queue unrecorded, then its cell was resubmitted while watched: once that ends unrecorded too,
    watch allows accounting its whole lag again, not what is left of the first wait."""
    from orchestrator.run.status import NOT_RECORDED, AccountingWait, CellStatus

    unrecorded = [CellStatus("torch", 1, "torch-1", "71_1", "no result", NOT_RECORDED)]
    active = [CellStatus("torch", 1, "torch-1", "72_1", "pending", "PENDING")]
    recorded = [CellStatus("torch", 1, "torch-1", "71_1", "cancelled", "CANCELLED")]
    wait = AccountingWait()
    lag = wait.lag_s
    assert not wait.over(unrecorded, 0.0)
    assert not wait.over(active, lag / 2)
    assert not wait.over(unrecorded, lag + 1)  # 1 s into the second wait
    assert wait.over(unrecorded, 2 * lag + 1)
    assert AccountingWait().over(recorded, 0.0)  # nothing awaits a record: watch stops at once


def trials_campaign(tmp_path, results=()):
    """Campaign camp-1: two JAX cells of three trials each in job 70, trial t of cell c at array index 3c + t, with
    a result for the (cell, trial) pairs in `results`."""
    folder = tmp_path / "results" / "camp-1"
    cells = []
    for cell in range(2):
        for trial in range(3):
            result = folder / "rows" / "jax" / f"jax-{cell}-trial{trial}.parquet"
            if (cell, trial) in results:
                write_result(result, f"jax-{cell}")
            cells.append({"framework": "jax", "array_index": 3 * cell + trial, "trial": trial,
                          "cell_id": f"jax-{cell}", "results": str(result)})
    write_manifest(folder, cells, executor="slurm",
                   submissions={"jax": {"job_id": "70", "task_ids": [f"70_{i}" for i in range(6)]}})
    return folder


def table_rows(stdout, columns):
    """status's table lines as lists of `columns` words, the last one the rest of the line (the detail)."""
    return [line.split(None, columns - 1) for line in stdout.splitlines() if line.startswith(("jax ", "torch "))]


def test_a_cells_trials_are_told_apart_and_those_in_one_state_share_a_line(tmp_path):
    """With --trials, each line names its trials; the trials of a cell in the same state, with the same
    detail, in the same job share one line (squeue's 70_[0-1]); --all gives one line per run; the count of each
    state comes after the logs, last but the advice."""
    trials_campaign(tmp_path, results={(0, 0), (0, 1)})
    env, _ = fake_queue(tmp_path, sacct=["70_0|COMPLETED", "70_1|COMPLETED", "70_3|FAILED"],
                        squeue=["70_2 PENDING", "70_4 RUNNING", "70_5 RUNNING"])
    proc = run_cli("status", "--results-dir", str(tmp_path / "results"), env=env)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "campaign camp-1: 2 cells x 3 trials = 6 runs"
    assert lines[1].split() == ["framework", "index", "cell", "trial", "task", "state", "detail"]
    assert table_rows(proc.stdout, 7) == [
        ["jax", "0-1", "jax-0", "0-1", "70_[0-1]", "completed", "result written"],
        ["jax", "2", "jax-0", "2", "70_2", "pending", "PENDING"],
        ["jax", "3", "jax-1", "0", "70_3", "failed", "FAILED"],
        ["jax", "4-5", "jax-1", "1-2", "70_[4-5]", "running", "RUNNING"],
    ]
    assert "--- jax 3 (jax-1, trial 0): failed: FAILED" in proc.stdout
    assert lines[-3].endswith("] 3/6 ended (2 completed, 1 failed, 1 pending, 2 running)")
    assert lines[-1].startswith("1 cells ended without a result; submit only those again with:")

    every = run_cli("status", "--all", "--results-dir", str(tmp_path / "results"), env=env)
    assert every.returncode == 0, every.stderr
    rows = table_rows(every.stdout, 7)
    assert [(row[1], row[3], row[4], row[5]) for row in rows] == [
        ("0", "0", "70_0", "completed"), ("1", "1", "70_1", "completed"), ("2", "2", "70_2", "pending"),
        ("3", "0", "70_3", "failed"), ("4", "1", "70_4", "running"), ("5", "2", "70_5", "running")]


def test_a_campaign_on_several_systems_names_the_system_of_each_line(tmp_path):
    """One cell on two systems (its id differs by the system's hash only): a system column says which."""
    from orchestrator.run.status import show_status

    folder = tmp_path / "results" / "camp-1"
    cells = []
    for index, system in enumerate(("h100", "a100")):
        result = write_result(folder / "rows" / "jax" / f"jax-{system}.parquet", f"jax-{index}")
        cells.append({"framework": "jax", "script": f"jax.{system}", "system": system, "array_index": 0,
                      "cell_id": f"jax-{index}", "results": str(result)})
    write_manifest(folder, cells, submissions={
        f"jax.{system}": {"job_id": "local", "task_ids": ["local_0"]} for system in ("h100", "a100")})
    said = []
    show_status(tmp_path / "results", folder, 20, report=said.append)
    assert said[0] == "campaign camp-1: on systems a100, h100"
    assert said[1].splitlines()[0].split() == ["framework", "system", "index", "cell", "task", "state", "detail"]
    assert table_rows("\n".join(said), 7) == [["jax", "h100", "0", "jax-0", "local_0", "completed", "result written"],
                                             ["jax", "a100", "0", "jax-1", "local_0", "completed", "result written"]]
