"""collect: merges task files, reports bad ones by path and reason, compares per device model; incrementally."""

import os

import pyarrow.parquet as pq
from helpers import fake_queue, run_cli, task_file, write_manifest

from bench_contract.results import SCHEMA, read_task_table
from orchestrator.results import collect, store
from orchestrator.results.collect import merge
from orchestrator.results.views import summary_frame, use_case_frame, view_tables


def test_merge_and_compare(tmp_path):
    task_file(tmp_path, "jax", 32, 2000.0)
    task_file(tmp_path, "torch", 32, 1000.0)
    task_file(tmp_path, "torch", 64, 1500.0, device="GPU Y")
    collected = merge(tmp_path, tmp_path / "merged.parquet")
    assert collected.files == 3 and collected.rows == 9 and not collected.skipped
    assert pq.read_table(tmp_path / "merged.parquet").schema.equals(SCHEMA)
    cpu, gpu = view_tables(use_case_frame(summary_frame(tmp_path / "merged.parquet")))
    assert (cpu.title, gpu.title) == ("Training on CPU X", "Training on GPU Y")
    speedup = cpu.headers.index("speed-up JAX/PyTorch\n[95% CI]")
    assert cpu.rows[0][speedup] == "2.00x [n/a (1 run)]"
    assert gpu.rows[0][speedup] == "n/a"  # no JAX row on that GPU: no speed-up is invented


def test_broken_files_are_reported_and_the_rest_merged(tmp_path):
    good = task_file(tmp_path, "jax", 32, 2000.0)
    broken = good.with_name("truncated.parquet")
    broken.write_bytes(good.read_bytes()[:50])
    collected = merge(tmp_path, tmp_path / "merged.parquet")
    assert collected.files == 1
    assert [p for p, _ in collected.skipped] == [broken]


def test_collect_command(tmp_path):
    task_file(tmp_path, "jax", 32, 3000.0)
    task_file(tmp_path, "torch", 32, 1000.0)
    proc = run_cli("collect", "--results-dir", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "merged.parquet").is_dir()
    assert "3.00x" in proc.stdout and "CPU X" in proc.stdout
    again = run_cli("collect", "--results-dir", str(tmp_path))  # its own output is not merged into itself
    assert "merged 6 rows from 2 task files" in again.stdout


def test_collect_of_a_missing_folder_is_an_error(tmp_path):
    proc = run_cli("collect", "--results-dir", str(tmp_path / "none"))
    assert proc.returncode == 2 and "does not exist" in proc.stderr


def parallel_task_file(root, framework, use_case, world, throughput):
    return task_file(root, framework, 32, throughput, accuracy=None, use_case=use_case, world_size=world)


def test_scaling_efficiency_compares_with_the_one_process_cell(tmp_path):
    from orchestrator.results.scaling import scaling_frame

    parallel_task_file(tmp_path, "jax", 1, 1, 1000.0)
    parallel_task_file(tmp_path, "jax", 2, 2, 1500.0)  # 750 per device: 75% of one process
    parallel_task_file(tmp_path, "torch", 4, 2, 400.0)  # no one-process DP-SGD cell collected
    merge(tmp_path, tmp_path / "merged.parquet")
    frame = scaling_frame(summary_frame(tmp_path / "merged.parquet")).set_index("framework")
    assert frame.loc["jax", ["throughput_per_device", "one_process_throughput", "efficiency"]].tolist() == [
        750.0, 1000.0, 0.75]
    assert frame.loc["torch", ["one_process_throughput", "efficiency"]].isna().all()  # none invented


def test_no_scaling_rows_without_data_parallel_cells(tmp_path):
    from orchestrator.results.scaling import scaling_frame

    task_file(tmp_path, "jax", 32, 2000.0)
    merge(tmp_path, tmp_path / "merged.parquet")
    assert scaling_frame(summary_frame(tmp_path / "merged.parquet")).empty


def merged_rows(output):
    """The merged dataset's rows as sorted tuples: equal whatever the order of parts and files."""
    table = pq.read_table(output)
    return sorted(zip(*(table.column(name).to_pylist() for name in ("cell_id", "device_model", "metric", "value"))))


