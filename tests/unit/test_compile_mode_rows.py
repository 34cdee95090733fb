"""The rows of compiled PyTorch say its torch.compile mode, reduce-overhead with its CUDA graphs; a spec
with an unknown mode is refused in one sentence."""

import json

import pytest
from helpers import spec

from bench_contract.run.runner import framework_options
from bench_contract.spec import SpecError


@pytest.mark.parametrize("mode, words", [
    ("default", "torch.compile"),
    ("reduce-overhead", "torch.compile, mode reduce-overhead (CUDA graphs on a GPU)"),
    ("max-autotune", "torch.compile, mode max-autotune"),
])
def test_compiled_training_rows_name_the_compile_mode(mode, words):
    compiled = spec("torch", precision="bf16", torch_compile=True, torch_compile_mode=mode)
    assert json.loads(framework_options(compiled))["mode"] == words
    assert json.loads(framework_options(spec("torch", precision="bf16", torch_compile_mode=mode)))["mode"] == "eager"


def test_an_unknown_compile_mode_in_a_spec_is_refused():
    with pytest.raises(SpecError, match="unknown --torch-compile-mode 'fast'; choose from: default, reduce-overhead, max-autotune"):
        spec("torch", precision="bf16", torch_compile=True, torch_compile_mode="fast")
