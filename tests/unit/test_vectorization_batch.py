"""The vectorisation timing: vmap and the per-example loop are timed on the same batch, by default the
batch one device trains on, the loop bounded by a time budget that is recorded; --loop-batch-size overrides."""

import time

import numpy as np
import pytest
from helpers import rows_for_test, spec

from bench_contract.data.datasets import Dataset
from bench_contract.run import training
from bench_contract.run.training import time_vectorization
from bench_contract.spec import JobSpec, SpecError


class SizeLoggingOps:
    """Per-sample ops that log the batch each call gets; the loop takes `loop_s` a run."""

    def __init__(self, loop_s: float = 0.0):
        self.loop_s, self.calls = loop_s, {"vectorized": [], "loop": []}

    def local_batch(self, x, y):
        return x, y

    def clipped_sum_vectorized(self, batch):
        self.calls["vectorized"].append(len(batch[0]))
        return 0

    def clipped_sum_loop(self, batch):
        self.calls["loop"].append(len(batch[0]))
        time.sleep(self.loop_s)
        return 0

    def synchronize(self, out):
        pass

    def compilations(self):
        return 0

    vectorized_compiled, loop_compiled = True, False


def dataset(samples: int = 256) -> Dataset:
    x, y = np.zeros((samples, 3), np.float32), np.zeros(samples, np.int64)
    return Dataset("digits", "synthetic", x, y, x[:4], y[:4], x[:4], y[:4], 2)


def dp_spec(tmp_path, **changes) -> JobSpec:
    """JAX's digits MLP in DP-SGD (use case 3) at batch 128, five timed steps, its rows under tmp_path."""
    return spec(**({"cell_id": "jax-cell", "pair_key": "cell", "use_case": 3, "batch_size": 128, "timed_steps": 5,
                    "min_duration_s": 0.0, "results_path": str(tmp_path / "rows.parquet")} | changes))


def recorded_values(rows) -> dict:
    return {row["metric"]: row["value"] for row in rows.rows}


def test_both_are_timed_at_the_training_batch_by_default_and_loop_batch_size_overrides_it(tmp_path):
    for changes, expected in (({}, 128), ({"loop_batch_size": 8}, 8)):
        ops, rows = SizeLoggingOps(), rows_for_test()
        time_vectorization(dp_spec(tmp_path, **changes), dataset(), ops, rows)
        assert set(ops.calls["vectorized"]) == set(ops.calls["loop"]) == {expected}, changes
        assert recorded_values(rows)["loop_batch_size"] == expected
        # a loop well inside its budget keeps the stopping rule of inference (timed_steps 5, min_duration 0)
        assert recorded_values(rows)["per_sample_grads_loop_timed_steps"] == 5


def test_with_several_processes_the_batch_is_one_devices_share():
    spec = JobSpec(campaign="c", cell_id="c", pair_key="c", framework="jax", benchmark="digits", use_case=4,
                   model="mlp", batch_size=128, precision="fp32", nodes=2, tasks_per_node=2)
    assert training.vectorization_batch_size(spec) == 32


def test_the_loop_stops_at_its_budget_and_the_budget_is_recorded(tmp_path, monkeypatch):
    monkeypatch.setattr(training, "LOOP_TIME_BUDGET_S", 0.05)
    ops, rows = SizeLoggingOps(loop_s=0.02), rows_for_test()
    time_vectorization(dp_spec(tmp_path, timed_steps=50), dataset(), ops, rows)
    values = recorded_values(rows)
    assert values["per_sample_grads_loop_time_budget"] == 0.05
    # 0.02 s a run: the budget is spent after at most 3 timed runs, well before the 50 the stopping rule asks
    assert 1 <= values["per_sample_grads_loop_timed_steps"] <= 3
    assert values["per_sample_grads_vectorized_timed_steps"] == 50  # the vectorised version keeps its rule
    assert len(ops.calls["loop"]) == training.LOOP_WARMUP + values["per_sample_grads_loop_timed_steps"]


def test_a_loop_longer_than_its_budget_is_still_timed_once_whole(tmp_path, monkeypatch):
    monkeypatch.setattr(training, "LOOP_TIME_BUDGET_S", 0.001)
    ops, rows = SizeLoggingOps(loop_s=0.01), rows_for_test()
    time_vectorization(dp_spec(tmp_path), dataset(), ops, rows)
    assert recorded_values(rows)["per_sample_grads_loop_timed_steps"] == 1
    assert recorded_values(rows)["per_sample_grads_loop_time_p50"] >= 10.0  # the whole run, on the whole batch
    assert ops.calls["loop"] == [128] * (training.LOOP_WARMUP + 1)


def test_a_negative_loop_batch_size_is_refused_in_one_sentence(tmp_path):
    with pytest.raises(SpecError, match=r"--loop-batch-size cannot be negative \(0: the training batch\)"):
        dp_spec(tmp_path, loop_batch_size=-1)


def test_the_rows_say_whether_each_version_ran_compiled_or_eagerly(tmp_path):
    """A jitted loop (JAX) and an eager one (PyTorch) make different speed-ups: the DP-SGD table names each side's
    from these rows (orchestrator.results.views)."""
    rows = rows_for_test()
    time_vectorization(dp_spec(tmp_path), dataset(), SizeLoggingOps(), rows)
    values = recorded_values(rows)
    assert (values["per_sample_grads_vectorized_compiled"], values["per_sample_grads_loop_compiled"]) == (1.0, 0.0)
