"""The real CLI in a subprocess: help everywhere, one clear sentence and exit 2 for bad input, nothing written."""

import json
import subprocess
import sys

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


def test_doctor_on_the_node_asks_for_what_each_systems_jobs_get(tmp_path):
    """doctor --on-node ran srun without the systems' partitions (on a site whose default partition has no GPU) and
    took no Slurm options: it checks each system as its jobs would run, with the launch's own options."""
    from helpers import fake_slurm_site

    probe = json.dumps({"version": "1", "devices": ["gpu:0"], "nvml": ["NVIDIA H100"]})
    env, _, profile = fake_slurm_site(tmp_path, {
        "srun": f'echo "$*" >> {tmp_path / "srun.log"}\necho \'{probe}\'\n',
        "sinfo": 'echo "cpu* a100 h100"\n', "sacct": "exit 0\n", "squeue": "exit 0\n", "scancel": "exit 0\n"},
        'gpus_per_task = 1\njax_recipe = "cuda12"\n[systems.a100]\npartition = "a100"\ngpu_type = "a100"\n'
        '[systems.h100]\npartition = "h100"\nconstraint = "h100_80g"\n')
    proc = run_cli("doctor", "--on-node", "--profile", str(profile), "--systems", "a100,h100", "--account", "lab",
                   env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    calls = (tmp_path / "srun.log").read_text().splitlines()
    assert len(calls) == 4  # each framework on each system
    a100 = [c for c in calls if "--partition=a100" in c]
    h100 = [c for c in calls if "--partition=h100" in c]
    assert len(a100) == 2 and all("--account=lab" in c and "--gres=gpu:a100:1" in c for c in a100), calls
    assert len(h100) == 2 and all("--constraint=h100_80g" in c and "--gres=gpu:1" in c for c in h100), calls
    rows = doctor_rows(proc.stdout)
    assert {"jax environment (a100)", "torch devices (h100)", "profile partition (h100)"} <= set(rows)


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


# --- The CLI people expect: version, completion, panels, a console command, one sentence for bad input ---


def released() -> str:
    """The version pyproject.toml declares, which `make setup` installs (it reinstalls when the file changes)."""
    import tomllib

    from helpers import REPO_ROOT

    return tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["version"]


def test_version_names_the_release_and_the_git_commit():
    from orchestrator.plan.campaign import git_commit

    proc = run_cli("--version")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"jaxtorch-bench {released()} (git {git_commit()})"


# A Python that sends SIGINT to itself as the command line starts importing typer (the first of its imports that
# take a quarter of a second), then runs main.py as `python main.py list`.
SIGINT_WHILE_IMPORTING = """
import builtins, os, runpy, signal, sys
real = builtins.__import__
def importing(name, *args, **kwargs):
    if name == "typer":
        builtins.__import__ = real
        os.kill(os.getpid(), signal.SIGINT)
    return real(name, *args, **kwargs)
builtins.__import__ = importing
sys.argv = ["main.py", "list"]
runpy.run_path("main.py", run_name="__main__")
"""


def test_a_signal_while_the_command_line_is_imported_is_one_sentence():
    """Found by the soak: a Ctrl-C in a command's first quarter second, while typer and the commands
    were imported, ended in a KeyboardInterrupt traceback; the signals are now caught before those imports."""
    from helpers import REPO_ROOT, default_signals

    # Started as from a login shell: a test run started in the background ignores SIGINT, and so would the child.
    proc = subprocess.run([sys.executable, "-c", SIGINT_WHILE_IMPORTING], cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=60, preexec_fn=default_signals)
    assert (proc.returncode, proc.stderr) == (130, "error: stopped by SIGINT\n"), proc.stderr


# A Python that sends SIGINT to itself while `status` creates the Submission dataclass (a module the command imports
# on demand, after the signals are set), from inside one of its fields' __set_name__, where Python 3.11 wraps what
# is raised in a RuntimeError.
SIGINT_WHILE_A_CLASS_IS_MADE = """
import dataclasses, os, runpy, signal, sys
real = dataclasses.Field.__set_name__
def set_name(self, owner, name):
    if owner.__name__ == "Submission" and signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        dataclasses.Field.__set_name__ = real
        os.kill(os.getpid(), signal.SIGINT)
    return real(self, owner, name)
dataclasses.Field.__set_name__ = set_name
sys.argv = ["main.py", "status", "--results-dir", sys.argv[1]]
runpy.run_path("main.py", run_name="__main__")
"""


def test_a_signal_while_a_class_is_made_is_one_sentence(tmp_path):
    """Found by the soak: a SIGHUP while a launch imported orchestrator.run.executors.base ended in
    "RuntimeError: Error calling __set_name__ on 'Field' instance 'failed' in 'Submission'" and its traceback: the
    stop came wrapped in another error."""
    from helpers import REPO_ROOT, default_signals

    proc = subprocess.run([sys.executable, "-c", SIGINT_WHILE_A_CLASS_IS_MADE, str(tmp_path / "none")],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=60, preexec_fn=default_signals)
    assert (proc.returncode, proc.stderr) == (130, "error: stopped by SIGINT\n"), proc.stderr


def test_the_console_command_is_declared_and_installed():
    import sys
    import tomllib
    from pathlib import Path

    from helpers import REPO_ROOT

    scripts = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts == {"jaxtorch-bench": "orchestrator.cli:run"}
    command = Path(sys.executable).parent / "jaxtorch-bench"  # make setup installs the project into .venv
    proc = subprocess.run([str(command), "--version"], capture_output=True, text=True, cwd="/", check=False)
    assert proc.returncode == 0 and proc.stdout.startswith(f"jaxtorch-bench {released()} (git "), proc.stderr


@pytest.mark.parametrize("words, cword, expected", [
    ("main.py --executor l", 2, ["local"]),
    ("main.py --benchmark ", 2, ["digits", "mnist", "cifar10", "imagenet", "nlp", "gnn"]),
    ("main.py camp", 1, ["campaigns"]),
])
def test_shell_completion_is_on_and_completes_the_registries(words, cword, expected):
    import os

    env = {**os.environ, "_MAIN.PY_COMPLETE": "complete_bash", "COMP_WORDS": words, "COMP_CWORD": str(cword)}
    proc = run_cli(env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == expected


def test_the_help_groups_the_options_in_panels():
    proc = run_cli("-h")
    assert proc.returncode == 0, proc.stderr
    titles = [line.split(":")[0] for line in proc.stdout.splitlines() if line[:1].isupper() and line.endswith(":")]
    assert titles == ["Matrix", "Training", "DP-SGD (use cases 3 and 4)", "Data", "Slurm", "Measurement", "Options",
                      "Commands"]
    slurm = proc.stdout.split("\nSlurm: ")[1].split("\n\n")[0]
    assert "--executor" in slurm and "--nodes" in slurm and "--profile" in slurm  # each option under its panel


@pytest.mark.parametrize("args, sentence", [
    (["--benchmark", "digits"], ("error: give --benchmark and --use-case (see `python main.py -h`), or a command "
                                 "such as `collect`")),
    (["--benchmark", "digits", "--use-case", "1", "--executor", "foo"],
     "error: unknown executor 'foo'; choose from: slurm, submitit, local"),
    (["--benchmark", "digits", "--use-case", "x"],
     "error: use case 'x' is not a whole number; give use cases such as 3,5 (see `python main.py list`)"),
    (["--benchmark", "digits", "--use-case", "1", "--learning-rate", "fast"],
     "error: --learning-rate takes a number, not 'fast' (see `main.py -h`)"),
    (["--benchmark", "digits", "--use-case", "1", "--batch-sizes", "32,,64"],
     "error: '32,,64' has an empty item between its commas; remove the extra comma"),
    (["validate"], "error: Missing option '--model' / '-m' (see `main.py validate -h`)"),
    (["resubmit", "--executor", "foo"], "error: unknown executor 'foo'; choose from: slurm, submitit, local"),
])
def test_bad_input_is_one_sentence_on_stderr_and_exit_2(tmp_path, args, sentence):
    proc = run_cli(*args, "--results-dir", str(tmp_path / "r")) if args[0] != "validate" else run_cli(*args)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.strip() == sentence and proc.stdout == ""
    assert not (tmp_path / "r").exists()


def test_an_unknown_option_is_one_line_that_points_to_the_help():
    proc = run_cli("--no-such-option")
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.startswith("error: No such option: --no-such-option")
    assert proc.stderr.rstrip().endswith("(see `main.py -h`)") and len(proc.stderr.splitlines()) == 1


@pytest.mark.parametrize("command", ["collect", "status", "campaigns"])
def test_a_missing_results_folder_is_bad_input_for_every_command(tmp_path, command):
    proc = run_cli(command, "--results-dir", str(tmp_path / "none"))
    assert proc.returncode == 2, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and str(tmp_path / "none") in proc.stderr


def test_a_data_parallel_use_case_with_one_process_says_it_is_not_data_parallel(tmp_path):
    proc = run_cli("--benchmark", "digits", "--use-case", "2", "--dry-run", "--results-dir", str(tmp_path / "r"),
                   "--scripts-dir", str(tmp_path / "s"))
    assert proc.returncode == 0, proc.stderr
    assert "warning: use case 2 is data parallel, but --nodes 1 --tasks-per-node 1 gives it one process" in proc.stderr


def test_torch_modes_and_the_compile_mode_reach_the_specs(tmp_path):
    """--torch-modes eager,compiled plans every cell once per PyTorch mode (JAX paired with each), and
    --torch-compile-mode reaches the compiled PyTorch specs."""
    import json

    proc = run_cli("--benchmark", "digits", "--use-case", "1", "--batch-sizes", "32", "--torch-modes", "eager,compiled",
                   "--torch-compile-mode", "reduce-overhead", "--dry-run", "--results-dir", str(tmp_path / "r"),
                   "--scripts-dir", str(tmp_path / "s"))
    assert proc.returncode == 0, proc.stderr
    specs = {fw: [json.loads(line) for line in next((tmp_path / "r").glob(f"*/specs/{fw}.jsonl")).read_text().splitlines()]
             for fw in ("jax", "torch")}
    assert sorted(s["torch_compile"] for s in specs["torch"]) == [False, True]
    assert {s["torch_compile_mode"] for s in specs["torch"] if s["torch_compile"]} == {"reduce-overhead"}
    # JAX runs once per mode: its spec carries the mode, so that compare pairs each JAX run with its PyTorch run
    assert sorted(s["torch_compile"] for s in specs["jax"]) == [False, True]
