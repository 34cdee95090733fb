"""Rendered scripts run exactly what was meant, whatever the names and paths hold; sbatch is faked here."""

import json
import os
import shlex
import subprocess
from pathlib import Path

import pytest
from helpers import fake_sbatch, fake_slurm_site, fake_tools, run_cli


def fake_env(env_dir: Path, framework: str, record: Path) -> None:
    """An environment whose `python` only records its arguments: enough to see what the script would run."""
    bin_dir = env_dir / framework / "bin"
    fake_tools(bin_dir, python=f'printf "%s\\n" "$@" > {shlex.quote(str(record))}\n')
    (bin_dir / "activate").write_text(f'export PATH={shlex.quote(str(bin_dir))}:"$PATH"\n')


def test_hostile_paths_are_quoted_and_the_script_runs_only_the_backend(tmp_path):
    base = tmp_path / "a b'c$(touch PWNED);`touch PWNED2`"
    base.mkdir()
    env_dir = base / "envs"
    record = tmp_path / "record.txt"
    fake_env(env_dir, "jax", record)
    profile = tmp_path / "p.toml"
    profile.write_text(f"env_dir = {json.dumps(str(env_dir))}\n")
    proc = run_cli("--benchmark", "digits", "--use-case", "1", "--frameworks", "jax", "--dry-run",
                   "--profile", str(profile), "--results-dir", str(base / "results"),
                   "--scripts-dir", str(base / "scripts"))
    assert proc.returncode == 0, proc.stderr
    script = base / "scripts" / "jax_digits_1.sh"
    subprocess.run(["bash", "-n", str(script)], check=True)
    run = subprocess.run(["bash", str(script)], check=False, cwd=tmp_path, capture_output=True, text=True,
                         env={**os.environ, "SLURM_ARRAY_TASK_ID": "1"})
    assert run.returncode == 0, run.stderr
    assert not list(tmp_path.rglob("PWNED*")), "a value in the script was executed"
    args = record.read_text().splitlines()
    assert args[:2] == ["-m", "jax_backend.run"]
    specs, index = Path(args[2]), args[3]
    assert specs.is_file() and specs.name == "jax.jsonl" and specs.is_relative_to(base) and index == "1"
    from bench_contract.spec import JobSpec

    manifest = json.loads(next((base / "results").glob("*/manifest.json")).read_text())
    assert JobSpec.read(specs, 1).cell_id == manifest["cells"][1]["cell_id"]


def test_a_path_that_cannot_go_in_an_sbatch_line_is_refused(tmp_path):
    proc = run_cli("--benchmark", "digits", "--use-case", "1", "--dry-run",
                   "--results-dir", str(tmp_path / "line\nbreak"), "--scripts-dir", str(tmp_path / "s"))
    assert proc.returncode == 2
    assert "cannot hold a line break" in proc.stderr
    assert not (tmp_path / "s").exists()


def test_the_command_in_the_header_stays_a_comment(tmp_path):
    proc = run_cli("--benchmark", "digits", "--use-case", "1", "--dry-run", "--synthetic", "--data-dir",
                   "x\necho owned", "--results-dir", str(tmp_path / "r"), "--scripts-dir", str(tmp_path / "s"))
    assert proc.returncode == 0, proc.stderr
    text = (tmp_path / "s" / "jax_digits_1.sh").read_text()
    assert "\necho owned" not in text


@pytest.fixture
def slurm_site(tmp_path):
    """fake_slurm_site: sbatch records each call and answers like `sbatch --parsable`; scontrol answers with the
    MaxArraySize the test asks for (Slurm's default is 1001); environments whose `python` records its arguments."""
    scontrol = 'echo "MaxArraySize            = ${FAKE_MAX_ARRAY_SIZE:-1001}"\n'
    env, calls, profile = fake_slurm_site(tmp_path, {"scontrol": scontrol}, 'partition = "debug"\n')
    for framework in ("jax", "torch"):
        fake_env(tmp_path / "envs", framework, tmp_path / f"{framework}.txt")
    return env, calls, profile


