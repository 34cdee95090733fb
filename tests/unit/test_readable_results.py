"""A result file counts only when it is whole: empty, truncated and foreign files are named as such."""

from helpers import task_file

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
