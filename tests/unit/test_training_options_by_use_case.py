"""The training options (optimizers, schedules, precisions, PyTorch modes) in use cases 2, 3 and 4 at plan time: each
is accepted where it makes sense and reaches every cell (real runs of what is accepted, bf16 with compiled PyTorch
and Adam or AdamW, on one process for use case 3 and two for 2 and 4:
tests/backends/test_parallel_training_options.py), and refused with its reason where it does not.

| option | 2 (data parallel) | 3 (DP-SGD) | 4 (DP-SGD, data parallel) |
| --- | --- | --- | --- |
| --precision bf16, tf32 | planned | planned | planned |
| --precision fp16 | planned | refused: loss scaling would clip the scaled per-example gradients | refused: the same |
| --optimizer, --lr-schedule | planned | planned (adam: DP-Adam) | planned |
| --torch-modes eager,compiled | planned, JAX paired with each | planned | planned |
| --torch-compile-mode | planned with compiled | planned with compiled | planned with compiled |

tf32 with --device cpu is refused at plan time; on a node whose device has no TF32 (--device auto or gpu) it is
refused when the cell runs (tests/backends/test_backends.py).
"""

import pytest
from helpers import run_cli, settings

from orchestrator.errors import UsageError
from orchestrator.plan import matrix


@pytest.mark.parametrize("use_case", [2, 3, 4])
@pytest.mark.parametrize("precision", ["bf16", "tf32"])
def test_every_optimizer_schedule_and_pytorch_mode_is_planned_with_the_precision(use_case, precision):
    chosen = settings(use_case, optimizer="adamw", weight_decay=0.01, lr_schedule="warmup_cosine",
                      lr_warmup_steps=3, lr_decay_steps=30, torch_compile_mode="max-autotune")
    cells = matrix.expand("digits", use_case, [], [], [32], [precision], chosen, torch_modes=["eager", "compiled"])
    torch = [c for c in cells if c.framework == "torch"]
    assert sorted(c.settings.torch_compile for c in torch) == [False, True]  # one PyTorch cell per mode
    assert len([c for c in cells if c.framework == "jax"]) == 2  # JAX once for each PyTorch mode it is paired with
    for cell in cells:
        spec = cell.settings
        assert (cell.precision, spec.optimizer, spec.lr_schedule, spec.torch_compile_mode) == (
            precision, "adamw", "warmup_cosine", "max-autotune")
        assert spec.world_size == (2 if use_case in (2, 4) else 1)


def test_fp16_is_planned_for_data_parallel_training():
    cells = matrix.expand("digits", 2, [], [], [32], ["fp16"], settings(2), torch_modes=["compiled"])
    assert {c.precision for c in cells} == {"fp16"} and all(c.settings.torch_compile for c in cells)


@pytest.mark.parametrize("use_case", [3, 4])
def test_fp16_dp_sgd_is_refused_with_its_reason_on_one_process_and_on_several(use_case):
    with pytest.raises(UsageError, match=f"not for use case {use_case} .*loss scaling would clip DP-SGD's scaled "
                                         "per-example gradients, not the true ones; use bf16"):
        matrix.expand("digits", use_case, [], [], [32], ["fp16"], settings(use_case))


@pytest.mark.parametrize("use_case", [2, 4])
def test_a_compile_mode_without_compiled_pytorch_is_refused_in_the_data_parallel_use_cases(use_case):
    with pytest.raises(UsageError, match="--torch-compile-mode reduce-overhead is for compiled PyTorch"):
        matrix.expand("digits", use_case, [], [], [32], [], settings(use_case, torch_compile_mode="reduce-overhead"),
                      torch_modes=["eager"])


def test_the_real_cli_refuses_fp16_dp_sgd_on_two_processes_in_one_sentence(tmp_path):
    results, scripts = tmp_path / "r", tmp_path / "s"
    proc = run_cli("--benchmark", "digits", "--use-case", "4", "--nodes", "1", "--tasks-per-node", "2",
                   "--precision", "fp16", "--optimizer", "adam", "--torch-modes", "eager,compiled",
                   "--results-dir", str(results), "--scripts-dir", str(scripts))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "loss scaling would clip" in proc.stderr
    assert not results.exists() and not scripts.exists()


@pytest.mark.parametrize("use_case", [1, 2, 3, 4])
def test_tf32_on_a_cpu_is_refused_at_plan_time(use_case):
    with pytest.raises(UsageError, match="--precision tf32 cannot run with --device cpu: a CPU has no TF32"):
        matrix.expand("digits", use_case, [], [], [32], ["fp32", "tf32"], settings(use_case, device="cpu"))
    assert matrix.expand("digits", use_case, [], [], [32], ["tf32"], settings(use_case, device="auto"))


def test_tf32_on_a_cpu_is_refused_by_the_cli_before_anything_is_written(tmp_path):
    results, scripts = tmp_path / "results", tmp_path / "scripts"
    proc = run_cli("--benchmark", "digits", "--use-case", "1", "--precision", "tf32", "--device", "cpu",
                   "--executor", "local", "--results-dir", str(results), "--scripts-dir", str(scripts))
    assert proc.returncode == 2, proc.stderr
    assert "a CPU has no TF32 arithmetic" in proc.stderr and "Traceback" not in proc.stderr
    assert not results.exists() and not scripts.exists()
