"""The pack script (--paired --pack N [--pack-slots K]): what it asks Slurm for, what it hands the driver, how the
manifest maps each cell to its pack, and the refusals. Rendered by a dry run; nothing is submitted."""

import json
import os
import re
import subprocess

from helpers import run_cli

# A GPU site: one GPU per task, 16G per node.
GPU_SITE = """partition = "gpu"
gpus_per_task = 1
jax_recipe = "cuda12"
cpus_per_task = 4
mem = "16G"
time_limit = "01:00:00"
"""


def plan_on_gpu_site(tmp_path, *args):
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "gpu.toml").write_text(GPU_SITE)
    away = {name: value for name, value in os.environ.items() if name != "SLURM_CONF"}  # plan away from a cluster
    return run_cli("--benchmark", "digits", "--use-case", "1", "--dry-run", "--profile", str(tmp_path / "gpu.toml"),
                   "--results-dir", str(tmp_path / "r"), "--scripts-dir", str(tmp_path / "s"), *args, env=away)


def script_header(text):
    """The script's comment lines as one line of words (the header wraps its lines)."""
    return " ".join(word for line in text.splitlines() if line.startswith("# ") for word in line[2:].split())


def test_a_pack_script_asks_for_its_slots_and_hands_the_driver_the_pack(tmp_path):
    """Five pairs (five batch sizes) in packs of two: three array tasks, each with two slots (two Slurm tasks, a
    GPU each), and each run's step asks for one slot's CPUs and its GPU (its memory is the driver's to share:
    test_pack_driver)."""
    proc = plan_on_gpu_site(tmp_path, "--paired", "--pack", "2", "--pack-slots", "2", "--batch-sizes", "8,16,32,64,128")
    assert proc.returncode == 0, proc.stderr
    text = (tmp_path / "s" / "paired_digits_1.sh").read_text()
    subprocess.run(["bash", "-n"], input=text, text=True, check=True)
    directives = re.findall(r"^#SBATCH (\S+)", text, re.M)
    assert "--array=0-2" in directives
    assert {"--nodes=1", "--ntasks-per-node=2", "--cpus-per-task=4", "--gres=gpu:2", "--mem=16G"} <= set(directives)
    assert "--pack-size 2 --pair-count 5 --slots 2" in text
    assert re.findall(r"--step-option=(\S+)", text) == ["--cpus-per-task=4", "--gpus-per-task=1"]
    assert '--pack-log ' in text and '/packs/"pack${index}_${SLURM_JOB_ID}.jsonl"' in text
    assert "--pack 2: 5 pairs in 3 jobs of up to 2 pairs (--pack N), instead of a job each; --ntasks-per-node=2: 2 " \
           "slots" in script_header(text)
    manifest = json.loads(next((tmp_path / "r").glob("*/manifest.json")).read_text())
    assert manifest["scripts"]["paired"]["pack"] == 2 and manifest["scripts"]["paired"]["array_tasks"] == 3
    by_batch = {(c["framework"], c["batch_size"]): c["array_index"] for c in manifest["cells"]}
    assert by_batch == {(fw, b): i // 2 for fw in ("jax", "torch") for i, b in enumerate((8, 16, 32, 64, 128))}


def test_a_pack_spread_over_nodes_asks_for_its_slots_on_each_node(tmp_path):
    """--pack-slots 4 --pack-nodes 2: two slots on each of two nodes, each step one slot's CPUs and GPU (a node's
    memory shared by its two slots: test_pack_driver's slot_memory with SLURM_NTASKS_PER_NODE)."""
    proc = plan_on_gpu_site(tmp_path, "--paired", "--pack", "4", "--pack-slots", "4", "--pack-nodes", "2",
                            "--batch-sizes", "8,16,32,64")
    assert proc.returncode == 0, proc.stderr
    text = (tmp_path / "s" / "paired_digits_1.sh").read_text()
    assert {"--nodes=2", "--ntasks-per-node=2", "--gres=gpu:2", "--mem=16G"} <= set(re.findall(r"^#SBATCH (\S+)",
                                                                                                text, re.M))
    assert re.findall(r"--step-option=(\S+)", text) == ["--cpus-per-task=4", "--gpus-per-task=1"]
    assert "--slots 4" in text and "--nodes=2 --ntasks-per-node=2: 4 slots" in script_header(text)


def test_without_pack_the_plan_packs_short_pairs_says_so_and_pack_0_keeps_a_job_per_pair(tmp_path):
    """The GPU site's hour holds three digits pairs of the estimate (plan.sizing.default_pack): four pairs are two
    packs of two, said on the terminal and in the header; --pack 0 plans a job per pair, and says nothing of packs."""
    proc = plan_on_gpu_site(tmp_path / "default", "--paired", "--batch-sizes", "8,16,32,64")
    assert proc.returncode == 0, proc.stderr
    assert "--pack 2, chosen by the plan" in proc.stdout
    text = (tmp_path / "default" / "s" / "paired_digits_1.sh").read_text()
    assert "--array=0-1" in text and "--pack-size 2 --pair-count 4" in text
    assert "--pack 2, chosen by the plan: each cell's estimated work is shorter than its start-up" in script_header(text)
    proc = plan_on_gpu_site(tmp_path / "zero", "--paired", "--pack", "0", "--batch-sizes", "8,16,32,64")
    assert proc.returncode == 0, proc.stderr
    text = (tmp_path / "zero" / "s" / "paired_digits_1.sh").read_text()
    assert "--array=0-3" in text and "--pack-size" not in text and "chosen by the plan" not in proc.stdout


def test_one_slot_runs_the_pairs_one_after_another_and_the_time_limit_counts_them(tmp_path):
    """Without a time limit in the profile, the estimate counts every run of a pack: three pairs of two trials a
    pack, one slot, is 12 runs where a pair's task is 4."""
    (tmp_path / "gpu.toml").write_text(GPU_SITE.replace('time_limit = "01:00:00"\n', ""))
    away = {name: value for name, value in os.environ.items() if name != "SLURM_CONF"}
    proc = run_cli("--benchmark", "digits", "--use-case", "1", "--dry-run", "--profile", str(tmp_path / "gpu.toml"),
                   "--results-dir", str(tmp_path / "r"), "--scripts-dir", str(tmp_path / "s"), "--paired",
                   "--trials", "2", "--pack", "3", "--batch-sizes", "8,16,32", env=away)
    assert proc.returncode == 0, proc.stderr
    text = (tmp_path / "s" / "paired_digits_1.sh").read_text()
    assert "--ntasks=1" in re.findall(r"^#SBATCH (\S+)", text, re.M)
    assert "for each of the task's 12 runs" in script_header(text)
    assert "--ntasks=1: one slot, the pairs one after another" in script_header(text)


def test_packs_are_refused_without_pairs_off_sbatch_and_with_slots_alone(tmp_path):
    cases = [
        (["--pack", "2"], "--pack runs cell pairs through the paired driver; it needs --paired"),
        (["--paired", "--pack-slots", "2"], "--pack-slots places the pairs of a pack side by side; it needs --pack"),
        (["--paired", "--pack", "2", "--pack-slots", "3", "--pack-nodes", "2"],
         "--pack-nodes 2 spreads the pack's slots evenly over its nodes; --pack-slots 3 is not a multiple of it"),
        (["--paired", "--pack", "2", "--executor", "local"], "the local executor gives none"),
        (["--paired", "--pack", "2", "--executor", "submitit"], "the submitit executor gives none"),
    ]
    for args, message in cases:
        proc = plan_on_gpu_site(tmp_path, *args)
        assert proc.returncode == 2, (args, proc.stdout, proc.stderr)
        assert message in proc.stderr, proc.stderr
