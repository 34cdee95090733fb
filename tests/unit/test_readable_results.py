"""A result file counts only when it is whole: empty, truncated and foreign files are named as such, and status,
resubmit and collect judge a file alike."""

import json

from helpers import fake_queue, run_cli, task_file

from bench_contract.results import unreadable_reason


def test_a_whole_result_file_is_readable(tmp_path):
    assert unreadable_reason(task_file(tmp_path, "jax", 32, 1000.0)) is None


def test_missing_empty_truncated_and_foreign_files_are_not(tmp_path):
    good = task_file(tmp_path, "jax", 32, 1000.0)
    data = good.read_bytes()
    empty, truncated, foreign = tmp_path / "empty.parquet", tmp_path / "cut.parquet", tmp_path / "other.parquet"
    empty.write_bytes(b"")
    truncated.write_bytes(data[: len(data) // 2])
    import pyarrow as pa
    import pyarrow.parquet as pq
    pq.write_table(pa.table({"x": [1]}), foreign)
    assert unreadable_reason(tmp_path / "none.parquet") == "no file"
    assert unreadable_reason(empty) == "an empty file"
    assert unreadable_reason(truncated).startswith("not a whole Parquet file")
    assert unreadable_reason(foreign) == "not a result file (no cell_id, metric, value column)"


# Status, resubmit and collect share one definition of a readable result. Each of these files has a
# whole footer, which status once took for a result while collect, reading the rows, left the file out.
def damaged_data_page(path):
    """The bytes of the `value` column's page overwritten: the footer still reads, the rows do not."""
    import pyarrow.parquet as pq

    column = pq.ParquetFile(path).metadata.row_group(0).column(1)
    assert column.path_in_schema == "value"
    data = bytearray(path.read_bytes())
    start = column.data_page_offset
    data[start:start + column.total_compressed_size] = b"\xff" * column.total_compressed_size
    path.write_bytes(bytes(data))


def rewritten(path, change):
    """The file written again with change(table, context) -> (table, context) applied."""
    import pyarrow.parquet as pq

    from bench_contract.results import CONTEXT_KEY

    table = pq.read_table(path)
    context = json.loads(table.schema.metadata[CONTEXT_KEY])
    table, context = change(table, context)
    pq.write_table(table.replace_schema_metadata({CONTEXT_KEY: json.dumps(context)}), path)


def without_hostname(path):  # an older schema
    rewritten(path, lambda table, context: (table, {k: v for k, v in context.items() if k != "hostname"}))


def without_note(path):
    rewritten(path, lambda table, context: (table.drop_columns(["note"]), context))


def value_as_words(path):
    import pyarrow as pa

    def change(table, context):
        index = table.schema.get_field_index("value")
        return table.set_column(index, "value", pa.array(["fast"] * table.num_rows)), context
    rewritten(path, change)


DAMAGES = (damaged_data_page, without_hostname, without_note, value_as_words)


def test_status_resubmit_and_collect_agree_on_each_damaged_result(tmp_path, monkeypatch):
    from helpers import status_states
    from test_status import campaign

    from orchestrator.run.resubmit import chosen_cells

    folder = campaign(tmp_path, with_results={("jax", 0), ("jax", 1), ("jax", 2), ("torch", 0), ("torch", 1)})
    damaged = {}
    for (framework, index), damage in zip([("jax", 0), ("jax", 1), ("jax", 2), ("torch", 0)], DAMAGES):
        path = folder / "rows" / framework / f"{framework}-{index}.parquet"
        damage(path)
        damaged[f"{framework}-{index}"] = path
    env, _ = fake_queue(tmp_path, sacct=[f"{job}_{i}|COMPLETED" for job in (70, 71) for i in range(3)])
    status = run_cli("status", "--results-dir", str(tmp_path / "results"), env=env)
    states = status_states(status.stdout)
    collected = run_cli("collect", "--results-dir", str(tmp_path / "results"), env=env)
    assert collected.returncode == 0, collected.stderr
    monkeypatch.setenv("PATH", env["PATH"])  # resubmit's choice reads the same fake queue
    rerun = {cell.cell_id for cell in chosen_cells(folder)}
    for cell_id, path in damaged.items():
        assert states[cell_id][0] == "failed" and states[cell_id][1].startswith("bad result: "), (cell_id, states)
        assert f"{path}: " in collected.stdout, (cell_id, collected.stdout)
        assert cell_id in rerun
    assert states["torch-1"] == ("completed", "result written") and "torch-1" not in rerun
    assert "4 result files are unreadable" in collected.stdout
