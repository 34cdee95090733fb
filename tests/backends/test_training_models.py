"""Training beyond the MLP: every (benchmark, model) that trains, in both frameworks, from the same weights
and the same batches, plain (use case 1) and as DP-SGD without noise (use case 3, models without batch
norm). Synthetic data, tiny variants, a few steps: enough to show that the two sides take the same steps.
The vision models train in batch norm's training mode and without dropout or stochastic depth in both
(bench_contract.models.vision.RANDOM_REGULARISERS); tests/backends/test_batch_norm.py checks the running statistics."""

import json
import os
import subprocess

import numpy as np
import pytest
from helpers import REPO_ROOT, curve, env_python, metric, write_graph_file, write_image_folder, write_text_folder
from test_backends import FRAMEWORKS, make_spec, run_backend

from bench_contract.models.vision import RANDOM_REGULARISERS
from bench_contract.results import read_task_table

# (benchmark, model, variant, use cases, relative tolerance of the loss curves). Convolutions sum in a
# different order in XLA and oneDNN, so a few steps of SGD drift apart a little more than the MLP's matmuls.
# The first loss (same weights, same batch, before any update) must agree to FIRST_LOSS_RTOL in every case.
# Measured largest differences over the 8 steps (CPU): cnn 1e-5; resnet18 4e-5; mobilenet_v3_small,
# efficientnet_b0 and vit_b_16 1e-7 (1,000 classes: the loss hardly moves in 8 steps at lr 0.01). resnet50
# 5.7e-3: its gradients at the first step agree to 3e-5 of each tensor's largest entry (float32 summation
# order), but training-mode batch norm over 2x2 maps of 16 examples amplifies that step after step (3e-4 at
# lr 0.001, 5.7e-3 at 0.01), hence its looser tolerance.
TRAINED = [
    ("mnist", "cnn", "tiny", (1, 3), 1e-3),
    ("cifar10", "cnn", "tiny", (1, 3), 1e-3),
    ("cifar10", "resnet18", "tiny", (1,), 1e-3),
    ("imagenet", "resnet50", "tiny", (1,), 2e-2),
    ("imagenet", "mobilenet_v3_small", "tiny", (1,), 1e-3),
    ("imagenet", "efficientnet_b0", "tiny", (1,), 1e-3),
    ("imagenet", "vit_b_16", "tiny", (1, 3), 1e-3),
    ("nlp", "transformer", "tiny", (1, 3), 1e-4),
    ("gnn", "gcn", "tiny", (1, 3), 1e-4),
]
CASES = [pytest.param(b, m, v, u, rtol, id=f"{b}-{m}-uc{u}") for b, m, v, cases, rtol in TRAINED for u in cases]
FIRST_LOSS_RTOL = 1e-5


def train_both(tmp_path, benchmark, model, variant, use_case, **overrides):
    frames = {}
    for framework in FRAMEWORKS:
        values = dict(benchmark=benchmark, model=model, model_variant=variant, use_case=use_case,
                      data_source="synthetic", synthetic_samples=160, batch_size=16, epochs=1, warmup_steps=1,
                      # One run of what is timed after the epoch (the pipelined steps, the per-sample versions):
                      # these tests compare losses, and a tiny ResNet's step is seconds of a CPU.
                      noise_multiplier=0.0, loop_batch_size=4, timed_steps=1, min_duration_s=0.0,
                      results_path=str(tmp_path / f"{framework}-{use_case}.parquet"))
        spec = make_spec(framework, tmp_path, **{**values, **overrides})
        proc = run_backend(framework, spec, tmp_path)
        assert proc.returncode == 0, proc.stderr
        frames[framework] = read_task_table(spec.results_path).to_pandas()
    return frames


@pytest.mark.parametrize("benchmark, model, variant, use_case, rtol", CASES)
def test_both_frameworks_train_the_same_steps(tmp_path, benchmark, model, variant, use_case, rtol):
    frames = train_both(tmp_path, benchmark, model, variant, use_case)
    jax_df, torch_df = frames["jax"], frames["torch"]
    assert metric(jax_df, "parameter_count") == metric(torch_df, "parameter_count")
    assert jax_df.init_weights_sha256.iloc[0] == torch_df.init_weights_sha256.iloc[0]
    assert len(curve(jax_df)) == len(curve(torch_df)) == 128 // 16
    assert curve(jax_df)[0] == pytest.approx(curve(torch_df)[0], rel=FIRST_LOSS_RTOL)
    np.testing.assert_allclose(curve(jax_df), curve(torch_df), rtol=rtol)
    for df in frames.values():
        assert 0 <= metric(df, "test_accuracy") <= 1 and metric(df, "throughput") > 0
        options = json.loads(df.framework_options.iloc[0])
        assert ("random_regularisers" in options) == (model in RANDOM_REGULARISERS)
        if use_case == 3:
            assert metric(df, "vectorization_speedup") > 0


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_a_backend_refuses_per_sample_gradients_of_a_batch_norm_model(tmp_path, framework):
    """The catalog refuses this at plan time; a hand-written spec gets the same reason from the backend."""
    spec = make_spec(framework, tmp_path, benchmark="cifar10", model="resnet18", model_variant="tiny", use_case=3,
                     data_source="synthetic", synthetic_samples=64, batch_size=8, epochs=1, warmup_steps=0)
    proc = run_backend(framework, spec, tmp_path)
    assert proc.returncode == 1
    assert "resnet18 has batch norm, which mixes the examples of a batch" in proc.stderr


