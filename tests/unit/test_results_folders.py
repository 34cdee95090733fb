"""What a results folder holds: collect and campaigns read the same campaigns, the ones directly in
the folder; a results folder nested in it (the demo's, once) is named in one line and left out, and read by
naming it with --results-dir."""

import json

import pyarrow.parquet as pq
from helpers import result_context, run_cli, task_file, write_manifest

from orchestrator.results.folders import own_folders

STARTED = "2026-11-20T10:00:00+00:00"


def local_campaign(results, name, throughput, device="CPU X"):
    """A campaign that ran with the local executor, both cells with their result, as the default command leaves it."""
    from bench_contract.results import ResultRows

    folder = results / name
    cells = []
    for index, framework in enumerate(("jax", "torch")):
        ctx = result_context(framework=framework, benchmark="digits", use_case=1, model="mlp", batch_size=32,
                             precision="fp32", device_model=device, cell_id=f"{framework}-32", campaign=name,
                             started_at=STARTED)
        rows = ResultRows(ctx)
        rows.add("throughput", throughput * (index + 1), "samples/s")
        path = rows.write(folder / "rows" / framework / f"{framework}-32.parquet")
        cells.append({"framework": framework, "array_index": 0, "cell_id": f"{framework}-32", "results": str(path)})
    write_manifest(folder, cells, created_at="2026-11-20T10:00:00+00:00",
                   submissions={fw: {"job_id": "local", "task_ids": ["local_0"]} for fw in ("jax", "torch")})
    return name


def merged_campaigns(results):
    return sorted(set(pq.read_table(results / "merged.parquet", columns=["campaign"])["campaign"].to_pylist()))


def test_collect_reads_the_campaigns_that_campaigns_lists_and_names_a_nested_results_folder(tmp_path):
    results = tmp_path / "results"
    own = local_campaign(results, "digits-uc1-20261120T100000-aaaa", 1000.0)
    demo = local_campaign(results / "demo", "digits-uc1-20261120T100000-dddd", 5.0)
    listed = run_cli("campaigns", "--results-dir", "results", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert own in listed.stdout and demo not in listed.stdout
    note = "results/demo holds its own results and was left out: python main.py campaigns --results-dir results/demo"
    assert note in listed.stdout.splitlines()
    proc = run_cli("collect", "--results-dir", "results", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert merged_campaigns(results) == [own]  # before: the demo's rows too
    assert "merged 2 rows from 2 task files" in proc.stdout
    (line,) = [line for line in proc.stderr.splitlines() if "results/demo" in line]
    assert line.startswith("results/demo holds its own results and was left out: python main.py collect "
                           "--results-dir results/demo")
    assert "python main.py collect --results-dir results --results-dir results/demo" in line
    # The command it prints reads the nested folder, here with the outer one; then nothing is left out.
    both = run_cli("collect", "--results-dir", "results", "--results-dir", "results/demo", cwd=tmp_path)
    assert both.returncode == 0, both.stderr
    assert merged_campaigns(results) == sorted([own, demo]) and "left out" not in both.stderr
    alone = run_cli("collect", "--results-dir", "results/demo", cwd=tmp_path)
    assert alone.returncode == 0 and merged_campaigns(results / "demo") == [demo]


def test_a_folder_with_its_own_merged_dataset_is_a_results_folder_and_loose_task_files_still_count(tmp_path):
    results = tmp_path / "results"
    task_file(results, "jax", 32, 2000.0)  # results/camp1/rows/jax/...: task files without a manifest
    task_file(results, "torch", 32, 1000.0)
    other = tmp_path / "other"
    task_file(other, "jax", 64, 9.0)
    assert run_cli("collect", "--results-dir", str(other)).returncode == 0
    (results / "copied").mkdir()
    other.rename(results / "copied" / "other")  # a whole results folder moved in, merged.parquet and all
    proc = run_cli("collect", "--results-dir", str(results))
    assert proc.returncode == 0, proc.stderr
    assert "rows from 2 task files" in proc.stdout  # camp1's two files, not the moved folder's
    assert f"{results / 'copied' / 'other'} holds its own results and was left out" in proc.stderr


def test_own_folders_tells_campaigns_and_loose_rows_from_nested_results_folders(tmp_path):
    results = tmp_path / "results"
    local_campaign(results, "c1", 1.0)
    task_file(results, "jax", 32, 1.0)  # camp1, no manifest
    (results / "report").mkdir()  # what report writes: no rows, nothing nested
    local_campaign(results / "archive" / "2025", "c0", 1.0)  # a campaign two levels down: archive/2025 is nested
    own, nested = own_folders(results)
    assert [f.name for f in own] == ["c1", "camp1", "report"]
    assert nested == [results / "archive" / "2025"]