def test_slurm_executor_calls_sbatch_once_per_framework_and_records_job_ids(tmp_path, slurm_site):
    env, calls, profile = slurm_site
    proc = run_cli("--benchmark", "digits", "--use-case", "1", "--batch-sizes", "8,16,32", "--profile", str(profile),
                   "--results-dir", str(tmp_path / "r"), "--scripts-dir", str(tmp_path / "s"), env=env)
    assert proc.returncode == 0, proc.stderr
    lines = calls.read_text().splitlines()
    manifest = json.loads(next((tmp_path / "r").glob("*/manifest.json")).read_text())
    copies = [manifest["scripts"][key]["campaign_copy"] for key in ("jax", "torch")]
    assert lines == [f"--parsable {copy}" for copy in copies]  # the campaign's own copies
    assert [Path(copy).read_text() for copy in copies] == [(tmp_path / "s" / name).read_text()
                                                          for name in ("jax_digits_1.sh", "torch_digits_1.sh")]
    assert manifest["executor"] == "slurm"
    assert manifest["submissions"]["jax"]["task_ids"] == ["4001_0", "4001_1", "4001_2"]
    assert manifest["submissions"]["torch"]["job_id"] == "4002"
    assert "4002_2" in proc.stdout  # the table of cells and job ids
    assert "#SBATCH --partition=debug" in (tmp_path / "s" / "jax_digits_1.sh").read_text()


@pytest.mark.parametrize("cluster_limit, profile_limit", [("2", None), ("1001", 2)])
def test_an_array_larger_than_allowed_is_submitted_in_parts(tmp_path, slurm_site, cluster_limit, profile_limit):
    env, calls, profile = slurm_site
    env["FAKE_MAX_ARRAY_SIZE"] = cluster_limit
    if profile_limit:
        profile.write_text(profile.read_text() + f"max_array_size = {profile_limit}\n")
    proc = run_cli("--benchmark", "digits", "--use-case", "1", "--batch-sizes", "8,16,32,64,128",
                   "--profile", str(profile), "--results-dir", str(tmp_path / "r"),
                   "--scripts-dir", str(tmp_path / "s"), env=env)
    assert proc.returncode == 0, proc.stderr
    (folder,) = (tmp_path / "r").glob("*/")
    jax_script = folder / "scripts" / "jax_digits_1.sh"  # the campaign's own copy
    assert calls.read_text().splitlines()[:3] == [
        f"--parsable --array=0-1 {jax_script} 0", f"--parsable --array=0-1 {jax_script} 2",
        f"--parsable --array=0-0 {jax_script} 4",
    ]
    assert len(calls.read_text().splitlines()) == 6  # three parts per framework
    manifest = json.loads(next((tmp_path / "r").glob("*/manifest.json")).read_text())
    jax = manifest["submissions"]["jax"]
    assert jax["arrays"] == [{"job_id": "4001", "offset": 0, "count": 2}, {"job_id": "4002", "offset": 2, "count": 2},
                             {"job_id": "4003", "offset": 4, "count": 1}]
    assert jax["task_ids"] == ["4001_0", "4001_1", "4002_0", "4002_1", "4003_0"]
    assert "submitted as 3 array jobs 4001, 4002, 4003" in proc.stdout
    # Task 1 of the part at offset 2 runs cell 3: the script adds its argument to the array index.
    run = subprocess.run(["bash", str(jax_script), "2"], check=False, capture_output=True, text=True,
                         env={**env, "SLURM_ARRAY_TASK_ID": "1"})
    assert run.returncode == 0, run.stderr
    assert (tmp_path / "jax.txt").read_text().splitlines()[3] == "3"


def test_a_part_refused_midway_names_the_parts_already_submitted(tmp_path, slurm_site):
    env, calls, profile = slurm_site
    env["FAKE_MAX_ARRAY_SIZE"] = "1"
    fake_tools(Path(env["PATH"].split(":")[0]), sbatch=fake_sbatch(
        calls, f'n=$(wc -l < "{calls}")\n'
               '[ "$n" -ge 2 ] && { echo "sbatch: error: QOSMaxSubmitJobPerUserLimit" >&2; exit 1; }\n'))
    proc = run_cli("--benchmark", "digits", "--use-case", "1", "--profile", str(profile),
                   "--results-dir", str(tmp_path / "r"), "--scripts-dir", str(tmp_path / "s"), env=env)
    assert proc.returncode == 1
    assert "QOSMaxSubmitJobPerUserLimit (part 2 of 2; parts already submitted: 4001)" in proc.stderr
    manifest = json.loads(next((tmp_path / "r").glob("*/manifest.json")).read_text())
    assert "parts already submitted: 4001" in manifest["submission_error"]