def counting_reads(monkeypatch):
    seen = []
    real = collect.read_task_file
    monkeypatch.setattr(collect, "read_task_file", lambda path, *a: (seen.append(path), real(path, *a))[1])
    return seen


def test_a_second_collect_reads_only_the_new_files(tmp_path, monkeypatch):
    out = tmp_path / "merged.parquet"
    for batch in (8, 16, 32):
        task_file(tmp_path, "jax", batch, 100.0 * batch)
    assert merge(tmp_path, out).from_scratch
    seen = counting_reads(monkeypatch)
    assert merge(tmp_path, out).read == 0 and seen == []  # nothing new: nothing read
    new = task_file(tmp_path, "torch", 8, 50.0)
    collected = merge(tmp_path, out)
    assert seen == [new] and not collected.from_scratch
    assert collected.files == 4 and collected.rows == 12
    assert merged_rows(out) == merged_rows_from_scratch(tmp_path)


def merged_rows_from_scratch(tmp_path):
    return merged_rows(merge(tmp_path, tmp_path / "scratch" / "merged.parquet").output)


def test_a_changed_file_is_re_read_and_a_deleted_one_dropped_and_both_reported(tmp_path):
    out = tmp_path / "merged.parquet"
    a = task_file(tmp_path, "jax", 8, 100.0)
    b = task_file(tmp_path, "jax", 16, 200.0)
    task_file(tmp_path, "torch", 8, 300.0)
    merge(tmp_path, out)
    task_file(tmp_path, "jax", 8, 111.0)  # rewritten by a re-run of the cell
    os.utime(a, ns=(1, 1))  # a different mtime even on a file system with coarse timestamps
    b.unlink()
    collected = merge(tmp_path, out)
    assert collected.changed == [a] and collected.removed == [b] and collected.read == 1
    assert collected.files == 2 and collected.rows == 6
    rows = merged_rows(out)
    assert ("jax-8", "CPU X", "throughput", 111.0) in rows and ("jax-8", "CPU X", "throughput", 100.0) not in rows
    assert not [r for r in rows if r[0] == "jax-16"]
    assert rows == merged_rows_from_scratch(tmp_path)
    proc = run_cli("collect", "--results-dir", str(tmp_path))  # the command says so too
    assert proc.returncode == 0, proc.stderr


