"""The contract package: specs, data order, shared initial weights, timing and result files."""

import dataclasses
import time

import numpy as np
import pytest
from helpers import result_context, spec, write_idx

from bench_contract.data import datasets as data
from bench_contract.measure.timing import StepTimer, step_time_statistics
from bench_contract.models import weights
from bench_contract.results import SCHEMA, ResultRows, read_task_table, write_table_atomic
from bench_contract.spec import JobSpec, SpecError


def test_spec_round_trips_through_json():
    s = spec(epochs=3, data_dir="/data/mnist")
    assert JobSpec.from_json(s.to_json()) == s



def test_a_specs_file_holds_one_spec_per_line_and_each_task_reads_its_own(tmp_path):
    specs = [spec(cell_id=f"jax-{i}", batch_size=8 * (i + 1)) for i in range(3)]
    path = tmp_path / "jax.jsonl"
    path.write_text("".join(s.to_line() + "\n" for s in specs))
    assert [JobSpec.read(path, i) for i in range(3)] == specs
    assert JobSpec.from_json(specs[0].to_line()) == JobSpec.from_json(specs[0].to_json())
    with pytest.raises(SpecError, match="has 3 lines, so no spec for array index 3"):
        JobSpec.read(path, 3)

@pytest.mark.parametrize("overrides, message", [
    (dict(batch_size=0), "batch_size must be a positive integer"),
    (dict(device="tpu"), "unknown --device 'tpu'; choose from: auto, cpu, gpu"),
    (dict(schema_version=99), "re-plan the campaign"),
])
def test_bad_specs_are_refused(overrides, message):
    with pytest.raises(SpecError, match=message):
        spec(**overrides)


def test_unknown_spec_fields_are_refused():
    text = spec().to_json().replace('"batch_size"', '"batch_sise"')
    with pytest.raises(SpecError, match="unknown fields in job spec: batch_sise"):
        JobSpec.from_json(text)


def test_batches_are_the_same_for_every_reader_and_drop_the_partial_one():
    a = data.epoch_batches(100, 32, seed=3, epoch=1)
    b = data.epoch_batches(100, 32, seed=3, epoch=1)
    assert len(a) == 3 and all(len(x) == 32 for x in a)
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    assert not np.array_equal(a[0], data.epoch_batches(100, 32, seed=3, epoch=2)[0])
    assert len(set(np.concatenate(a).tolist())) == 96


def test_digits_is_real_standardised_and_split_disjointly():
    d = data.load_digits()
    assert (len(d.x_train), len(d.x_val), len(d.x_test)) == (1257, 180, 360)
    assert d.sample_shape == (64,)
    assert abs(float(d.x_train.mean())) < 1e-3
    assert set(np.unique(d.y_test)) == set(range(10))


def test_mnist_reader_reads_idx_files_plain_and_gzipped(tmp_path):
    rng = np.random.default_rng(0)
    write_idx(tmp_path / "train-images-idx3-ubyte.gz", rng.integers(0, 255, (5010, 28, 28)))
    write_idx(tmp_path / "train-labels-idx1-ubyte", rng.integers(0, 10, (5010,)))
    write_idx(tmp_path / "t10k-images-idx3-ubyte", rng.integers(0, 255, (7, 28, 28)))
    write_idx(tmp_path / "t10k-labels-idx1-ubyte.gz", rng.integers(0, 10, (7,)))
    d = data.load_mnist(str(tmp_path))
    assert d.x_train.shape == (10, 1, 28, 28) and d.x_val.shape == (5000, 1, 28, 28) and d.x_test.shape == (7, 1, 28, 28)
    assert data.missing_mnist_files(tmp_path) == []


def test_a_truncated_idx_file_is_a_clear_error(tmp_path):
    path = tmp_path / "x"
    write_idx(path, np.zeros((4, 2, 2)))
    path.write_bytes(path.read_bytes()[:-3])
    with pytest.raises(data.DataError, match="holds 13 values, its header promises 16"):
        data.read_idx(path)


def test_initial_weights_do_not_depend_on_parameter_order(tmp_path):
    specs = weights.mlp_param_specs(64, (512, 512), 10)
    a = weights.make_initial_weights(specs, seed=1)
    b = weights.make_initial_weights(list(reversed(specs)), seed=1)
    c = weights.make_initial_weights(specs, seed=2)
    assert all(np.array_equal(a[k], b[k]) for k in a)
    assert not np.array_equal(a["fc1.weight"], c["fc1.weight"])
    bound = 1 / np.sqrt(64)
    assert a["fc1.weight"].shape == (512, 64) and np.abs(a["fc1.weight"]).max() <= bound