def test_a_refused_submission_is_one_sentence(tmp_path, slurm_site):
    env, _calls, profile = slurm_site
    fake_tools(Path(env["PATH"].split(":")[0]),
               sbatch="echo 'sbatch: error: invalid partition specified: debug' >&2\nexit 1\n")
    proc = run_cli("--benchmark", "digits", "--use-case", "1", "--profile", str(profile),
                   "--results-dir", str(tmp_path / "r"), "--scripts-dir", str(tmp_path / "s"), env=env)
    assert proc.returncode == 1
    (folder,) = (tmp_path / "r").glob("*/")
    assert proc.stderr.strip().splitlines() == [
        f"error: sbatch refused {folder / 'scripts' / 'jax_digits_1.sh'}: sbatch: error: invalid partition specified: "
        "debug"
    ]


@pytest.mark.parametrize("limit, minutes", [
    ("30", 30), ("30:01", 31), ("02:00:00", 120), ("1-00", 1440), ("1-02:30", 1590), ("0-00:00:30", 1),
])
def test_slurm_time_limits_become_submitit_minutes(limit, minutes):
    from orchestrator.run.executors.submitit import slurm_minutes

    assert slurm_minutes(limit) == minutes


def test_submitit_gets_the_profile_resources():
    from orchestrator.plan.profile import ClusterProfile
    from orchestrator.run.executors.submitit import submitit_parameters

    params = submitit_parameters(ClusterProfile(partition="gpu", account="a1", gpus_per_task=2, jax_recipe="cuda12", cpus_per_task=4,
                                                setup_lines=("module load cuda",), extra_sbatch=("--qos=high",)),
                                 "jax_digits_1", 3)
    assert params["slurm_partition"] == "gpu" and params["slurm_gres"] == "gpu:2"
    assert params["slurm_cpus_per_task"] == 4 and params["timeout_min"] == 30
    assert params["slurm_setup"] == ["module load cuda"]
    assert params["slurm_account"] == "a1" and params["slurm_additional_parameters"] == {"qos": "high"}


def test_waiting_polls_squeue_once_per_round_for_the_whole_campaign(tmp_path, monkeypatch):
    from orchestrator.run import wait
    from orchestrator.run.executors import Submission

    calls = tmp_path / "calls"
    # squeue reports the jobs for two rounds, then nothing; sacct reports one failed task.
    env = fake_tools(tmp_path / "bin",
                     squeue=f'echo "squeue $*" >> "{calls}"\n'
                            f'[ $(grep -c squeue "{calls}") -le 2 ] && echo "7_0 RUNNING"\nexit 0\n',
                     sacct="printf '7_0|COMPLETED\\n7_1|FAILED\\n8_0|CANCELLED by 0\\n'\n")
    monkeypatch.setenv("PATH", env["PATH"])
    monkeypatch.setattr(wait.time, "sleep", lambda s: None)
    subs = [Submission("jax", "7", ["7_0", "7_1"]), Submission("torch", "8", ["8_0"])]
    wait.wait_for_slurm(subs)
    lines = calls.read_text().splitlines()
    assert len(lines) == 3 and all("-j 7,8 " in line for line in lines)
    assert subs[0].failed == {1: "FAILED"} and subs[1].failed == {0: "CANCELLED"}


def test_a_partition_sinfo_does_not_know_is_refused_before_anything_is_written(tmp_path, slurm_site):
    env, calls, profile = slurm_site
    fake_tools(Path(env["PATH"].split(":")[0]), sinfo="printf 'gpu*\\nlong\\n'\n")
    proc = run_cli("--benchmark", "digits", "--use-case", "1", "--dry-run", "--profile", str(profile),
                   "--results-dir", str(tmp_path / "r"), "--scripts-dir", str(tmp_path / "s"), env=env)
    assert proc.returncode == 2
    assert proc.stderr.strip() == "error: partition 'debug' is unknown to sinfo; known partitions: gpu, long"
    assert not (tmp_path / "r").exists() and not calls.exists()


def test_waiting_lets_accounting_catch_up_with_the_controller(tmp_path, monkeypatch):
    from orchestrator.run import wait
    from orchestrator.run.executors import Submission

    count = tmp_path / "sacct_calls"
    env = fake_tools(tmp_path / "bin",
                     squeue="exit 0\n",  # the controller has forgotten the job already
                     sacct=f'echo x >> "{count}"\n'  # accounting still says RUNNING on its first answer
                           f'if [ $(wc -l < "{count}") -le 1 ]; then echo "9_0|RUNNING"; '
                           'else echo "9_0|COMPLETED"; fi\n')
    monkeypatch.setenv("PATH", env["PATH"])
    monkeypatch.setattr(wait.time, "sleep", lambda s: None)
    sub = Submission("torch", "9", ["9_0"])
    wait.wait_for_slurm([sub])
    assert sub.failed == {}
    assert len(count.read_text().splitlines()) == 2


