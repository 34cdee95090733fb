"""Use case 3 in each backend's own environment: per-sample gradients are right, and the two frameworks agree.

- `vmap` gives the same per-sample gradients as a per-example loop, in each framework;
- JAX and PyTorch give the same per-sample gradients and the same DP-SGD update for the same weights and batch;
- a DP-SGD run on digits learns, with sigma 0 both loss curves coincide, and the vectorisation is timed;
- the two functions that vectorisation timing runs (clipped sums, vectorised and as a loop) equal a per-example
  reference in each framework, and agree between the frameworks.
"""


import numpy as np
import pytest
from helpers import REPO_ROOT, prefixed, probe_arrays, run_in_env
from test_backends import FRAMEWORKS, make_spec, metric, run_backend

from bench_contract.results import read_task_table
from bench_contract.spec import CLIP_EPSILON

CLIP_NORM = 0.5  # small enough that most examples of the probe batch are really clipped
LEARNING_RATE = 0.1
PROBE_BATCH = 8


@pytest.fixture(scope="module")
def probes(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("probe")
    return {framework: probe_arrays(framework, "per_sample_probe.py", tmp / f"{framework}.npz", framework,
                                    str(tmp / f"{framework}.npz"), str(CLIP_NORM), str(LEARNING_RATE),
                                    str(PROBE_BATCH)) for framework in FRAMEWORKS}


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_vmap_per_sample_gradients_equal_a_per_example_loop(probes, framework):
    vmapped, looped = prefixed(probes[framework], "vmap"), prefixed(probes[framework], "loop")
    assert vmapped.keys() == looped.keys() == prefixed(probes[framework], "initial").keys()
    for name in vmapped:
        assert vmapped[name].shape[0] == PROBE_BATCH
        np.testing.assert_allclose(vmapped[name], looped[name], rtol=1e-5, atol=1e-6, err_msg=name)
    # The examples differ: a vmap that broadcast one gradient to the whole batch would not pass this.
    assert not np.allclose(vmapped["fc1.weight"][0], vmapped["fc1.weight"][1])


def test_jax_and_pytorch_agree_on_per_sample_gradients(probes):
    jax_grads, torch_grads = prefixed(probes["jax"], "vmap"), prefixed(probes["torch"], "vmap")
    for name in torch_grads:
        np.testing.assert_allclose(jax_grads[name], torch_grads[name], rtol=1e-4, atol=1e-6, err_msg=name)
    norms = np.sqrt(sum((g.reshape(PROBE_BATCH, -1) ** 2).sum(1) for g in torch_grads.values()))
    assert (norms > CLIP_NORM).any(), "the probe must exercise clipping, or the update test proves little"


def test_jax_and_pytorch_agree_on_one_dp_sgd_update(probes):
    jax_new, torch_new = prefixed(probes["jax"], "updated"), prefixed(probes["torch"], "updated")
    initial = prefixed(probes["torch"], "initial")
    for name in torch_new:
        assert not np.array_equal(torch_new[name], initial[name]), f"{name} was not updated"
        # Compare the updates themselves: the parameters are much larger than one step's change.
        np.testing.assert_allclose(jax_new[name] - initial[name], torch_new[name] - initial[name],
                                   rtol=1e-4, atol=1e-7, err_msg=name)
    assert float(probes["jax"]["loss"]) == pytest.approx(float(probes["torch"]["loss"]), rel=1e-5)


@pytest.fixture(scope="module")
def dp_runs(tmp_path_factory):
    """DP-SGD on digits in both frameworks: once without noise (they must match), once with (they may not)."""
    tmp = tmp_path_factory.mktemp("dp")
    frames = {}
    for sigma in (0.0, 0.5):
        for framework in FRAMEWORKS:
            spec = make_spec(framework, tmp, use_case=3, epochs=3, learning_rate=0.5, noise_multiplier=sigma,
                             clip_norm=1.0, results_path=str(tmp / f"{framework}-{sigma}.parquet"),
                             timed_steps=5, min_duration_s=0.2)
            proc = run_backend(framework, spec, tmp)
            assert proc.returncode == 0, proc.stderr
            frames[framework, sigma] = read_task_table(spec.results_path).to_pandas()
    return frames


def losses(df):
    return df[df.metric == "train_loss"].sort_values("step")["value"].to_numpy()


def test_without_noise_both_frameworks_take_the_same_dp_sgd_steps(dp_runs):
    np.testing.assert_allclose(losses(dp_runs["jax", 0.0]), losses(dp_runs["torch", 0.0]), rtol=1e-4)


def test_with_noise_each_framework_draws_its_own(dp_runs):
    jax_curve, torch_curve = losses(dp_runs["jax", 0.5]), losses(dp_runs["torch", 0.5])
    assert jax_curve[0] == pytest.approx(torch_curve[0], rel=1e-5)  # the first loss comes before any noise
    assert not np.allclose(jax_curve[1:], torch_curve[1:], rtol=1e-3)
    assert not np.allclose(jax_curve, losses(dp_runs["jax", 0.0]), rtol=1e-3)  # and the noise is really added


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_a_dp_sgd_run_on_digits_learns_and_records_its_settings(dp_runs, framework):
    for sigma in (0.0, 0.5):
        df = dp_runs[framework, sigma]
        assert metric(df, "test_accuracy") > 0.8, f"sigma={sigma}"
        assert metric(df, "noise_multiplier") == sigma and metric(df, "clip_norm") == 1.0
        assert (df.use_case == 3).all() and metric(df, "world_size") == 1
        assert len(df[df.metric == "val_accuracy"]) == 3


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_the_per_example_loop_is_timed_beside_vmap(dp_runs, framework):
    df = dp_runs[framework, 0.0]
    vectorized, loop = metric(df, "per_sample_grads_vectorized_time_p50"), metric(df, "per_sample_grads_loop_time_p50")
    assert vectorized > 0 and loop > 0
    assert metric(df, "vectorization_speedup") == pytest.approx(loop / vectorized)
    assert metric(df, "loop_batch_size") == 32  # the training batch: both are timed at the batch that is trained
    # The stopping rule of inference: at least 5 repeats and 0.2 s of timed work, each way of computing.
    assert metric(df, "min_iterations") == 5 and metric(df, "min_duration") == 0.2
    for name in ("vectorized", "loop"):
        steps = metric(df, f"per_sample_grads_{name}_timed_steps")
        assert steps >= 5 and steps * metric(df, f"per_sample_grads_{name}_time_p50") > 0
        assert metric(df, f"per_sample_grads_{name}_recompilations_timed") == 0
        assert metric(df, f"per_sample_grads_{name}_time_cv") >= 0
    assert metric(df, "recompilations_timed") == 0  # the DP-SGD training steps


def test_mnist_dp_sgd_runs_the_same_in_both(tmp_path):
    """The MNIST-shaped inputs (1x28x28) through the per-sample path, on synthetic data."""
    curves = {}
    for framework in FRAMEWORKS:
        spec = make_spec(framework, tmp_path, benchmark="mnist", use_case=3, data_source="synthetic",
                         synthetic_samples=320, epochs=1, warmup_steps=1, noise_multiplier=0.0)
        proc = run_backend(framework, spec, tmp_path)
        assert proc.returncode == 0, proc.stderr
        df = read_task_table(spec.results_path).to_pandas()
        assert metric(df, "parameter_count") == (784 * 512 + 512) + (512 * 512 + 512) + (512 * 10 + 10)
        curves[framework] = losses(df)
    assert len(curves["jax"]) == 256 // 32
    np.testing.assert_allclose(curves["jax"], curves["torch"], rtol=1e-4)


# The two functions vectorization_speedup times (each backend's per_sample_ops), on every model the per-sample
# use cases train whose probe is cheap here: the MLP and the CNN (dense and convolutional layouts).
TIMED_MODELS = [("digits", "mlp"), ("mnist", "cnn")]


@pytest.fixture(scope="module")
def clipped_sums(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("clipped")
    out = {}
    for benchmark, model in TIMED_MODELS:
        for framework in FRAMEWORKS:
            path = tmp / f"{framework}-{model}.npz"
            proc = run_in_env(framework, str(REPO_ROOT / "tests" / "backends" / "clipped_sum_probe.py"), framework,
                              benchmark, model, str(path), str(PROBE_BATCH), str(CLIP_NORM))
            assert proc.returncode == 0, proc.stderr[-3000:]
            with np.load(path) as f:
                out[framework, model] = {k: f[k] for k in f.files}
    return out


def clipped_sum_reference(per_example: dict, clip_norm: float) -> tuple[dict, np.ndarray]:
    """Each example's gradient scaled to norm at most C (the norm over all parameters together), then summed:
    written here in numpy, apart from both backends; and the per-example norms."""
    norms = np.sqrt(sum((g.reshape(len(g), -1).astype(np.float64) ** 2).sum(1) for g in per_example.values()))
    factors = np.minimum(1.0, clip_norm / (norms + CLIP_EPSILON))
    return {name: np.tensordot(factors, g.astype(np.float64), axes=1) for name, g in per_example.items()}, norms


@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize("benchmark, model", TIMED_MODELS)
def test_the_timed_vectorized_and_loop_clipped_sums_equal_a_per_example_reference(clipped_sums, framework,
                                                                                   benchmark, model):
    probe = clipped_sums[framework, model]
    reference, norms = clipped_sum_reference(prefixed(probe, "per_example"), CLIP_NORM)
    # The probe batch exercises the clipping: some examples are scaled down, and their factors differ.
    assert (norms > CLIP_NORM).any() and len(set(np.round(norms, 6))) == PROBE_BATCH
    vectorized, loop = prefixed(probe, "vectorized"), prefixed(probe, "loop")
    assert vectorized.keys() == loop.keys() == reference.keys()
    for name, expected in reference.items():
        np.testing.assert_allclose(vectorized[name], expected, rtol=1e-5, atol=1e-7, err_msg=f"vectorized {name}")
        np.testing.assert_allclose(loop[name], expected, rtol=1e-5, atol=1e-7, err_msg=f"loop {name}")


@pytest.mark.parametrize("benchmark, model", TIMED_MODELS)
def test_jax_and_pytorch_agree_on_the_timed_clipped_sums(clipped_sums, benchmark, model):
    jax_probe, torch_probe = clipped_sums["jax", model], clipped_sums["torch", model]
    assert jax_probe.keys() == torch_probe.keys()
    for key in (k for k in torch_probe if not k.startswith("per_example/")):
        np.testing.assert_allclose(jax_probe[key], torch_probe[key], rtol=1e-4, atol=1e-6, err_msg=key)
