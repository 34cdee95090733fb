"""Pipelined throughput beside per-step latency (#15): a run of consecutive training steps with one
synchronisation at the end, recorded after the per-step measurement as throughput_pipelined."""

import time

import numpy as np
from helpers import rows_for_test

from bench_contract.data.datasets import Dataset
from bench_contract.measure.flops import Flops
from bench_contract.run.training import measure_pipelined, run_training
from bench_contract.spec import JobSpec

STEP_S = 0.002


class CountingOps:
    """A step that takes STEP_S and returns its own number; every synchronisation is logged with its output."""

    def __init__(self):
        self.steps, self.syncs = 0, []

    def to_device(self, x, y):
        return x, y

    def train_step(self, batch):
        time.sleep(STEP_S)
        self.steps += 1
        return self.steps

    def synchronize(self, out):
        self.syncs.append(out)

    def compilations(self):
        return 0

    def loss_value(self, out):
        return 1.0

    def loss_scale(self):
        return None

    compiles_lazily = False

    def predict(self, x):
        return np.zeros(len(x), np.int64)

    def flops_per_step(self, batch):
        return Flops(1.0, "fake")


def test_a_pipelined_run_synchronises_once_on_its_last_step():
    ops = CountingOps()
    seconds = measure_pipelined(ops, batch=None, steps=7)
    assert ops.steps == 7
    assert ops.syncs == [7]  # once, and on the last step's output: everything before it is then done too
    assert seconds >= 7 * STEP_S


def test_training_rows_have_pipelined_throughput_after_the_per_step_measurement(tmp_path):
    x, y = np.zeros((40, 3), np.float32), np.zeros(40, np.int64)
    data = Dataset("digits", "synthetic", x, y, x[:4], y[:4], x[:4], y[:4], 2)
    spec = JobSpec(campaign="c", cell_id="jax-cell", pair_key="cell", framework="jax", benchmark="digits",
                   use_case=1, model="mlp", batch_size=4, precision="fp32", warmup_steps=2, timed_steps=5,
                   results_path=str(tmp_path / "rows.parquet"))
    ops, rows = CountingOps(), rows_for_test()
    run_training(spec, data, ops, rows)
    values = {row["metric"]: row["value"] for row in rows.rows if row.get("step") is None}
    assert values["pipelined_steps"] == 5
    # 5 steps of at least STEP_S each: at most 4 / STEP_S samples per second, and more than nothing
    assert 0 < values["throughput_pipelined"] <= spec.batch_size / STEP_S
    # Each of the epoch's 10 steps is synchronised (warm-up ones too); the 5 pipelined steps are once, at the end.
    assert ops.syncs == [*range(1, 11), 15] and ops.steps == 15
