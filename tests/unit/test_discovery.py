"""GPUs by default where the cluster has them (orchestrator.plan.discovery): without --profile the plan asks
`sinfo` (a fake one on PATH here, at the subprocess boundary) which partitions have GPUs, and asks for one GPU per
task there with JAX's CUDA build; on a cluster without GPUs it plans for CPUs and says so, in the script headers too;
--device gpu on a plan that asks for no GPU is refused."""

import json

import pytest
from helpers import REPO_ROOT, fake_tools, run_cli

from orchestrator.plan import discovery
from orchestrator.plan.discovery import GPU_RECIPE, choose, gpu_partitions


def test_sinfos_lines_give_each_partitions_gpus_typed_or_not():
    text = "debug*|gpu:2\ncpu|(null)\nbig|gpu:a100:4(S:0-1),shard:8\nbig|gpu:a100:2\nmixed|gpu:a100:2,gpu:v100:1\n"
    assert gpu_partitions(text) == [("big", False, 4), ("cpu", False, 0), ("debug", True, 2), ("mixed", False, 3)]


def test_the_default_partition_is_chosen_where_it_has_gpus_else_the_first_that_has():
    assert choose([("a", False, 4), ("b", True, 2)]).partition == "b"
    found = choose([("cpu", True, 0), ("gpu", False, 4), ("h100", False, 8)])
    assert (found.partition, found.gpus_per_node) == ("gpu", 4)
    assert "the first partition with GPUs" in found.said
    assert choose([("cpu", True, 0)]).partition is None


def test_without_sinfo_the_plan_is_for_cpus_and_says_why(monkeypatch):
    monkeypatch.setattr(discovery.shutil, "which", lambda name: None)
    found = discovery.discover()
    assert found.partition is None and "no sinfo on PATH" in found.said


@pytest.fixture
def sinfo_plan(tmp_path):
    """A PATH whose sinfo answers with the lines the test writes, and logs that it was asked."""
    answer, asked = tmp_path / "sinfo.out", tmp_path / "sinfo.asked"
    # Discovery asks for %P|%G; the partition check (doctor.check_partition) asks for %P alone.
    env = fake_tools(tmp_path / "bin", sinfo=f'echo "$*" >> "{asked}"\n'
                                             f'if [[ "$*" == *%G* ]]; then cat "{answer}"; '
                                             f'else cut -d"|" -f1 "{answer}"; fi\n')

    def plan(sinfo: str, *args: str):
        answer.write_text(sinfo)
        return run_cli("--benchmark", "cifar10", "--use-case", "3", "--synthetic", "--dry-run",
                       "--results-dir", str(tmp_path / "r"), "--scripts-dir", str(tmp_path / "s"), *args, env=env)

    return plan, tmp_path, asked


def test_a_gpu_cluster_without_a_profile_gets_one_gpu_per_task_and_the_cuda_build(sinfo_plan):
    plan, root, _ = sinfo_plan
    proc = plan("cpu*|(null)\ngpu|gpu:a100:4(S:0-1)\n")
    assert proc.returncode == 0, proc.stderr
    assert "cluster: no profile given; sinfo shows 4 GPU(s) per node in partition gpu" in proc.stdout
    for framework in ("jax", "torch"):
        script = (root / "s" / f"{framework}_cifar10_3.sh").read_text()
        assert "#SBATCH --gres=gpu:1" in script and "#SBATCH --partition=gpu" in script
        assert "on CPUs" not in script
    assert f"(its {GPU_RECIPE} build)" in (root / "s" / "jax_cifar10_3.sh").read_text()
    manifest = json.loads(next((root / "r").glob("*/manifest.json")).read_text())
    assert manifest["profile"]["jax_recipe"] == GPU_RECIPE and manifest["profile"]["gpus_per_task"] == 1


def test_a_cluster_without_gpus_gets_cpu_jobs_that_say_so(sinfo_plan):
    plan, root, _ = sinfo_plan
    proc = plan("debug*|(null)\nlong|(null)\n")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("sinfo shows no GPU in any partition (debug, long): planned for CPUs") == 1
    script = (root / "s" / "jax_cifar10_3.sh").read_text()
    assert "--gres" not in script and "on CPUs: this plan asks Slurm for no GPU" in script.splitlines()[1]
    assert "(its cpu build)" in script