def test_the_first_task_writes_the_weights_and_later_ones_read_the_same_file(tmp_path):
    path = tmp_path / "init" / "w.npz"
    specs = weights.mlp_param_specs(64, (512, 512), 10)
    first, sha1 = weights.load_or_create(path, specs, seed=0)
    second, sha2 = weights.load_or_create(path, specs, seed=0)
    assert sha1 == sha2 == weights.file_sha256(path)
    assert list(path.parent.iterdir()) == [path]
    with pytest.raises(ValueError, match="do not match this model"):
        weights.load_or_create(path, weights.mlp_param_specs(784, (512, 512), 10), seed=0)


def test_the_clock_stops_only_after_the_device_is_synchronised():
    def slow_sync(_):
        time.sleep(0.02)  # stands in for work still queued on the device

    timer = StepTimer(slow_sync, warmup_steps=1)
    for _ in range(3):
        timer.run(lambda: None)
    assert len(timer.times_s) == 2  # the warm-up step is not recorded
    assert min(timer.times_s) >= 0.02


def test_step_statistics():
    stats = {name: value for name, value, _ in step_time_statistics([0.01, 0.02, 0.03, 0.04], samples_per_step=10)}
    assert stats["throughput"] == pytest.approx(40 / 0.1)
    assert stats["step_time_p50"] == pytest.approx(25.0)
    with pytest.raises(ValueError, match="no timed steps"):
        step_time_statistics([], 10)


def context():
    return result_context()


def test_result_rows_are_written_whole_with_the_schema(tmp_path):
    rows = ResultRows(context())
    rows.add("throughput", 123.0, "samples/s")
    rows.add("train_loss", 2.3, "nats", epoch=0, step=0)
    path = rows.write(tmp_path / "rows" / "a.parquet")
    table = read_task_table(path)
    assert table.schema.equals(SCHEMA)
    assert table.num_rows == 2
    assert [p.name for p in path.parent.iterdir()] == ["a.parquet"]  # no temporary file left


def test_a_nan_metric_is_refused():
    with pytest.raises(ValueError, match="NaN"):
        ResultRows(context()).add("throughput", float("nan"), "samples/s")


def test_a_context_with_a_missing_column_is_refused():
    ctx = context()
    del ctx["device_model"]
    with pytest.raises(ValueError, match="lacks device_model"):
        ResultRows(ctx)


def test_atomic_write_leaves_the_old_file_when_writing_fails(tmp_path):
    path = tmp_path / "a.parquet"
    rows = ResultRows(context())
    rows.add("throughput", 1.0, "samples/s")
    rows.write(path)
    before = path.read_bytes()
    with pytest.raises(Exception):
        write_table_atomic("not a table", path)
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["a.parquet"]


def test_publish_without_replace_keeps_the_first_writers_file(tmp_path):
    from bench_contract.atomic import publish

    path = tmp_path / "w.bin"
    publish(path, lambda tmp: tmp.write_bytes(b"first"), replace=False)
    publish(path, lambda tmp: tmp.write_bytes(b"second"), replace=False)
    assert path.read_bytes() == b"first"
    publish(path, lambda tmp: tmp.write_bytes(b"third"))
    assert path.read_bytes() == b"third"
    assert [p.name for p in tmp_path.iterdir()] == ["w.bin"]


def test_the_data_fingerprint_tells_data_sets_and_their_sizes_apart():
    """What the certificate compares between the two sides of a row (Dataset.fingerprint)."""
    from bench_contract.data.loading import load_dataset

    digits = load_dataset("digits", "real")
    assert digits.fingerprint() == load_dataset("digits", "real").fingerprint()  # the same data: the same words
    assert digits.fingerprint().startswith("1,257/180/360 train/val/test examples, sha256 ")
    small, large = (load_dataset("mnist", "synthetic", synthetic_samples=n).fingerprint() for n in (256, 512))
    assert len({digits.fingerprint(), small, large}) == 3
    relabelled = dataclasses.replace(digits, y_test=(digits.y_test + 1) % digits.num_classes)
    assert relabelled.fingerprint() != digits.fingerprint()  # every label counts, not only the sizes
