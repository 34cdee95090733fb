"""Which precision policy a cell runs under, and what is refused, in the words both backends record (mutation
testing found precision_policy and refuse_tf32_without_support without a unit test: only the backend
tests, in the frameworks' environments, reached them)."""

from __future__ import annotations

import pytest

from bench_contract.run.precision import (PRECISION_POLICIES, TRAINING_POLICIES, float32_matmul_error,
                                          precision_policy, refuse_tf32_without_support)


@pytest.mark.parametrize("precision", ["fp32", "bf16", "fp16"])
def test_inference_runs_the_inference_policy_of_its_precision(precision):
    assert precision_policy("jax", precision, 5) == PRECISION_POLICIES[precision]
    assert "(inference)" in PRECISION_POLICIES[precision] or precision == "fp32"


@pytest.mark.parametrize("use_case", [1, 2, 3, 4])
@pytest.mark.parametrize("precision", ["fp32", "tf32", "bf16"])
def test_training_runs_the_training_policy_of_its_precision(use_case, precision):
    assert precision_policy("torch", precision, use_case) == TRAINING_POLICIES[precision]


def test_mixed_training_keeps_float32_masters_and_fp16_alone_scales_the_loss():
    for precision in ("bf16", "fp16"):
        assert TRAINING_POLICIES[precision].startswith(f"{precision}: float32 master parameters")
    assert "dynamic loss scaling" in precision_policy("jax", "fp16", 1)
    assert "loss scaling" not in precision_policy("jax", "bf16", 1)


def test_tf32_inference_is_refused_naming_the_framework_and_the_choices():
    with pytest.raises(ValueError) as error:
        precision_policy("jax", "tf32", 5)
    assert str(error.value) == ("precision 'tf32' is not implemented for inference in the jax backend "
                                "(only fp32, bf16, fp16)")


@pytest.mark.parametrize("use_case", [3, 4])
def test_fp16_dp_sgd_is_refused_because_loss_scaling_would_clip_the_scaled_gradients(use_case):
    with pytest.raises(ValueError) as error:
        precision_policy("torch", "fp16", use_case)
    assert str(error.value) == (f"precision 'fp16' is not implemented for DP-SGD (use case {use_case}): loss "
                                "scaling would clip the scaled per-example gradients to norm C, not the true ones; "
                                "use bf16")


def test_an_unknown_training_precision_is_refused_naming_the_choices():
    with pytest.raises(ValueError) as error:
        precision_policy("torch", "int8", 1)
    assert str(error.value) == ("precision 'int8' is not implemented for training in the torch backend "
                                "(only fp32, tf32, bf16, fp16)")


@pytest.mark.parametrize("precision, kind, capable", [("fp32", "cpu", False), ("bf16", "gpu", False),
                                                      ("tf32", "gpu", True)])
def test_only_tf32_without_tensor_float_support_is_refused(precision, kind, capable):
    refuse_tf32_without_support(precision, kind, capable)  # returns: nothing to refuse


@pytest.mark.parametrize("kind, reason", [
    ("cpu", "a CPU has no TF32 arithmetic"),
    ("gpu", "this gpu device has no TF32 (NVIDIA GPUs have it from Ampere, compute capability 8.0)"),
])
def test_tf32_where_it_would_silently_be_float32_is_refused_with_the_reason(kind, reason):
    with pytest.raises(ValueError) as error:
        refuse_tf32_without_support("tf32", kind, False)
    assert str(error.value) == (f"precision 'tf32' cannot run here: {reason}, so it would silently be float32; "
                                "use fp32 on this device")


def test_the_matmul_probe_multiplies_square_float32_standard_normal_matrices():
    seen = {}

    def matmul(a, b):
        seen.update(a=a, b=b)
        return a @ b

    float32_matmul_error(matmul)
    a, b = seen["a"], seen["b"]
    assert a.shape == b.shape == (256, 256) and a.dtype == b.dtype == "float32"
    assert not (a == b).all() and abs(a.mean()) < 0.01 and abs(a.std() - 1) < 0.01  # two draws of N(0, 1)
    # Exact products give no error; a product off by 1% everywhere gives 1%: the error is relative to the exact one.
    assert float32_matmul_error(lambda a, b: (a.astype("float64") @ b.astype("float64"))) == 0.0
    assert float32_matmul_error(lambda a, b: 1.01 * (a.astype("float64") @ b.astype("float64"))) == \
        pytest.approx(0.01, rel=1e-9)
