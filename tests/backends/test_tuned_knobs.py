"""Every knob of a framework's CPU search space reaches the real backend, is recorded on its rows, and leaves the
mathematics alone: the same digits cell run out of the box and with every knob moved gives the same losses
(training) and the same outputs (inference) within the precision's own bound (bench_contract.run.parity)."""

import json

import numpy as np
import pytest
from helpers import curve, metric
from test_backends import make_spec, run_backend

from bench_contract.results import read_task_table
from bench_contract.run.inference import OUTPUT_METRICS
from bench_contract.run.parity import TOLERANCES
from bench_contract.tuning import TUNED, TUNED_USE_CASES, space

# A value other than out of the box for each knob; torch.compile's default mode rather than max-autotune, whose
# autotuning takes minutes on two cores and compiles the same graph. Training leaves torch.compile out: compiling
# the train step cost about 100 s of this test's 130 on two cores, the compiled step's losses against eager's are
# tests/backends/test_mixed_precision_training.py's, and the knob is read (TunedExecution.compile_mode) as in
# inference, which moves it.
MOVED = {"torch_mode": "default"}
LEFT_OUT = {1: {"torch_mode"}}


def every_knob_moved(framework: str, use_case: int) -> dict:
    knobs = space(framework, "cpu", use_case, convolutional=False, constant_rate=True)
    return {knob.name: MOVED.get(knob.name, knob.values[-1]) for knob in knobs
            if knob.name not in LEFT_OUT.get(use_case, set())}


@pytest.mark.parametrize("use_case", TUNED_USE_CASES)
@pytest.mark.parametrize("framework", ["jax", "torch"])
def test_every_knob_runs_is_recorded_and_keeps_the_results(tmp_path, framework, use_case):
    tuned = every_knob_moved(framework, use_case)
    assert len(tuned) >= 2, tuned  # the space has something to move
    frames = {}
    for level, configuration in (("oob", {}), ("tuned", tuned)):
        folder = tmp_path / level
        folder.mkdir()
        extra = {"tuning": TUNED, "tuned": configuration} if configuration else {}
        spec = make_spec(framework, folder, use_case=use_case, epochs=1, init_weights_path=str(tmp_path / "w.npz"),
                         **({"batch_size": 8} if use_case == 5 else {}), **extra)
        proc = run_backend(framework, spec, folder)
        assert proc.returncode == 0, proc.stderr[-3000:]
        frames[level] = read_task_table(folder / f"{framework}.parquet").to_pandas()
    options = json.loads(frames["tuned"].framework_options.iloc[0])
    assert options["tuned"] == tuned and options["tuning"] == {"level": TUNED, "budget": 0}
    assert "tuned" not in json.loads(frames["oob"].framework_options.iloc[0])
    if framework == "jax":  # the XLA flags the knobs name are those XLA ran with
        flags = frames["tuned"].xla_flags.iloc[0]
        assert "--xla_cpu_multi_thread_eigen=false" in flags and "--xla_cpu_use_fusion_emitters=false" in flags
    else:
        assert options["mode"].startswith("torch.compile") == ("torch_mode" in tuned)
    bound = TOLERANCES["fp32"]
    if use_case == 1:
        oob, moved = curve(frames["oob"]), curve(frames["tuned"])
        assert len(oob) == len(moved)
        assert np.max(np.abs(moved - oob)) <= bound * np.max(np.abs(oob))
    else:
        scale = metric(frames["oob"], "output_abs_max")
        for name in OUTPUT_METRICS:
            assert abs(metric(frames["tuned"], name) - metric(frames["oob"], name)) <= bound * scale, name
