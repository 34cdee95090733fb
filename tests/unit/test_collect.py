"""collect: merges task files, reports bad ones by path and reason, compares per device model."""

import pyarrow.parquet as pq

from bench_contract.results import SCHEMA
from helpers import run_cli, task_file
from orchestrator.collect import comparison_tables, merge


def test_merge_and_compare(tmp_path):
    task_file(tmp_path, "jax", 32, 2000.0)
    task_file(tmp_path, "torch", 32, 1000.0)
    task_file(tmp_path, "torch", 64, 1500.0, device="GPU Y")
    collected, df = merge(tmp_path, tmp_path / "merged.parquet")
    assert collected.files == 3 and collected.rows == 9 and not collected.skipped
    assert pq.read_table(tmp_path / "merged.parquet").schema.equals(SCHEMA)
    tables = comparison_tables(df)
    assert set(tables) == {"CPU X", "GPU Y"}
    assert "2.00x" in tables["CPU X"]
    assert "n/a" in tables["GPU Y"]  # no JAX row on that GPU: no speed-up is invented


def test_broken_files_are_reported_and_the_rest_merged(tmp_path):
    good = task_file(tmp_path, "jax", 32, 2000.0)
    broken = good.with_name("truncated.parquet")
    broken.write_bytes(good.read_bytes()[:50])
    collected, _ = merge(tmp_path, tmp_path / "merged.parquet")
    assert collected.files == 1
    assert [p for p, _ in collected.skipped] == [broken]


def test_collect_command(tmp_path):
    task_file(tmp_path, "jax", 32, 3000.0)
    task_file(tmp_path, "torch", 32, 1000.0)
    proc = run_cli("collect", "--results-dir", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "merged.parquet").is_file()
    assert "3.00x" in proc.stdout and "CPU X" in proc.stdout
    again = run_cli("collect", "--results-dir", str(tmp_path))  # its own output is not merged into itself
    assert "merged 6 rows from 2 task files" in again.stdout


def test_collect_of_a_missing_folder_is_an_error(tmp_path):
    proc = run_cli("collect", "--results-dir", str(tmp_path / "none"))
    assert proc.returncode == 1 and "does not exist" in proc.stderr


def parallel_task_file(root, framework, use_case, world, throughput):
    return task_file(root, framework, 32, throughput, accuracy=None, use_case=use_case, world_size=world)


def test_scaling_efficiency_compares_with_the_one_process_cell(tmp_path):
    from orchestrator.collect import scaling_table

    parallel_task_file(tmp_path, "jax", 1, 1, 1000.0)
    parallel_task_file(tmp_path, "jax", 2, 2, 1500.0)  # 750 per device: 75% of one process
    parallel_task_file(tmp_path, "torch", 4, 2, 400.0)  # no one-process DP-SGD cell collected
    _, df = merge(tmp_path, tmp_path / "merged.parquet")
    table = scaling_table(df)
    jax_line = next(line for line in table.splitlines() if " jax " in line)
    assert "750" in jax_line and "1,000" in jax_line and "75%" in jax_line
    torch_line = next(line for line in table.splitlines() if " torch " in line)
    assert torch_line.rstrip().endswith("n/a")


def test_no_scaling_table_without_data_parallel_cells(tmp_path):
    from orchestrator.collect import scaling_table

    task_file(tmp_path, "jax", 32, 2000.0)
    _, df = merge(tmp_path, tmp_path / "merged.parquet")
    assert scaling_table(df) is None
