"""The real CLI in a subprocess: help everywhere, one clear sentence and exit 2 for bad input, nothing written."""

import json
import subprocess

import pytest
from helpers import doctor_rows, run_cli


@pytest.mark.parametrize("command", [[], ["collect"], ["list"], ["envs"]])
@pytest.mark.parametrize("flag", ["-h", "--help"])
def test_help_everywhere(command, flag):
    proc = run_cli(*command, flag)
    assert proc.returncode == 0, proc.stderr
    assert "Usage:" in proc.stdout


def test_no_arguments_is_a_usage_error():
    proc = run_cli()
    assert proc.returncode == 2
    assert "give --benchmark and --use-case" in proc.stderr


def test_list_shows_every_benchmark_and_use_case():
    proc = run_cli("list")
    assert proc.returncode == 0
    for word in ["digits", "mnist", "cifar10", "imagenet", "nlp", "gnn", "resnet50", "vit_b_16",
                 "per-sample gradients"]:
        assert word in proc.stdout


@pytest.mark.parametrize(
    "args, message",
    [
        (["--benchmark", "mnistt", "--use-case", "1"], "unknown benchmark 'mnistt'"),
        (["--benchmark", "digits", "--use-case", "9"], "unknown use case 9"),
        (["--benchmark", "digits", "--use-case", "1", "--batch-sizes", "0"], "batch size 0 must be a positive"),
        (["--benchmark", "digits", "--use-case", "1", "--batch-sizes", "x"], "batch size 'x' is not a whole number"),
        (["--benchmark", "digits", "--use-case", "1", "--frameworks", "tf"], "unknown framework 'tf'"),
        (["--benchmark", "digits", "--use-case", "1", "--precision", "fp8"], "unknown precision 'fp8'"),
        (["--benchmark", "mnist", "--use-case", "1", "--data-dir", "/nonexistent"], "does not exist"),
        (["--benchmark", "digits", "--use-case", "1", "--profile", "/nonexistent.toml"], "does not exist"),
    ],
)
def test_bad_input_gets_one_sentence_exit_2_and_writes_nothing(tmp_path, args, message):
    results, scripts = tmp_path / "results", tmp_path / "scripts"
    proc = run_cli(*args, "--results-dir", str(results), "--scripts-dir", str(scripts))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert not results.exists() and not scripts.exists()


def test_a_missing_environment_is_refused_before_anything_is_written(tmp_path):
    profile = tmp_path / "p.toml"
    profile.write_text(f'env_dir = "{tmp_path / "no-envs"}"\n')
    proc = run_cli("--benchmark", "digits", "--use-case", "1", "--executor", "local", "--profile", str(profile),
                   "--results-dir", str(tmp_path / "r"), "--scripts-dir", str(tmp_path / "s"))
    assert proc.returncode == 2
    assert "environment is missing" in proc.stderr and "python main.py envs" in proc.stderr
    assert not (tmp_path / "r").exists()


def test_slurm_executor_without_sbatch_is_refused(tmp_path):
    env = {"PATH": "/usr/bin/nonexistent", "HOME": str(tmp_path)}
    proc = run_cli("--benchmark", "digits", "--use-case", "1", "--results-dir", str(tmp_path / "r"),
                   "--scripts-dir", str(tmp_path / "s"), env=env)
    assert proc.returncode == 2
    assert "'sbatch' is not on PATH" in proc.stderr
    assert not (tmp_path / "r").exists()


def test_mnist_dry_run_writes_two_readable_scripts(tmp_path):
    scripts = tmp_path / "slurm_scripts"
    proc = run_cli("--benchmark", "mnist", "--use-case", "1", "--dry-run",
                   "--results-dir", str(tmp_path / "results"), "--scripts-dir", str(scripts))
    assert proc.returncode == 0, proc.stderr
    jax_script, torch_script = scripts / "jax_mnist_1.sh", scripts / "torch_mnist_1.sh"
    assert sorted(p.name for p in scripts.iterdir()) == ["jax_mnist_1.sh", "torch_mnist_1.sh"]
    for script, mine, other in [(jax_script, "jax", "torch"), (torch_script, "torch", "jax")]:
        text = script.read_text()
        subprocess.run(["bash", "-n", str(script)], check=True)
        lines = text.splitlines()
        assert lines[0] == "#!/bin/bash"
        assert lines[1].startswith(f"# {script.name}: ") and "benchmark mnist, use case 1" in lines[1]
        assert "Produced by `python main.py --benchmark mnist --use-case 1 --dry-run" in text
        activations = [line for line in lines if line.startswith("source ")]
        assert len(activations) == 1 and activations[0].endswith(f"/.envs/{mine}/bin/activate")
        assert f"/.envs/{other}/" not in text
        assert f"-m {mine}_backend.run" in text and f"{other}_backend" not in text
        assert "#SBATCH --array=0-1" in text  # the default mnist batch sizes: one array task each
    manifest = json.loads(next((tmp_path / "results").glob("*/manifest.json")).read_text())
    assert manifest["executor"] == "dry-run" and manifest["submissions"] == {}
    assert len(manifest["cells"]) == 4


def test_a_combination_not_implemented_yet_is_refused_and_nothing_submitted(tmp_path):
    from test_matrix import declared_but_not_implemented

    benchmark, model, number = declared_but_not_implemented()
    proc = run_cli("--benchmark", benchmark, "--use-case", str(number), "--models", model, "--synthetic",
                   "--results-dir", str(tmp_path / "r"), "--scripts-dir", str(tmp_path / "s"))
    assert proc.returncode == 2
    assert "declared but not implemented yet" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "r").exists() and not (tmp_path / "s").exists()


def test_doctor_reports_each_check_and_fails_on_a_missing_environment(tmp_path):
    profile = tmp_path / "p.toml"
    profile.write_text(f'env_dir = "{tmp_path / "none"}"\n')
    proc = run_cli("doctor", "--profile", str(profile), "--benchmark", "mnist", "--data-dir", str(tmp_path))
    assert proc.returncode == 1
    rows = doctor_rows(proc.stdout)
    assert rows["jax environment"][0] == "FAIL" and "create it with: python main.py envs" in rows["jax environment"][1]
    assert rows["mnist data"][0] == "FAIL" and "lacks the MNIST files" in rows["mnist data"][1]


def test_the_device_check_fails_where_a_framework_cannot_see_the_nodes_gpu():
    """doctor's device check used to pass whatever the framework saw."""
    from orchestrator.run.doctor import device_check

    cpu_jax = {"devices": ["cpu:cpu"], "nvml": ["NVIDIA H100 80GB HBM3"]}
    failed = device_check("jax", cpu_jax, gpus_per_task=1, on_node=True)
    assert failed.ok is False and "JAX sees no GPU on a node with 1 GPU(s)" in failed.detail
    assert "CPU build of JAX; set jax_recipe" in failed.detail
    login = device_check("torch", {"devices": ["cpu"], "nvml": []}, gpus_per_task=1, on_node=False)
    assert login.ok is None and "--on-node" in login.detail  # cannot be checked here: says so, never passes
    assert device_check("torch", {"devices": ["cpu"], "nvml": []}, gpus_per_task=1, on_node=True).ok is False
    assert device_check("jax", {"devices": ["gpu:H100"], "nvml": ["H100"]}, gpus_per_task=1, on_node=True).ok
    assert device_check("jax", {"devices": ["cpu:cpu"], "nvml": []}, gpus_per_task=0, on_node=False).ok
