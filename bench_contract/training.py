"""The training loop both backends run, written once so that they cannot drift apart.

A backend supplies the framework operations (`TrainingOps`); this module owns the epochs, the batch
order, what is timed and what is recorded. The timed region of a step is the framework's update on a
batch already on the device, up to the device finishing it; moving the batch to the device is outside it.
"""

from __future__ import annotations

import time
from typing import Any, Protocol

import numpy as np

from bench_contract.data import Dataset, epoch_batches
from bench_contract.results import ResultRows
from bench_contract.spec import JobSpec
from bench_contract.timing import StepTimer, step_time_statistics

EVAL_CHUNK = 1024


class TrainingOps(Protocol):
    def to_device(self, x: np.ndarray, y: np.ndarray) -> Any:
        """Return the batch on the device, transfer finished."""

    def train_step(self, batch: Any) -> Any:
        """Apply one update; return a handle to the loss (still on the device)."""

    def synchronize(self, out: Any) -> None:
        """Block until the device has finished the work that produced `out`."""

    def loss_value(self, out: Any) -> float: ...

    def predict(self, x: np.ndarray) -> np.ndarray:
        """Class predictions for a chunk of inputs, as a numpy array."""


def accuracy(ops: TrainingOps, x: np.ndarray, y: np.ndarray) -> float:
    correct = 0
    for start in range(0, len(x), EVAL_CHUNK):
        pred = ops.predict(x[start : start + EVAL_CHUNK])
        correct += int(np.sum(pred == y[start : start + EVAL_CHUNK]))
    return correct / len(x)


def run_training(spec: JobSpec, data: Dataset, ops: TrainingOps, rows: ResultRows) -> None:
    """Train for spec.epochs; record per-step loss, per-epoch validation accuracy, timings and test accuracy."""
    batches_per_epoch = len(data.x_train) // spec.batch_size
    if spec.warmup_steps >= batches_per_epoch * spec.epochs:
        raise ValueError(
            f"{spec.warmup_steps} warm-up steps leave no step to time in {spec.epochs} epoch(s) of "
            f"{batches_per_epoch} steps; train longer or lower warmup_steps"
        )
    timer = StepTimer(ops.synchronize, spec.warmup_steps)
    step = 0
    train_start = time.perf_counter()
    for epoch in range(spec.epochs):
        epoch_start = time.perf_counter()
        losses = []
        for idx in epoch_batches(len(data.x_train), spec.batch_size, spec.seed, epoch):
            batch = ops.to_device(data.x_train[idx], data.y_train[idx])
            out = timer.run(lambda: ops.train_step(batch))
            loss = ops.loss_value(out)
            if not np.isfinite(loss):
                raise FloatingPointError(f"training diverged: loss is {loss} at step {step} (epoch {epoch})")
            rows.add("train_loss", loss, "nats", epoch=epoch, step=step)
            losses.append(loss)
            step += 1
        rows.add("epoch_time", time.perf_counter() - epoch_start, "s", epoch=epoch)
        rows.add("train_loss_epoch_mean", float(np.mean(losses)), "nats", epoch=epoch)
        rows.add("val_accuracy", accuracy(ops, data.x_val, data.y_val), "fraction", epoch=epoch)
    rows.add("train_time_total", time.perf_counter() - train_start, "s")
    rows.add("warmup_steps", spec.warmup_steps, "steps")
    for metric, value, unit in step_time_statistics(timer.times_s, spec.batch_size):
        rows.add(metric, value, unit)
    rows.add("test_accuracy", accuracy(ops, data.x_test, data.y_test), "fraction")
