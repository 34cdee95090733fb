"""Comparable by construction (#14): what a row says about a run is what the run did. The backends here are
stand-ins: the contract's own decisions are under test."""

import re

import pytest

from bench_contract.run import runner
from bench_contract.spec import JobSpec


def job(**overrides):
    values = dict(campaign="c", cell_id="torch-x", pair_key="x", framework="torch", benchmark="digits", use_case=1,
                  model="mlp", batch_size=4, precision="fp32")
    return JobSpec(**(values | overrides))


class UntrainableBackend:
    """A backend that must never be asked to train: the spec is refused before."""

    framework = "torch"

    def training_ops(self, spec, data, weights, rows):
        raise AssertionError("the backend was asked to train a spec the contract must refuse")


@pytest.mark.parametrize("options, named", [
    ({"torch_compile": True}, "torch_compile is implemented for inference (use case 5) only"),
    ({"channels_last": True}, "channels_last is implemented for inference (use case 5) only"),
    ({"torch_compile": True, "channels_last": True}, "torch_compile and channels_last are implemented for inference"),
])
@pytest.mark.parametrize("use_case", [1, 3])
def test_a_training_spec_with_inference_only_options_is_refused_not_run_eager(options, named, use_case):
    """framework_options would record torch.compile (or channels_last) while training ran eager and contiguous."""
    spec = job(use_case=use_case, **options)
    assert "torch.compile" in runner.framework_options(spec) or "channels_last" in runner.framework_options(spec)
    with pytest.raises(ValueError, match=re.escape(named)) as refused:
        runner.run_use_case(spec, UntrainableBackend(), None, {}, None)
    assert f"not for training (use case {use_case})" in str(refused.value)
