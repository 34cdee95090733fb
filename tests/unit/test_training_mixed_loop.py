"""The training loop's part of mixed precision and compiled training: the loss scale after every step and
the skipped steps, and a lazily compiled step's compilation recorded apart from the timed steps."""

import time

import numpy as np
import pytest
from helpers import rows_for_test

from bench_contract.data.datasets import Dataset
from bench_contract.measure.flops import Flops
from bench_contract.run.training import run_training
from bench_contract.spec import JobSpec

COMPILE_S = 0.3  # what the fake's first step spends compiling
STEP_S = 0.005


class FakeOps:
    """A step that compiles in its first call when `compiles_lazily`, and a loss scale that follows `scales`."""

    def __init__(self, compiles_lazily=False, scales=None, recompiles_at=(), graph_breaks=None):
        self.compiles_lazily, self.scales, self.steps = compiles_lazily, scales, 0
        self.breaks = graph_breaks or {}
        self.recompiles_at = set(recompiles_at)  # steps that compile again (a new shape), as Dynamo does

    def to_device(self, x, y):
        return x, y

    def compiles_now(self) -> bool:
        return self.compiles_lazily and (self.steps == 0 or self.steps in self.recompiles_at)

    def train_step(self, batch):
        time.sleep(COMPILE_S + STEP_S if self.compiles_now() else STEP_S)
        self.steps += 1
        return 1.0

    def synchronize(self, out):
        pass

    def compilations(self):
        return sum(1 for step in range(self.steps) if step == 0 or step in self.recompiles_at) \
            if self.compiles_lazily else 0

    def graph_breaks(self):
        return self.breaks

    def loss_value(self, out):
        return out

    def loss_scale(self):
        return None if self.scales is None else self.scales[self.steps]

    def predict(self, x):
        return np.zeros(len(x), np.int64)

    def flops_per_step(self, batch):
        return Flops(1.0, "fake")


def train(ops, tmp_path):
    x, y = np.zeros((24, 3), np.float32), np.zeros(24, np.int64)
    data = Dataset("digits", "synthetic", x, y, x[:4], y[:4], x[:4], y[:4], 2)
    spec = JobSpec(campaign="c", cell_id="torch-cell", pair_key="cell", framework="torch", benchmark="digits",
                   use_case=1, model="mlp", batch_size=4, precision="fp16", warmup_steps=2,
                   results_path=str(tmp_path / "rows.parquet"))
    rows = rows_for_test()
    run_training(spec, data, ops, rows)
    return rows.rows


def values_of(rows, metric):
    return [r["value"] for r in rows if r["metric"] == metric]


def test_the_loss_scale_of_every_step_is_recorded_and_a_drop_counts_as_a_skipped_step(tmp_path):
    # Before the first step 8; after steps 0..5: backoff (skipped), same, growth, backoff (skipped), same, same.
    rows = train(FakeOps(scales=[8, 4, 4, 8, 4, 4, 4]), tmp_path)
    assert values_of(rows, "loss_scale") == [4, 4, 8, 4, 4, 4]
    assert [r["step"] for r in rows if r["metric"] == "loss_scale"] == list(range(6))
    assert values_of(rows, "skipped_steps") == [2]
    unscaled = train(FakeOps(), tmp_path)  # without loss scaling nothing about it is recorded
    assert not values_of(unscaled, "loss_scale") and not values_of(unscaled, "skipped_steps")


def test_a_lazily_compiled_step_has_its_compilation_recorded_apart_from_the_timed_steps(tmp_path):
    rows = train(FakeOps(compiles_lazily=True), tmp_path)
    assert values_of(rows, "compile_time")[0] == pytest.approx(COMPILE_S, abs=0.1)
    assert values_of(rows, "compile_first_call_time")[0] >= COMPILE_S
    assert max(values_of(rows, "step_time")) < COMPILE_S * 1e3 / 2  # ms: the compiling step is a warm-up step
    assert values_of(rows, "recompilations_timed") == [0]
    assert not values_of(train(FakeOps(), tmp_path), "compile_time")  # compiled ahead of time: the backend records it


def test_a_lazily_compiled_step_records_its_graph_breaks_and_why(tmp_path):
    breaks = {"Unsupported Tensor.backward() call": 1, "User-inserted graph break. Message: None": 2}
    rows = train(FakeOps(compiles_lazily=True, graph_breaks=breaks), tmp_path)
    (row,) = [r for r in rows if r["metric"] == "graph_breaks"]
    assert row["value"] == 3
    assert row["note"] == "1x Unsupported Tensor.backward() call; 2x User-inserted graph break. Message: None"
    (whole,) = [r for r in train(FakeOps(compiles_lazily=True), tmp_path) if r["metric"] == "graph_breaks"]
    assert whole["value"] == 0 and whole["note"].startswith("none")
    assert not values_of(train(FakeOps(), tmp_path), "graph_breaks")  # nothing compiled lazily, nothing to break


def test_a_recompilation_inside_the_timed_steps_is_counted_there(tmp_path):
    """A step that compiles again after the warm-up (Dynamo meeting a new shape) is counted in recompilations_timed,
    which makes its comparison row not comparable (orchestrator.results.certificate); the first compilation, in a
    warm-up step, is not."""
    rows = train(FakeOps(compiles_lazily=True, recompiles_at=(3, 4)), tmp_path)
    assert values_of(rows, "recompilations_timed") == [2]
    assert max(values_of(rows, "step_time")) >= COMPILE_S * 1e3  # ms: the timed steps that compiled