def test_the_command_reports_changed_and_deleted_files(tmp_path):
    a = task_file(tmp_path, "jax", 8, 100.0)
    b = task_file(tmp_path, "jax", 16, 200.0)
    assert run_cli("collect", "--results-dir", str(tmp_path)).returncode == 0
    os.utime(a, ns=(1, 1))
    b.unlink()
    proc = run_cli("collect", "--results-dir", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert f"re-read {a}: it changed since the last collect" in proc.stderr
    assert f"dropped the rows of {b}: the file is gone" in proc.stderr
    assert "merged 3 rows from 1 task files (1 new or changed)" in proc.stdout


def test_parts_are_compacted(tmp_path, monkeypatch):
    monkeypatch.setattr(store, "MAX_PARTS", 2)
    out = tmp_path / "merged.parquet"
    for batch in range(1, 6):  # one new file per collect: a new part each time, compacted past two
        task_file(tmp_path, "jax", batch, float(batch))
        merge(tmp_path, out)
        assert len(list(out.glob("part-*.parquet"))) <= 2
    assert merged_rows(out) == merged_rows_from_scratch(tmp_path)


def test_a_generation_changed_by_hand_is_rebuilt_from_the_task_files(tmp_path):
    """Readers read every part in the folder and collect only those its index names: a part added, removed or
    changed by hand, or a damaged index, means a merge from scratch, never rows counted twice or lost."""
    out = tmp_path / "merged.parquet"
    for batch in (1, 2):  # two collects: two parts
        task_file(tmp_path, "jax", batch, float(batch))
        merge(tmp_path, out)
    expected = merged_rows_from_scratch(tmp_path)
    changes = [lambda part: (out / "part-stray.parquet").write_bytes(part.read_bytes()),  # its rows twice
               lambda part: part.unlink(),  # its rows lost
               lambda part: (out / store.INDEX).write_text("{not json")]
    for change in changes:
        gen = os.path.realpath(out)
        change(next(out.glob("part-*.parquet")))
        collected = merge(tmp_path, out)
        assert collected.from_scratch and merged_rows(out) == expected
        assert os.path.realpath(out) != gen  # the changed generation is not written again: a new one replaces it


def test_a_merged_file_of_the_old_single_file_layout_is_replaced(tmp_path):
    task_file(tmp_path, "jax", 8, 100.0)
    (tmp_path / "merged.parquet").write_bytes(b"old")
    collected = merge(tmp_path, tmp_path / "merged.parquet")
    assert collected.from_scratch and collected.rows == 3


def rerun_copy(original, folder, throughput, started_at):
    """The same campaign's cell run again, written elsewhere (a copied folder): same key, another start time."""
    import pyarrow as pa

    table = read_task_table(original)  # written back in the wide layout, which collect reads too
    table = table.set_column(table.schema.get_field_index("started_at"), "started_at",
                             pa.array([started_at] * table.num_rows, pa.string()))
    values = [throughput if m == "throughput" else v
              for m, v in zip(table["metric"].to_pylist(), table["value"].to_pylist())]
    table = table.set_column(table.schema.get_field_index("value"), "value", pa.array(values, pa.float64()))
    target = folder / "rows" / "jax" / original.name
    target.parent.mkdir(parents=True)
    pq.write_table(table, target)
    return target


def test_the_same_cell_twice_is_merged_once_the_newest_kept_and_said(tmp_path):
    older = task_file(tmp_path, "jax", 32, 1000.0, campaign="c1")
    task_file(tmp_path, "torch", 32, 500.0, campaign="c1")
    newer = rerun_copy(older, tmp_path / "copy", 4000.0, "2099-01-01T00:00:00+00:00")
    out = tmp_path / "merged.parquet"
    collected = merge(tmp_path, out)
    assert collected.superseded == [(older, newer)]
    throughput = summary_frame(out).query("metric == 'throughput' and framework == 'jax'")["value"].tolist()
    assert throughput == [4000.0]
    assert merge(tmp_path, out).read == 0  # the left-out file is not read again while nothing changes
    newer.unlink()  # the kept run is gone: the older one comes back
    collected = merge(tmp_path, out)
    assert collected.removed == [newer]
    assert summary_frame(out).query("metric == 'throughput' and framework == 'jax'")["value"].tolist() == [1000.0]
    proc = run_cli("collect", "--results-dir", str(tmp_path))
    assert proc.returncode == 0 and "left out" not in proc.stderr


def test_a_run_of_a_merged_cell_found_by_a_later_collect_is_weighed_against_the_merged_one(tmp_path):
    """Collect orders only the runs of the cells it read now; the run merged before must be among them."""
    out = tmp_path / "merged.parquet"
    older = task_file(tmp_path, "jax", 32, 1000.0, campaign="c1")
    task_file(tmp_path, "torch", 32, 500.0, campaign="c1")
    merge(tmp_path, out)
    newer = rerun_copy(older, tmp_path / "copy", 4000.0, "2099-01-01T00:00:00+00:00")
    assert merge(tmp_path, out).superseded == [(older, newer)]  # the merged run leaves
    oldest = rerun_copy(older, tmp_path / "older-copy", 10.0, "2000-01-01T00:00:00+00:00")
    assert merge(tmp_path, out).superseded == [(oldest, newer)]  # the new file leaves, the merged run stays
    throughput = summary_frame(out).query("metric == 'throughput' and framework == 'jax'")["value"].tolist()
    assert throughput == [4000.0] and merged_rows(out) == merged_rows_from_scratch(tmp_path)


def test_failure_rows_are_never_merged(tmp_path):
    from bench_contract.run.failure import write_failure

    result = task_file(tmp_path, "jax", 32, 1000.0, campaign="c1")
    write_failure(result.with_name("jax-64.parquet"), {"cell_id": "jax-64", "campaign": "c1"}, status="failed",
                  reason="out of memory: MemoryError", phase="running the use case", exit_code=1)
    assert (tmp_path / "camp1" / "failures" / "jax" / "jax-64.parquet").is_file()
    collected = merge(tmp_path, tmp_path / "merged.parquet")
    assert collected.files == 1 and not collected.skipped
    assert set(pq.read_table(tmp_path / "merged.parquet")["cell_id"].to_pylist()) == {"jax-32"}


def test_a_merged_dataset_of_another_result_schema_is_rebuilt(tmp_path):
    import json

    out = tmp_path / "merged.parquet"
    task_file(tmp_path, "jax", 8, 100.0)
    assert merge(tmp_path, out).from_scratch
    index = json.loads((out / store.INDEX).read_text())
    assert index["columns"] == SCHEMA.names
    index["columns"] = SCHEMA.names[:-1]  # as written before the last column was added
    (out / store.INDEX).write_text(json.dumps(index))
    collected = merge(tmp_path, out)
    assert collected.from_scratch and collected.rows == 3
    assert pq.read_table(out).schema.equals(SCHEMA)


def campaign_of(root, *results):
    """A campaign manifest under root/camp1 whose cells are these result files (run with the local executor)."""
    cells = [{"framework": path.parent.name, "array_index": i, "cell_id": path.stem, "results": str(path)}
             for i, path in enumerate(results)]
    write_manifest(root / "camp1", cells, submissions={
        fw: {"job_id": "local", "task_ids": [f"local_{i}" for i in range(len(cells))]} for fw in ("jax", "torch")})


def test_a_result_counts_only_when_readable_and_collect_says_which_do_not(tmp_path):
    good = task_file(tmp_path, "jax", 32, 2000.0, campaign="camp1")
    truncated = task_file(tmp_path, "torch", 32, 1000.0, campaign="camp1")
    truncated.write_bytes(truncated.read_bytes()[:100])
    empty = task_file(tmp_path, "torch", 64, 1000.0, campaign="camp1")
    empty.write_bytes(b"")
    no_rows = task_file(tmp_path, "jax", 64, 1000.0, campaign="camp1")
    pq.write_table(SCHEMA.empty_table(), no_rows)
    campaign_of(tmp_path, good, truncated, empty, no_rows)
    proc = run_cli("collect", "--results-dir", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert "merged 3 rows from 1 task files" in proc.stdout
    assert "3 cells have no result" in proc.stdout  # each bad file among the missing cells, with its reason
    table = {line.split()[3]: line for line in proc.stdout.splitlines() if line.startswith("camp1 ")}
    assert set(table) == {"torch-32", "torch-64", "jax-64"}
    assert f"result file {truncated} does not count: not a whole Parquet file" in table["torch-32"]
    assert "an empty file" in table["torch-64"] and "a Parquet file with no rows" in table["jax-64"]
    # ... and last, where it cannot be missed, what to do.
    assert proc.stdout.rstrip().splitlines()[-1] == (  # a command that works as printed: campaign and folder named
        f"3 result files are unreadable: run `python main.py resubmit camp1 --results-dir {tmp_path}` to run their "
        "cells again")
    assert f"  {empty}: an empty file (cell torch-64, torch index 2 of camp1)" in proc.stdout
    failures = pq.read_table(tmp_path / "failures.parquet").to_pylist()
    assert sorted(f["cell_id"] for f in failures) == ["jax-64", "torch-32", "torch-64"]
    assert set(pq.read_table(tmp_path / "merged.parquet")["cell_id"].to_pylist()) == {"jax-32"}


def with_context_value(path, name, value):
    """The task file at path, written again with one context value replaced (as a damaged or foreign writer left it)."""
    from bench_contract.results import TaskFile, read_task_file, write_table_atomic

    task = read_task_file(path)
    write_table_atomic(TaskFile({**task.context, name: value}, task.rows).stored_table(), path)
    return path


def test_a_json_column_that_does_not_parse_sets_its_file_aside_and_the_rest_are_merged(tmp_path):
    from bench_contract.results import JSON_COLUMNS

    task_file(tmp_path, "jax", 32, 2000.0)
    task_file(tmp_path, "torch", 32, 1000.0)
    damaged = {}
    for batch, name in enumerate(JSON_COLUMNS, start=100):  # "bench" is what the bench's files once held
        damaged[name] = with_context_value(task_file(tmp_path, "jax", batch, 1.0), name, "bench")
    not_object = with_context_value(task_file(tmp_path, "torch", 99, 1.0), "settings", "[1, 2]")
    lines = []
    collect.collect_and_report(tmp_path, report=lines.append, warn=lines.append, progress=False)
    out = "\n".join(lines)
    assert "merged 6 rows from 2 task files" in out  # the two good files, compared
    assert "2.00x" in out
    for name, path in damaged.items():
        assert f"skipped {path}: its {name} is not readable: not JSON (Expecting value" in out
    assert f"skipped {not_object}: its settings is not readable: JSON, but not an object (list)" in out
    merged = pq.read_table(tmp_path / "merged.parquet")
    assert set(merged["cell_id"].to_pylist()) == {"jax-32", "torch-32"}


def test_cells_still_queued_or_running_are_waited_for_not_resubmitted(tmp_path):
    """The cells without a result are told apart by why. Those that ended without one are listed, with
    their trial, and resubmit is the advice for them alone; those still queued or running are counted in one line
    that says to wait; those whose state is unknown, in one that says the queue could not be read. Everything is
    merged all the same, and collect exits 3 while any cell may still get a result: what it merged is partial."""
    from test_status import failing, trials_campaign

    results = tmp_path / "results"
    trials_campaign(tmp_path, results={(0, 0), (0, 1)})
    env, _ = fake_queue(tmp_path, sacct=["70_0|COMPLETED", "70_1|COMPLETED", "70_3|FAILED"],
                        squeue=["70_2 PENDING", "70_4 RUNNING", "70_5 RUNNING"])
    proc = run_cli("collect", "--results-dir", str(results), env=env)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert proc.stdout.startswith("merged ") and (results / "merged.parquet").is_dir()  # what there is, merged
    assert f"\n1 cells have no result (listed in {results / 'failures.parquet'}):\n" in proc.stdout
    [row] = [line.split(None, 6) for line in proc.stdout.splitlines() if line.startswith("camp-1 ")]
    assert row == ["camp-1", "jax", "3", "jax-1", "0", "failed", "FAILED"]  # campaign, framework, index, cell, trial
    assert f"submit only those again with: python main.py resubmit camp-1 --results-dir {results}" in proc.stdout
    assert proc.stdout.rstrip().splitlines()[-1] == (
        "3 cells are still queued or running (1 pending, 2 running), so their results are not merged yet: follow "
        f"them with `python main.py watch camp-1 --results-dir {results}`, then run collect again")
    failures = pq.read_table(results / "failures.parquet").to_pylist()
    assert [(f["array_index"], f["trial"], f["state"]) for f in failures] == [
        (2, 2, "pending"), (3, 0, "failed"), (4, 1, "running"), (5, 2, "running")]

    # Nothing has ended yet: no cell to resubmit, only the line that says to wait.
    failing("sacct", tmp_path, "true")
    failing("squeue", tmp_path, "for i in 2 3 4 5; do echo \"70_$i PENDING\"; done")
    proc = run_cli("collect", "--results-dir", str(results), env=env)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "have no result" not in proc.stdout and "resubmit" not in proc.stdout
    assert "\n4 cells are still queued or running (4 pending), so their results are not merged yet" in proc.stdout

    # The queue cannot be read: those cells may still be queued, which no resubmit may be advised for either.
    failing("squeue", tmp_path, 'echo "slurm_load_jobs error: Unable to contact slurm controller" >&2; exit 1')
    proc = run_cli("collect", "--results-dir", str(results), env=env)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "have no result" not in proc.stdout and "resubmit" not in proc.stdout
    assert proc.stdout.rstrip().splitlines()[-1] == (
        "4 cells may still be queued or running, and the queue could not be read (squeue failed: exit status 1: "
        "slurm_load_jobs error: Unable to contact slurm controller); run collect again once "
        f"`python main.py status camp-1 --results-dir {results}` can say where they stand")

    # Every cell ended: those without a result are the resubmit's, and collect exits 0 as before.
    failing("squeue", tmp_path, "true")
    failing("sacct", tmp_path, "for i in 2 3 4 5; do echo \"70_$i|FAILED\"; done")
    proc = run_cli("collect", "--results-dir", str(results), env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "4 cells have no result" in proc.stdout and "still queued" not in proc.stdout
