"""A task on a node with GPUs whose framework sees none fails with the cause, instead of measuring the CPU."""

import pytest

from bench_contract.measure import device


def test_a_framework_on_the_cpu_of_a_gpu_node_is_refused_with_the_cause(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    monkeypatch.setattr(device, "nvml_gpu_names", lambda *a: [])
    with pytest.raises(RuntimeError, match="JAX sees no GPU on a node with 1 GPU: its environment has the CPU build"):
        device.refuse_cpu_beside_gpu("JAX", "auto", "cpu", "its environment has the CPU build")
    device.refuse_cpu_beside_gpu("JAX", "cpu", "cpu", "")  # --device cpu: measuring the CPU on purpose
    device.refuse_cpu_beside_gpu("JAX", "auto", "gpu", "")  # it found the GPU


def test_nvml_alone_says_a_gpu_is_there(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr(device, "nvml_gpu_names", lambda *a: ["NVIDIA H100", "NVIDIA H100"])
    with pytest.raises(RuntimeError, match="PyTorch sees no GPU on a node with 2 GPUs"):
        device.refuse_cpu_beside_gpu("PyTorch", "auto", "cpu", "no CUDA")


@pytest.mark.parametrize("visible", ["", "-1", "NoDevFiles"])
def test_no_gpu_given_is_no_gpu(monkeypatch, visible):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    monkeypatch.setattr(device, "nvml_gpu_names", lambda *a: [])
    device.refuse_cpu_beside_gpu("JAX", "auto", "cpu", "")