# --- every rendered variant passes shellcheck ---------------------------------------------------------------

# Each variant of the campaign scripts: every use case, one and several processes, trials, pairing, and the
# three executors (a dry run writes what each would submit).
SCRIPT_VARIANTS = {
    "training": ["--use-case", "1"],
    "training, trials": ["--use-case", "1", "--trials", "3"],
    "data parallel training": ["--use-case", "2", "--nodes", "2", "--tasks-per-node", "2", "--batch-sizes", "32"],
    "per-sample gradients": ["--use-case", "3"],
    "data parallel per-sample gradients": ["--use-case", "4", "--nodes", "2", "--batch-sizes", "32"],
    "inference": ["--use-case", "5"],
    "paired": ["--use-case", "1", "--paired", "--trials", "2"],
    "packed, side by side": ["--use-case", "1", "--paired", "--pack", "2", "--pack-slots", "2", "--batch-sizes",
                             "8,16,32"],
    "batch search": ["--use-case", "1", "--find-max-batch", "--memory-limit", "2G"],
    "local executor": ["--use-case", "1", "--executor", "local"],
    "submitit executor": ["--use-case", "3", "--executor", "submitit"],
    "Slurm options": ["--use-case", "1", "--partition", "gpu", "--account", "other", "--qos", "high", "--time",
                      "1-00:00:00", "--mem", "32G", "--array-parallelism", "2"],
    "Slurm options, paired": ["--use-case", "1", "--paired", "--qos", "high", "--array-parallelism", "1"],
}
# A GPU site's profile: setup lines, an account, GPUs, memory, extra sbatch options, no warning signal, requeue.
GPU_SITE = """partition = "gpu"
account = "proj"
gpus_per_task = 1
jax_recipe = "cuda12"
mem = "16G"
setup_lines = ["module load cuda/12.4"]
extra_sbatch = ["--qos=normal"]
warning_signal = "none"
requeue = true
"""


def shellcheck_problems(*scripts: Path) -> str:
    """shellcheck's warnings and errors on the scripts; empty when there are none. Without shellcheck the test
    skips here, but not in CI (.ci/run installs it), where a skip would hide every warning."""
    import shutil

    if shutil.which("shellcheck") is None:
        if os.environ.get("CI"):
            pytest.fail("shellcheck is not installed; .ci/run installs it (apt-get install shellcheck)")
        pytest.skip("shellcheck is not installed (apt-get install shellcheck)")
    proc = subprocess.run(["shellcheck", "-S", "warning", *map(str, scripts)], check=False, capture_output=True,
                          text=True)
    return proc.stdout + proc.stderr if proc.returncode else ""


@pytest.mark.parametrize("site", ["default", "gpu site"])
@pytest.mark.parametrize("variant", SCRIPT_VARIANTS)
def test_every_rendered_campaign_script_passes_shellcheck(tmp_path, variant, site):
    base = tmp_path / "a b$c"  # the folders' names are in the scripts, quoted
    profile = []
    if site == "gpu site":
        (tmp_path / "gpu.toml").write_text(GPU_SITE)
        profile = ["--profile", str(tmp_path / "gpu.toml")]
    # Planned away from any cluster: the GPU site's partition is not the local test cluster's, whose SLURM_CONF an
    # integration test earlier in the session may have left in the environment.
    away = {name: value for name, value in os.environ.items() if name != "SLURM_CONF"}
    proc = run_cli("--benchmark", "digits", *SCRIPT_VARIANTS[variant], *profile, "--dry-run",
                   "--results-dir", str(base / "results"), "--scripts-dir", str(base / "scripts"), env=away)
    assert proc.returncode == 0, proc.stderr
    scripts = sorted((base / "scripts").glob("*.sh"))
    assert scripts
    assert shellcheck_problems(*scripts) == ""


def test_the_validate_script_passes_shellcheck(tmp_path):
    from orchestrator.plan.profile import load_profile
    from orchestrator.run.validate import ValidateRequest, render_script

    (tmp_path / "gpu.toml").write_text(GPU_SITE)
    work = tmp_path / "a b$c"
    req = ValidateRequest(model="mlp", batch_size=2, precision="fp32", variant="full", seed=0, device="auto",
                          profile=load_profile(tmp_path / "gpu.toml"))
    script = tmp_path / "validate_mlp.sh"
    script.write_text(render_script(req, work / "spec.json", work, "python main.py validate --model mlp"))
    assert shellcheck_problems(script) == ""
