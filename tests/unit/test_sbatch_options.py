"""The common sbatch settings as options of the default command (--partition, --account, --qos,
--gpus-per-task, --time, --mem, --array-parallelism). Each replaces the profile's value in the scripts, in
submitit's parameters and in the partition check, and is checked as the profile key is. Slurm is faked at the
command line."""

import json
from pathlib import Path

import pytest
from helpers import fake_slurm_site, run_cli

from orchestrator.plan.profile import load_profile
from orchestrator.run.executors.submitit import submitit_parameters

# A profile that sets every value an option replaces, each to something the option then changes.
SITE = """partition = "p1"
account = "a1"
qos = "low"
gpus_per_task = 2
jax_recipe = "cuda12"
time_limit = "00:30:00"
mem = "8G"
array_parallelism = 5
"""

# Each option's profile key.
KEYS = {"--partition": "partition", "--account": "account", "--qos": "qos", "--gpus-per-task": "gpus_per_task",
        "--time": "time_limit", "--mem": "mem", "--array-parallelism": "array_parallelism"}


@pytest.fixture
def partition_site(tmp_path):
    """sbatch numbering its jobs 4001, 4002, ... and recording its arguments; sinfo knowing partitions p1 and p2;
    scontrol's MaxArraySize from FAKE_MAX_ARRAY_SIZE; sacct and squeue with empty queues."""
    return fake_slurm_site(tmp_path, {
        "sinfo": "printf 'p1*\\np2\\n'\n",
        "scontrol": 'echo "MaxArraySize            = ${FAKE_MAX_ARRAY_SIZE:-1001}"\n',
        "sacct": "true\n", "squeue": "true\n", "sacctmgr": "true\n",
    }, SITE, profile_name="site.toml")


def submit_jax(tmp_path, env, profile, *args):
    return run_cli("--benchmark", "digits", "--use-case", "1", "--frameworks", "jax", "--batch-sizes", "8,16,32,64",
                   "--profile", str(profile), "--results-dir", str(tmp_path / "r"), "--scripts-dir",
                   str(tmp_path / "s"), *args, env=env)


def directives(tmp_path, name: str = "jax_digits_1.sh") -> list[str]:
    text = (tmp_path / "s" / name).read_text()
    return [line.removeprefix("#SBATCH ") for line in text.splitlines() if line.startswith("#SBATCH ")]


@pytest.mark.parametrize("option, value, profile_line, line", [
    ("--partition", "p2", "--partition=p1", "--partition=p2"),
    ("--account", "a2", "--account=a1", "--account=a2"),
    ("--qos", "high", "--qos=low", "--qos=high"),
    ("--gpus-per-task", "1", "--gres=gpu:2", "--gres=gpu:1"),
    ("--time", "1-02:00:00", "--time=00:30:00", "--time=1-02:00:00"),
    ("--mem", "64G", "--mem=8G", "--mem=64G"),
    ("--array-parallelism", "3", "--array=0-3%5", "--array=0-3%3"),
])
def test_each_option_replaces_the_profiles_sbatch_line(tmp_path, partition_site, option, value, profile_line, line):
    env, _, profile = partition_site
    proc = submit_jax(tmp_path, env, profile, "--dry-run", option, value)
    assert proc.returncode == 0, proc.stderr
    lines = directives(tmp_path)
    assert line in lines and profile_line not in lines, lines
    manifest = json.loads(next((tmp_path / "r").glob("*/manifest.json")).read_text())
    # The manifest records the profile as the jobs got it, which resubmit reads.
    assert str(manifest["profile"][KEYS[option]]) == value and manifest["profile"]["name"] == "site"
    assert f"{option} {value}" in manifest["command"]
    # The header says what produced the script: the command line, with the option.
    produced = next(line for line in (tmp_path / "s" / "jax_digits_1.sh").read_text().splitlines()
                    if line.startswith("# Produced by `"))
    assert f"{option} {value}" in produced


def test_an_option_also_replaces_a_systems_value_and_the_same_option_in_extra_sbatch(tmp_path, partition_site):
    env, _, profile = partition_site
    profile.write_text(profile.read_text().replace('qos = "low"\n', 'extra_sbatch = ["--qos=low", "--exclusive"]\n')
                       + '[systems.big]\ntime_limit = "04:00:00"\nmem = "128G"\n')
    proc = submit_jax(tmp_path, env, profile, "--dry-run", "--systems", "big", "--time", "00:10:00", "--qos", "high")
    assert proc.returncode == 0, proc.stderr
    lines = directives(tmp_path, "jax_digits_1_big.sh")
    assert "--time=00:10:00" in lines and "--mem=128G" in lines  # the option wins; the system keeps the rest
    assert "--qos=high" in lines and "--qos=low" not in lines and "--exclusive" in lines


