"""Comparable by construction: what a row says about a run is what the run did. The backends here are
stand-ins: the contract's own decisions are under test."""

import json
import re
import sys

import pytest
from fake_nvml import fake_pynvml
from helpers import spec

from bench_contract.models.weights import ParamSpec
from bench_contract.run import runner
from bench_contract.run.topology import Topology, topology_for


def torch_spec(**overrides):
    """PyTorch's digits MLP at batch 4."""
    return spec("torch", batch_size=4, **overrides)


class UntrainableBackend:
    """A backend that must never be asked to train: the spec is refused before."""

    framework = "torch"

    def training_ops(self, spec, data, weights, rows):
        raise AssertionError("the backend was asked to train a spec the contract must refuse")


@pytest.mark.parametrize("options, named", [
    ({"channels_last": True}, "channels_last is implemented for inference (use case 5) only"),
    ({"torch_compile": True, "channels_last": True}, "channels_last is implemented for inference (use case 5) only"),
])
@pytest.mark.parametrize("use_case", [1, 3])
def test_a_training_spec_with_inference_only_options_is_refused_not_run_eager(options, named, use_case):
    """framework_options would record channels_last while training ran contiguous (torch.compile trains)."""
    spec = torch_spec(use_case=use_case, **options)
    assert "channels_last" in runner.framework_options(spec)
    with pytest.raises(ValueError, match=re.escape(named)) as refused:
        runner.run_use_case(spec, UntrainableBackend(), None, {}, None)
    assert f"not for training (use case {use_case})" in str(refused.value)


class EightGpuBackend:
    """Sees eight GPUs, as a process on a node with eight does when nothing hides the others; like every backend,
    it computes on one of them."""

    framework = "torch"
    libraries = ["numpy"]

    def prepare(self, spec):
        return runner.DeviceSetup(kind="gpu", count=8, framework_version="0", precision_policy="fp32")

    def param_specs(self, model, sample_shape, num_classes, variant, graph=None):
        return [ParamSpec("w", (2, 2), "zeros")]


@pytest.mark.parametrize("layout, slurm, used", [
    ({}, {}, 1),  # one process, one device, whatever it sees
    ({"use_case": 2, "nodes": 2, "tasks_per_node": 2}, {"SLURM_PROCID": "0", "SLURM_NTASKS": "4"}, 4),
])
def test_device_count_is_the_devices_the_cell_computes_on_not_the_ones_a_process_sees(
        tmp_path, monkeypatch, layout, slurm, used):
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml([], driver_loaded=False))
    for name, value in slurm.items():
        monkeypatch.setenv(name, value)
    spec = torch_spec(init_weights_path=str(tmp_path / "init.npz"), **layout)
    rows = runner.run_spec(spec, EightGpuBackend(), use_case=lambda *args: None)
    assert rows.context["device_count"] == used
    assert topology_for(spec).device_count == used
    assert json.loads(rows.context["device_details"])["devices_seen"] == 8


def test_a_process_uses_one_device_so_a_cell_uses_one_per_process():
    assert Topology().device_count == 1
    assert Topology(rank=3, world_size=8, local_rank=1).device_count == 8
