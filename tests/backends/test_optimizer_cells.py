"""Optimizers, schedules and pipelined throughput in real backend cells, both frameworks: a momentum
cell (use case 1) and a DP-Adam cell (use case 3, without noise so the frameworks can agree) with a
warm-up-then-cosine schedule take the same steps, and every training cell records throughput_pipelined."""

import json

import numpy as np
import pytest
from helpers import curve
from test_backends import FRAMEWORKS, make_spec, run_backend

from bench_contract.results import read_task_table

# These are float32 cells as users run them (test_optimizers.py compares the optimizers in float64). Per step the
# two frameworks' losses differ by float32 rounding of sums of up to 512 products (about sqrt(512) * 6e-8 ~ 1.4e-6
# relative, independent roundings), and plain momentum carries it on without growth: 2e-6. Adam divides by the root
# of the squared gradients, so the rounding of a near-zero gradient becomes a step of size lr: 2e-3. Measured on
# the Intel Xeons and on an AMD EPYC: 2.2e-7 (momentum) and 1.5e-5 (DP-Adam). A ReLU input within rounding of zero
# would part the losses at one step by far more (test_optimizers.py's docstring); digits' MLP met none on either.
LOSS_RTOL = {"momentum": 2e-6, "adam": 2e-3}

CELLS = {
    "nesterov_cosine": {"use_case": 1, "optimizer": "momentum", "nesterov": True, "weight_decay": 0.01,
                        "lr_schedule": "warmup_cosine", "lr_warmup_steps": 5, "lr_decay_steps": 30},
    "dp_adam_cosine": {"use_case": 3, "optimizer": "adam", "learning_rate": 0.001, "noise_multiplier": 0.0,
                       "lr_schedule": "warmup_cosine", "lr_warmup_steps": 5, "lr_decay_steps": 30,
                       "loop_batch_size": 4},
}
PIPELINED_STEPS = 7


@pytest.fixture(scope="module", params=CELLS)
def optimizer_cell(request, tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp(request.param)
    frames = {}
    for framework in FRAMEWORKS:
        spec = make_spec(framework, tmp_path, epochs=1, timed_steps=PIPELINED_STEPS, min_duration_s=0.0,
                         **CELLS[request.param])
        proc = run_backend(framework, spec, tmp_path)
        assert proc.returncode == 0, proc.stderr
        frames[framework] = read_task_table(tmp_path / f"{framework}.parquet").to_pandas()
    return frames


def test_both_frameworks_take_the_same_steps(optimizer_cell):
    optimizer = optimizer_cell["jax"].settings.map(lambda text: json.loads(text)["optimizer"]).iloc[0]
    losses = {fw: curve(df) for fw, df in optimizer_cell.items()}
    assert len(losses["jax"]) == len(losses["torch"]) == 1257 // 32
    np.testing.assert_allclose(losses["jax"], losses["torch"], rtol=LOSS_RTOL[optimizer])


def test_every_training_cell_records_pipelined_throughput(optimizer_cell):
    for framework, frame in optimizer_cell.items():
        values = frame[frame.step.isna()].set_index("metric")["value"]
        assert values["pipelined_steps"] == PIPELINED_STEPS, framework
        assert values["throughput_pipelined"] > 0, framework
        unit = frame.set_index("metric").loc["throughput_pipelined", "unit"]
        assert unit == frame.set_index("metric").loc["throughput", "unit"] == "samples/s"
