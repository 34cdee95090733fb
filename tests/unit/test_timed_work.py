"""The work of the timed training steps: throughput and the FLOPs behind MFU count the examples
the timed steps drew, never the nominal B nor the last batch's draw, and never the padding.

In a digits use-case-3 run the last Poisson batch drew 18 examples while the timed steps averaged 15.64: both MFUs
came out 15% high, and throughput divided by B = 16 instead of the examples drawn."""

import numpy as np
import pytest
from helpers import rows_for_test

from bench_contract.data.datasets import Dataset
from bench_contract.measure.efficiency import Efficiency
from bench_contract.measure.energy import EnergyMeter
from bench_contract.measure.flops import Flops, Peak
from bench_contract.run.training import run_training
from bench_contract.spec import JobSpec

PER_EXAMPLE = 3.0e6  # the fake step's FLOPs per example it computes
PEAK = 1.0e12  # the fake device's peak FLOP/s
TRAIN, BATCH = 40, 4
# The arithmetic checked is a few float64 operations on 8 timed steps (and each step's time read back from its
# millisecond row, x 1e3 then / 1e3): a relative error of a few 1e-16. 1e-12 leaves room for that and is far
# below what one example more or less moves the figures by (1/B of them, 25% here).
REL = 1e-12


class WorkOps:
    """A training step counted as the real backends count theirs: PER_EXAMPLE FLOPs per example of the batch as it
    ran, its padding included where it pads (JAX counts the compiled padded program; PyTorch its drawn batch)."""

    compiles_lazily = False

    def __init__(self, pads_batches: bool):
        self.pads_batches = pads_batches

    def to_device(self, x, y):
        return x, y

    def train_step(self, batch):
        return len(batch[1])

    def synchronize(self, out):
        pass

    def compilations(self):
        return 0

    def loss_value(self, out):
        return 1.0

    def loss_scale(self):
        return None

    def predict(self, x):
        return np.zeros(len(x), np.int64)

    def flops_per_step(self, batch):
        return Flops(PER_EXAMPLE * len(batch[1]), "fake: per example computed")


def poisson_run(tmp_path, pads_batches: bool) -> tuple[dict, dict, dict]:
    """One epoch of 10 Poisson steps at B = 4, 2 of them warm-up: (the summary values, each step's draw, each timed
    step's seconds), the last two by step."""
    x, y = np.zeros((TRAIN, 3), np.float32), np.zeros(TRAIN, np.int64)
    data = Dataset("digits", "synthetic", x, y, x[:4], y[:4], x[:4], y[:4], 2)
    spec = JobSpec(campaign="c", cell_id="jax-cell", pair_key="cell", framework="jax", benchmark="digits",
                   use_case=3, model="mlp", batch_size=BATCH, precision="fp32", warmup_steps=2, timed_steps=5,
                   sampling="poisson", noise_multiplier=0.0, results_path=str(tmp_path / "rows.parquet"))
    efficiency = Efficiency(EnergyMeter(unavailable="a fake device"), lambda: Peak(PEAK, "a fake peak"))
    rows = rows_for_test()
    run_training(spec, data, WorkOps(pads_batches), rows, efficiency=efficiency)
    values = {row["metric"]: row["value"] for row in rows.rows if row.get("step") is None}
    drawn = {row["step"]: row["value"] for row in rows.rows if row["metric"] == "drawn_batch_size"}
    seconds = {row["step"]: row["value"] / 1e3 for row in rows.rows if row["metric"] == "step_time"}
    return values, drawn, seconds


@pytest.mark.parametrize("pads_batches", [False, True], ids=["drawn (PyTorch)", "padded (JAX)"])
def test_throughput_and_mfu_count_the_examples_the_timed_steps_drew(tmp_path, pads_batches):
    values, drawn, seconds = poisson_run(tmp_path, pads_batches)
    timed = [drawn[step] for step in seconds]
    mean = sum(timed) / len(timed)
    # This seed's draws show the defect: the timed steps' mean is neither B nor the last batch's draw.
    assert len(timed) == 8 and mean != BATCH and drawn[max(drawn)] != mean
    assert values["timed_batch_size_mean"] == mean
    assert values["throughput"] == pytest.approx(sum(timed) / sum(seconds.values()), rel=REL)
    assert values["flops_per_step"] == pytest.approx(PER_EXAMPLE * mean, rel=REL)
    achieved = PER_EXAMPLE * sum(timed) / sum(seconds.values())
    assert values["achieved_flops"] == pytest.approx(achieved, rel=REL)
    assert values["mfu"] == pytest.approx(achieved / PEAK, rel=REL)