@pytest.mark.parametrize("option, value, words", [
    ("--time", "25:99:99x", "'25:99:99x' is not a Slurm time"),
    ("--mem", "lots", "'lots' is not a Slurm memory size"),
    ("--array-parallelism", "0", "must be at least 1, got 0"),
    ("--array-parallelism", "4000002", "must be at most 4000001 (Slurm's largest MaxArraySize), got 4000002"),
    ("--partition", "gpu; rm -rf ~", "'gpu; rm -rf ~' may only hold letters"),
    ("--account", "a\nb", "'a\\nb' may only hold letters"),
    ("--qos", "hi gh", "'hi gh' may only hold letters"),
    ("--gpus-per-task", "70000", "must be at most 65534 (the most per task that Slurm counts), got 70000"),
])
def test_a_bad_value_is_refused_in_one_sentence_like_the_profile_key(tmp_path, partition_site, option, value, words):
    env, calls, profile = partition_site
    proc = submit_jax(tmp_path, env, profile, option, value)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {option} {words}"), proc.stderr
    assert not (tmp_path / "r").exists() and not (tmp_path / "s").exists() and not calls.exists()


def test_gpus_on_a_profile_with_the_cpu_jax_are_refused_with_the_fix(tmp_path, partition_site):
    env, _, profile = partition_site
    profile.write_text(profile.read_text().replace('jax_recipe = "cuda12"', 'jax_recipe = "cpu"')
                       .replace("gpus_per_task = 2", "gpus_per_task = 0"))
    proc = submit_jax(tmp_path, env, profile, "--dry-run", "--gpus-per-task", "1")
    assert proc.returncode == 2
    assert "--gpus-per-task 1" in proc.stderr and "jax_recipe = 'cuda12'" in proc.stderr
    assert not (tmp_path / "r").exists()


def test_the_partition_check_sees_the_option_not_the_profile(tmp_path, partition_site):
    env, _, profile = partition_site
    profile.write_text(profile.read_text().replace('partition = "p1"', 'partition = "gone"'))
    proc = submit_jax(tmp_path, env, profile, "--dry-run", "--partition", "nope")
    assert proc.returncode == 2
    assert proc.stderr.strip() == "error: partition 'nope' is unknown to sinfo; known partitions: p1, p2"
    # The profile's partition is unknown, the one given replaces it.
    assert submit_jax(tmp_path, env, profile, "--dry-run", "--partition", "p2").returncode == 0


def test_array_parallelism_throttles_the_script_its_parts_and_its_resubmission(tmp_path, partition_site):
    env, calls, profile = partition_site
    env["FAKE_MAX_ARRAY_SIZE"] = "3"  # four tasks: parts of 3 and 1
    proc = submit_jax(tmp_path, env, profile, "--array-parallelism", "2")
    assert proc.returncode == 0, proc.stderr
    assert "--array=0-3%2" in directives(tmp_path)
    manifest = json.loads(next((tmp_path / "r").glob("*/manifest.json")).read_text())
    script = Path(manifest["scripts"]["jax"]["campaign_copy"])
    assert calls.read_text().splitlines() == [f"--parsable --array=0-2%2 {script} 0",
                                             f"--parsable --array=0-0%2 {script} 3"]
    proc = run_cli("resubmit", "--results-dir", str(tmp_path / "r"), env=env)  # no cell has a result yet
    assert proc.returncode == 0, proc.stderr
    assert calls.read_text().splitlines()[2:] == [f"--parsable --array=0-2%2 {script}",
                                                 f"--parsable --array=0%2 {script} 3"]


def test_submitit_gets_the_options():
    profile = load_profile(None).with_options({"--partition": "p2", "--account": "a2", "--qos": "high",
                                               "--gpus-per-task": None, "--time": "02:00:00", "--mem": "64G",
                                               "--array-parallelism": 2})
    params = submitit_parameters(profile, "jax_digits_1", 10)
    assert params["slurm_partition"] == "p2" and params["slurm_mem"] == "64G" and params["timeout_min"] == 120
    assert params["slurm_array_parallelism"] == 2
    assert params["slurm_account"] == "a2" and params["slurm_qos"] == "high"
    assert params["slurm_additional_parameters"] == {}


def test_the_collect_job_gets_the_qos_option(tmp_path):
    from orchestrator.plan.render import render_collect

    profile = load_profile(None).with_options({"--qos": "high", "--partition": "p2"})
    text = render_collect(profile, campaign="c", campaign_dir=tmp_path / "c", results_dir=tmp_path, python="python3",
                          command="python main.py --qos high", git_commit="abc", created_at="now")
    assert "#SBATCH --qos=high\n" in text and "#SBATCH --partition=p2\n" in text
