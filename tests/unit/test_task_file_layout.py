"""Task files store their context once: the measurement columns per row, the context as JSON in the
file's metadata. Readers get the wide table back; files of the earlier wide layout are still read and merged."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
from helpers import result_context, task_file

from bench_contract.results import SCHEMA
from orchestrator.results.collect import merge

MEASUREMENT_COLUMNS = ["metric", "value", "unit", "epoch", "step", "note"]


def wide_file_of_before(root, cell_id: str, throughput: float):
    """A task file as backends once wrote it: every column on every row, and without the columns added
    since (system, dp_engine ...), built here with pyarrow alone."""
    ctx = result_context(framework="torch", benchmark="digits", use_case=1, model="mlp", batch_size=32,
                         precision="fp32", device_model="CPU X", cell_id=cell_id, campaign="old",
                         hostname="node-7", trial=0)
    metrics = [("throughput", throughput, "samples/s", None, None), ("train_loss", 2.0, "nats", 0, 0)]
    columns = {name: [ctx[name]] * len(metrics) for name in SCHEMA.names if name in ctx}
    for k, name in enumerate(["metric", "value", "unit", "epoch", "step"]):
        columns[name] = [m[k] for m in metrics]
    columns["note"] = [None] * len(metrics)
    schema = pa.schema([f for f in SCHEMA if f.name not in ("system", "dp_engine", "dp_engine_mode", "trial",
                                                             "pair_order", "environment_kind")])
    path = root / "old" / "rows" / "torch" / f"{cell_id}.parquet"
    path.parent.mkdir(parents=True)
    pq.write_table(pa.Table.from_pydict({f.name: columns[f.name] for f in schema}, schema=schema), path)
    return path


def test_a_task_file_holds_the_measurement_columns_and_its_context_once(tmp_path):
    from bench_contract.results import CONTEXT_KEY, read_task_table

    path = task_file(tmp_path, "jax", 32, 2000.0)
    stored = pq.read_table(path)
    assert stored.column_names == MEASUREMENT_COLUMNS and stored.num_rows == 3
    context = json.loads(stored.schema.metadata[CONTEXT_KEY])
    assert context["cell_id"] == "jax-32" and context["batch_size"] == 32 and set(context) == set(SCHEMA.names[:-6])
    wide = read_task_table(path)  # what every reader sees: the context on each row, as before
    assert wide.schema.equals(SCHEMA) and wide.num_rows == 3
    assert set(wide.column("cell_id").to_pylist()) == {"jax-32"}
    assert wide.column("value").to_pylist()[0] == 2000.0


def test_collect_merges_files_of_the_wide_layout_beside_narrow_ones_into_the_same_columns(tmp_path):
    old = wide_file_of_before(tmp_path, "torch-32", 1000.0)
    new = task_file(tmp_path, "jax", 32, 2000.0, campaign="old")
    assert pq.read_schema(new).names == MEASUREMENT_COLUMNS and len(pq.read_schema(old).names) > 40
    collected = merge(tmp_path, tmp_path / "merged.parquet")
    assert collected.files == 2 and not collected.skipped
    merged = pq.read_table(tmp_path / "merged.parquet")
    assert merged.schema.equals(SCHEMA) and merged.num_rows == 5
    rows = merged.to_pandas()
    old_rows = rows[rows.cell_id == "torch-32"]
    assert len(old_rows) == 2 and set(old_rows.hostname) == {"node-7"} and set(old_rows.system) == {""}
    assert set(rows[rows.cell_id == "jax-32"].device_model) == {"CPU X"}
    assert sorted(rows[rows.metric == "throughput"].value) == [1000.0, 2000.0]


def test_a_file_whose_context_has_a_value_of_the_wrong_type_is_skipped_and_its_batch_merged(tmp_path):
    good = [task_file(tmp_path, "jax", batch, 100.0 * batch) for batch in (8, 16)]
    bad = task_file(tmp_path, "torch", 8, 50.0)
    table = pq.read_table(bad)
    metadata = dict(table.schema.metadata)
    context_key = next(key for key in metadata if b"context" in key)
    context = json.loads(metadata[context_key])
    context["use_case"] = "one"  # an int32 column
    pq.write_table(table.replace_schema_metadata({**metadata, context_key: json.dumps(context).encode()}), bad)
    collected = merge(tmp_path, tmp_path / "merged.parquet")
    assert collected.files == 2 and len(good) == 2
    assert [(path, reason.split(":")[0]) for path, reason in collected.skipped] == [
        (bad, "context values of the wrong type")]
    assert set(pq.read_table(tmp_path / "merged.parquet").column("cell_id").to_pylist()) == {"jax-8", "jax-16"}

