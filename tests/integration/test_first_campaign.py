"""The README's first campaign, step by step, on a cluster that looks like a university's: A100 and H100 partitions
with GPU GRES, both frameworks in NGC-like container images run by Apptainer, faked at the subprocess boundary
(sinfo, sbatch, squeue, sacct, apptainer on PATH). The fake sbatch runs each array task here, as Slurm would on a
node, and the fake apptainer runs the image's command on this machine, whose framework environments stand in for the
images. Each step is the README's command with the user's profile, and each says what the README says it does."""

from __future__ import annotations

import os
import sys

import pandas as pd
from fake_container import fake_apptainer
from helpers import BRIEF_TIMING_ARGS, REPO_ROOT, fake_tools, missing_envs, run_cli, write_mnist_folder

SINFO = "a100*|gpu:a100:4(S:0-1)\nh100|gpu:h100:8(S:0-1)\n"

# sbatch as Slurm runs an array: each task of --array (or the script's own #SBATCH --array) with its ids, its
# output where #SBATCH --output says, one after another; then the job id, as --parsable prints it.
FAKE_SBATCH = r'''
import os, re, subprocess, sys
from pathlib import Path

counter = Path(os.environ["FAKE_SLURM_DIR"]) / "next_job"
job = int(counter.read_text()) if counter.exists() else 7001
counter.write_text(str(job + 1))
args = sys.argv[1:]
options = [a for a in args if a.startswith("--")]
script = next(a for a in args if not a.startswith("--"))
rest = args[args.index(script) + 1:]
text = Path(script).read_text()
array = next((o.split("=", 1)[1] for o in options if o.startswith("--array=")), None)
array = array or (re.search(r"^#SBATCH --array=(\S+)", text, re.M) or [None, "0"])[1]
indices = []
for part in array.split("%")[0].split(","):
    low, _, high = part.partition("-")
    indices += range(int(low), int(high or low) + 1)
output = (re.search(r"^#SBATCH --output=(\S+)", text, re.M) or [None, f"slurm-{job}.out"])[1]
with open(Path(os.environ["FAKE_SLURM_DIR"]) / "sbatch.log", "a") as log:
    log.write(" ".join(args) + "\n")
for index in indices:
    env = {**os.environ, "SLURM_JOB_ID": f"{job}{index}", "SLURM_ARRAY_JOB_ID": str(job),
           "SLURM_ARRAY_TASK_ID": str(index), "SLURM_CPUS_PER_TASK": "2", "SLURM_NODELIST": "gpu01"}
    path = output.replace("%A", str(job)).replace("%a", str(index)).replace("%j", env["SLURM_JOB_ID"])
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as out:
        subprocess.run(["bash", script, *rest], env=env, stdout=out, stderr=subprocess.STDOUT)
print(job)
'''


def fake_cluster(tmp_path):
    """PATH with the fake Slurm commands and apptainer; the environment the commands run in."""
    bin_dir = tmp_path / "bin"
    fake_apptainer(bin_dir, tmp_path / "apptainer.log")
    # sbatch runs each job here, in Python (FAKE_SBATCH): not the recording fake_sbatch of the unit tests.
    (bin_dir / "sbatch").write_text(f"#!{sys.executable}\n{FAKE_SBATCH}")
    (bin_dir / "sbatch").chmod(0o755)
    env = fake_tools(bin_dir, {key: value for key, value in os.environ.items() if key != "SLURM_CONF"},
                     sinfo=f'if [[ "$*" == *%G* ]]; then printf "{SINFO}"; else printf "{SINFO}" | cut -d"|" -f1; fi\n',
                     squeue="exit 0\n",  # every job has left the queue
                     sacct="exit 0\n",  # and accounting lists none: the result files say
                     scancel="exit 0\n")
    return {**env, "FAKE_SLURM_DIR": str(tmp_path)}


def university_profile(tmp_path):
    """A GPU site's profile: two systems by partition, both frameworks in images pulled once to .sif files (whose
    python is, for the fake runtime, this machine's framework environment)."""
    images = {fw: tmp_path / f"{fw}-25.04.sif" for fw in ("jax", "torch")}
    for image in images.values():
        image.write_bytes(b"image")
    profile = tmp_path / "uni.toml"
    profile.write_text(
        'account = "lab"\ngpus_per_task = 1\njax_recipe = "cuda12"\ncpus_per_task = 2\ntime_limit = "00:20:00"\n'
        'default_system = "a100"\n[systems.a100]\npartition = "a100"\ngpu_type = "a100"\nexpect = "."\n'
        '[systems.h100]\npartition = "h100"\ngpu_type = "h100"\nexpect = "."\n'
        + "".join(f'[envs.{fw}]\ncontainer = "{image}"\npython = "{REPO_ROOT / ".envs" / fw / "bin" / "python"}"\n'
                  for fw, image in images.items()))
    return profile