def test_device_gpu_on_a_plan_that_asks_for_no_gpu_is_refused_with_the_fix(sinfo_plan):
    plan, root, _ = sinfo_plan
    proc = plan("debug*|(null)\n", "--device", "gpu")
    assert proc.returncode == 2
    assert proc.stderr.strip().startswith("error: --device gpu needs GPUs, and this plan asks Slurm for none (no "
                                          "profile given, and sinfo shows no GPU")
    assert "give a profile with gpus_per_task" in proc.stderr and not (root / "s").exists()


def test_a_profile_or_the_local_executor_asks_slurm_nothing(sinfo_plan, tmp_path):
    plan, root, asked = sinfo_plan
    profile = tmp_path / "p.toml"
    profile.write_text('partition = "gpu"\n')
    assert plan("gpu*|gpu:4\n", "--profile", str(profile)).returncode == 0
    assert plan("gpu*|gpu:4\n", "--executor", "local", "--new-campaign").returncode == 0
    assert "%G" not in (asked.read_text() if asked.exists() else "")


def test_the_partition_asked_for_is_the_one_the_plan_says_and_asks_gpus_of(sinfo_plan):
    """--partition h100 planned on h100 while "cluster:" named a100 (discovery's choice); --partition cpu rendered
    --gres=gpu:1 on a partition without GPUs. Discovery now looks at the partition asked for."""
    plan, root, _ = sinfo_plan
    sinfo = "a100*|gpu:a100:4\nh100|gpu:h100:8\ncpu|(null)\n"
    proc = plan(sinfo, "--partition", "h100")
    assert proc.returncode == 0, proc.stderr
    assert "cluster: no profile given; sinfo shows 8 GPU(s) per node in partition h100 (--partition)" in proc.stdout
    script = (root / "s" / "jax_cifar10_3.sh").read_text()
    assert "#SBATCH --partition=h100" in script and "#SBATCH --gres=gpu:1" in script
    proc = plan(sinfo, "--partition", "cpu", "--new-campaign")
    assert proc.returncode == 0, proc.stderr
    assert "sinfo shows no GPU in partition cpu (--partition): planned for CPUs" in proc.stdout
    script = (root / "s" / "jax_cifar10_3.sh").read_text()
    assert "#SBATCH --partition=cpu" in script and "--gres" not in script


def test_gpus_asked_of_a_partition_without_them_are_refused(sinfo_plan, tmp_path):
    plan, root, _ = sinfo_plan
    profile = tmp_path / "gpu.toml"
    profile.write_text('partition = "a100"\ngpus_per_task = 1\njax_recipe = "cuda12"\n')
    proc = plan("a100*|gpu:a100:4\ncpu|(null)\n", "--profile", str(profile), "--partition", "cpu")
    assert proc.returncode == 2
    assert proc.stderr.strip() == ("error: partition 'cpu' has no GPU (sinfo shows no gpu GRES there), and the plan "
                                   "asks for 1 per task: choose a partition with GPUs, or --gpus-per-task 0")
    assert not (root / "s").exists()


def test_device_gpu_with_no_gpus_asked_on_the_command_line_gets_advice_that_applies(sinfo_plan):
    plan, root, _ = sinfo_plan
    proc = plan("a100*|gpu:a100:4\n", "--gpus-per-task", "0", "--device", "gpu")
    assert proc.returncode == 2
    assert proc.stderr.strip() == ("error: --device gpu needs GPUs, and --gpus-per-task 0 asks Slurm for none; give "
                                   "--gpus-per-task 1 or more, or plan with --device cpu")
    proc = plan("a100*|gpu:a100:4\n", "--gpus-per-task", "0")
    assert proc.returncode == 0 and "--gpus-per-task 0: planned for CPUs" in proc.stdout, proc.stdout + proc.stderr


def test_a_cell_known_not_to_run_well_on_a_gpu_is_named_by_the_plan(sinfo_plan):
    """The user's own example (cifar10, use case 3) on GPUs: JAX's DP-SGD step of the CNN was seen compiling for
    more than 4.5 minutes on an H200. The plan says so, with its record; the same plan on CPUs does not."""
    plan, root, _ = sinfo_plan
    proc = plan("gpu*|gpu:h200:8\n")
    assert proc.returncode == 0, proc.stderr
    warning = [line for line in proc.stdout.splitlines() if "did not finish compiling in 4.5 minutes" in line]
    assert len(warning) == 1 and warning[0].startswith("warning: JAX's DP-SGD step of the CIFAR-10 CNN")
    assert (REPO_ROOT / "docs" / "records" / "2026-11-26-h200-gpu-check.md").is_file()
    proc = plan("cpu*|(null)\n", "--new-campaign")
    assert proc.returncode == 0 and "did not finish compiling" not in proc.stdout