def test_both_frameworks_train_on_an_image_folder_the_same_steps(tmp_path):
    """Real imagenet-style data: train/ for training and validation, val/ for the test, decoded by the contract."""
    root = write_image_folder(tmp_path / "imagenet", classes=3, per_class=12, split="train")
    write_image_folder(root, classes=3, per_class=2, split="val")
    frames = {}
    for framework in FRAMEWORKS:
        spec = make_spec(framework, tmp_path, benchmark="imagenet", model="vit_b_16", model_variant="tiny",
                         data_source="real", data_dir=str(root), batch_size=8, epochs=1, warmup_steps=0,
                         results_path=str(tmp_path / f"{framework}.parquet"))
        proc = run_backend(framework, spec, tmp_path)
        assert proc.returncode == 0, proc.stderr
        frames[framework] = read_task_table(spec.results_path).to_pandas()
    jax_df, torch_df = frames["jax"], frames["torch"]
    assert len(curve(jax_df)) == (36 - 3) // 8  # 3 images (a tenth) held out for validation
    np.testing.assert_allclose(curve(jax_df), curve(torch_df), rtol=1e-4)
    assert metric(jax_df, "test_accuracy") == metric(torch_df, "test_accuracy")
    assert set(jax_df.data_source) == {"real"}


# The real file formats of nlp and gnn, written small: (benchmark, model, writer, batch size, training samples).
REAL_FILES = [
    ("nlp", "transformer", lambda root: write_text_folder(root, train=160, test=20), 16, 144),
    ("gnn", "gcn", lambda root: write_graph_file(root, nodes=100), 8, 60),
]


@pytest.mark.parametrize("benchmark, model, write, batch_size, train_samples", REAL_FILES)
def test_real_files_train_the_same_steps_in_both(tmp_path, benchmark, model, write, batch_size, train_samples):
    root = write(tmp_path / "data")
    frames = train_both(tmp_path, benchmark, model, "tiny", 1, data_source="real", data_dir=str(root),
                        batch_size=batch_size, learning_rate=0.05)
    jax_df, torch_df = frames["jax"], frames["torch"]
    assert (jax_df.data_source == "real").all() and (torch_df.data_source == "real").all()
    assert len(curve(jax_df)) == len(curve(torch_df)) == train_samples // batch_size
    np.testing.assert_allclose(curve(jax_df), curve(torch_df), rtol=1e-4)
    assert metric(jax_df, "test_accuracy") == pytest.approx(metric(torch_df, "test_accuracy"), abs=0.051)


PROBE_BATCH = 4
# model_per_sample_probe.py computes in float64 (it says why: ReLU kinks). A batched matmul or convolution sums in
# another order than one example's; a float64 sum of K terms in any order is off by at most K * u of its terms'
# magnitude (u = 1.1e-16), K <= 3 * 3 * 512 = 4608 in these models: ~5e-13 per layer, ~1e-11 through the ~20
# layers of a gradient's path. 1e-9 of each tensor's largest entry is 100x that; a ReLU whose side flipped moves an
# example's gradients by ~1e-2 of it, a wrong vmap by more. Measured on AMD EPYC: 5e-15 at most.
PER_SAMPLE_TOLERANCE = 1e-9


@pytest.mark.parametrize("benchmark, model", [("nlp", "transformer"), ("gnn", "gcn")])
def test_per_sample_gradients_equal_a_loop_and_agree_between_frameworks(tmp_path, benchmark, model):
    """For the GCN a sample is a node of one shared graph: its gradient is that of its own node's loss alone."""
    grads = {}
    for framework in FRAMEWORKS:
        path = tmp_path / f"{framework}.npz"
        subprocess.run([str(env_python(framework)), str(REPO_ROOT / "tests" / "backends" / "model_per_sample_probe.py"),
                        framework, benchmark, model, str(path), str(PROBE_BATCH)],
                       check=True, cwd=REPO_ROOT, env={**os.environ, "PYTHONPATH": str(REPO_ROOT)}, timeout=600)
        with np.load(path) as f:
            grads[framework] = {k: f[k] for k in f.files}
    for framework, probe in grads.items():
        for key in (k for k in probe if k.startswith("vmap/")):
            name = key.split("/", 1)[1]
            assert probe[key].shape[0] == PROBE_BATCH
            np.testing.assert_allclose(probe[key], probe[f"loop/{name}"], rtol=0,
                                       atol=PER_SAMPLE_TOLERANCE * np.abs(probe[key]).max(),
                                       err_msg=f"{framework} {name}")
    assert grads["jax"].keys() == grads["torch"].keys()
    for key in grads["torch"]:
        np.testing.assert_allclose(grads["jax"][key], grads["torch"][key], rtol=0,
                                   atol=PER_SAMPLE_TOLERANCE * np.abs(grads["torch"][key]).max(), err_msg=key)
    # The examples differ: a vmap that broadcast one gradient to the whole batch would not pass this.
    head = "vmap/head.weight" if model == "transformer" else "vmap/conv2.lin.weight"
    assert not np.allclose(grads["torch"][head][0], grads["torch"][head][1])