def test_the_readme_first_campaign_on_a_gpu_cluster_with_containers(tmp_path):
    assert not missing_envs()
    env = fake_cluster(tmp_path)
    profile = str(university_profile(tmp_path))
    data = write_mnist_folder(tmp_path / "mnist", train=5600, test=100)
    folders = ["--results-dir", str(tmp_path / "results"), "--scripts-dir", str(tmp_path / "slurm_scripts")]
    request = ["--benchmark", "mnist", "--use-case", "1", "--data-dir", str(data), "--batch-sizes", "64",
               "--epochs", "1", *BRIEF_TIMING_ARGS, "--profile", profile, "--systems", "a100,h100"]

    # 1. See what can run.
    listed = run_cli("list", env=env)
    assert listed.returncode == 0 and "mnist" in listed.stdout
    doctor = run_cli("doctor", "--profile", profile, "--benchmark", "mnist", "--data-dir", str(data), env=env)
    assert "partitions: a100, h100" in doctor.stdout, doctor.stdout
    assert "container" in doctor.stdout and "jax environment" in doctor.stdout
    # 2-3. Plan without submitting, and read the scripts: one per framework and system, each on its partition with
    # its GPU type, running the backend inside its image.
    dry = run_cli(*request, "--dry-run", *folders[2:], "--results-dir", str(tmp_path / "dry"), env=env)
    assert dry.returncode == 0, dry.stdout + dry.stderr
    scripts = sorted((tmp_path / "slurm_scripts").glob("*.sh"))
    assert [s.name for s in scripts] == ["jax_mnist_1_a100.sh", "jax_mnist_1_h100.sh", "torch_mnist_1_a100.sh",
                                         "torch_mnist_1_h100.sh"]
    a100 = (tmp_path / "slurm_scripts" / "jax_mnist_1_a100.sh").read_text()
    assert "#SBATCH --partition=a100" in a100 and "#SBATCH --gres=gpu:a100:1" in a100 and "--account=lab" in a100
    assert f"{tmp_path / 'jax-25.04.sif'} {REPO_ROOT / '.envs' / 'jax' / 'bin' / 'python'} -m jax_backend.run" in a100
    # 4. Submit: the campaign's own copies go to sbatch, one array per framework and system.
    submit = run_cli(*request, *folders, env=env, timeout=1800)
    assert submit.returncode == 0, submit.stdout + submit.stderr
    assert len((tmp_path / "sbatch.log").read_text().splitlines()) == 4
    assert "submitted; follow with squeue, then run: python main.py collect" in submit.stdout
    # 5. Follow it.
    campaigns = run_cli("campaigns", *folders[:2], env=env)
    assert campaigns.returncode == 0 and "mnist-uc1" in campaigns.stdout
    status = run_cli("status", *folders[:2], env=env)
    assert status.returncode == 0, status.stdout + status.stderr
    assert status.stdout.count("completed") >= 4 and "4/4 ended (4 completed)" in status.stdout
    watch = run_cli("watch", *folders[:2], env=env, timeout=120)
    assert watch.returncode == 0, watch.stdout + watch.stderr
    # 6. Collect and report: JAX against PyTorch per system, every row from its container.
    collect = run_cli("collect", *folders[:2], env=env)
    assert collect.returncode == 0, collect.stderr
    merged = pd.read_parquet(tmp_path / "results" / "merged.parquet",
                             columns=["framework", "system", "environment_kind"])
    assert set(zip(merged.framework, merged.system)) == {(fw, s) for fw in ("jax", "torch") for s in ("a100", "h100")}
    assert merged.environment_kind.str.match(r"container: .*-25\.04\.sif \(sha256:[0-9a-f]{64}\)$").all()
    report = run_cli("report", *folders[:2], env=env)
    assert report.returncode == 0, report.stderr
    methods = (tmp_path / "results" / "report" / "report.md").read_text()
    assert "container " in methods.split("## Methods")[1] and "measured with jaxtorch-bench at commit" in methods
    runs = [line for line in (tmp_path / "apptainer.log").read_text().splitlines() if "_backend.run" in line]
    assert len(runs) == 4  # every backend run went through the runtime
