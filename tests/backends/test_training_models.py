"""Training beyond the MLP: every (benchmark, model) that trains, in both frameworks, from the same weights
and the same batches, plain (use case 1) and as DP-SGD without noise (use case 3). Synthetic data, tiny
variants, a few steps: enough to show that the two sides take the same steps."""

import numpy as np
import pandas as pd
import pytest

from helpers import metric
from test_backends import FRAMEWORKS, make_spec, run_backend

# (benchmark, model, variant, relative tolerance of the loss curves). Convolutions sum in a different order
# in XLA and oneDNN, so a few steps of SGD drift apart a little more than the MLP's matmuls.
TRAINED = [
    ("mnist", "cnn", "tiny", 1e-3),
    ("cifar10", "cnn", "tiny", 1e-3),
]


def train_both(tmp_path, benchmark, model, variant, use_case):
    frames = {}
    for framework in FRAMEWORKS:
        spec = make_spec(framework, tmp_path, benchmark=benchmark, model=model, model_variant=variant,
                         use_case=use_case, data_source="synthetic", synthetic_samples=160, batch_size=16,
                         epochs=1, warmup_steps=1, noise_multiplier=0.0, loop_batch_size=4,
                         results_path=str(tmp_path / f"{framework}-{use_case}.parquet"))
        proc = run_backend(framework, spec, tmp_path)
        assert proc.returncode == 0, proc.stderr
        frames[framework] = pd.read_parquet(spec.results_path)
    return frames


def curve(df):
    return df[df.metric == "train_loss"].sort_values("step")["value"].to_numpy()


@pytest.mark.parametrize("use_case", [1, 3])
@pytest.mark.parametrize("benchmark, model, variant, rtol", TRAINED)
def test_both_frameworks_train_the_same_steps(tmp_path, benchmark, model, variant, rtol, use_case):
    frames = train_both(tmp_path, benchmark, model, variant, use_case)
    jax_df, torch_df = frames["jax"], frames["torch"]
    assert metric(jax_df, "parameter_count") == metric(torch_df, "parameter_count")
    assert jax_df.init_weights_sha256.iloc[0] == torch_df.init_weights_sha256.iloc[0]
    assert len(curve(jax_df)) == len(curve(torch_df)) == 128 // 16
    np.testing.assert_allclose(curve(jax_df), curve(torch_df), rtol=rtol)
    for df in frames.values():
        assert 0 <= metric(df, "test_accuracy") <= 1 and metric(df, "throughput") > 0
        if use_case == 3:
            assert metric(df, "vectorization_speedup") > 0
