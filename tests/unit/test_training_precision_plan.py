"""Planning mixed-precision and compiled PyTorch training: the precisions of use cases 1 to 4, the
--torch-modes axis (JAX against each PyTorch mode as its own pair of cells), and the refusals with their reasons.
fp16 with DP-SGD is refused in tests/unit/test_training_options_by_use_case.py, tf32 inference in
tests/unit/test_inference_plan.py."""

import pytest
from helpers import settings

from orchestrator.errors import UsageError
from orchestrator.plan import matrix


def test_bf16_and_fp32_with_both_pytorch_modes_pair_jax_with_each_mode():
    cells = matrix.expand("cifar10", 1, [], ["cnn"], [32], ["bf16", "fp32"], settings(),
                          torch_modes=["eager", "compiled"])
    assert len(cells) == 8  # 2 precisions x 2 PyTorch modes x 2 frameworks
    for precision in ("bf16", "fp32"):
        for compiled in (False, True):
            pair = [c for c in cells if c.precision == precision and c.settings.torch_compile == compiled]
            assert sorted(c.framework for c in pair) == ["jax", "torch"]
            assert len({c.pair_key for c in pair}) == 1  # the comparison's pair: equal settings
    assert len({c.cell_id for c in cells}) == 8


@pytest.mark.parametrize("use_case, precision", [(1, "bf16"), (1, "fp16"), (1, "tf32"), (2, "fp16"), (3, "bf16"),
                                                 (3, "tf32"), (4, "bf16")])
def test_training_use_cases_plan_the_mixed_and_tf32_precisions(use_case, precision):
    cells = matrix.expand("digits", use_case, [], [], [32], [precision], settings())
    assert {c.precision for c in cells} == {precision}


def test_torch_compile_plans_training_and_is_the_short_form_of_compiled():
    short = matrix.expand("digits", 3, ["torch"], [], [32], [], settings(torch_compile=True))
    long = matrix.expand("digits", 3, ["torch"], [], [32], [], settings(), torch_modes=["compiled"])
    assert [c.cell_id for c in short] == [c.cell_id for c in long] and short[0].settings.torch_compile


@pytest.mark.parametrize("kwargs, modes, message", [
    ({}, ["eagerly"], "unknown PyTorch mode 'eagerly' in --torch-modes; choose from: eager, compiled"),
    ({"torch_compile": True}, ["eager", "compiled"], "--torch-compile is the short form of --torch-modes compiled"),
    ({"torch_compile_mode": "reduce-overhead"}, ["eager"], "--torch-compile-mode reduce-overhead is for compiled"),
])
def test_bad_pytorch_modes_are_refused_in_one_sentence(kwargs, modes, message):
    with pytest.raises(UsageError, match=message):
        matrix.expand("digits", 1, [], [], [32], [], settings(**kwargs), torch_modes=modes)


def test_an_unknown_compile_mode_is_refused_naming_the_modes():
    with pytest.raises(UsageError, match="choose from: default, reduce-overhead, max-autotune"):
        settings(torch_compile_mode="fastest")
