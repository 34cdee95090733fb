import re

import pytest
from helpers import profile_file

from orchestrator import PROJECT_ROOT
from orchestrator.errors import UsageError
from orchestrator.plan.profile import ClusterProfile, load_profile


def test_builtin_default_keeps_environments_in_the_project():
    profile = load_profile(None)
    assert profile.env_path("jax") == PROJECT_ROOT / ".envs" / "jax"
    assert profile.jax_recipe == "cpu"


def test_a_full_profile_loads(tmp_path):
    profile = load_profile(profile_file(tmp_path, '''
partition = "gpu-a100"
account = "proj_42"
time_limit = "1-02:00:00"
gpus_per_task = 1
cpus_per_task = 8
mem = "64G"
env_dir = "/scratch/envs"
jax_recipe = "cuda12"
setup_lines = ["module load cuda/12.4"]
extra_sbatch = ["--qos=normal"]
'''))
    assert profile.name == "site"
    assert profile.partition == "gpu-a100"
    assert str(profile.env_path("torch")) == "/scratch/envs/torch"
    assert profile.setup_lines == ("module load cuda/12.4",)


@pytest.mark.parametrize(
    "text, message",
    [
        ('partitoin = "gpu"', "unknown keys partitoin; known keys: name, partition, "),
        ('partition = "gpu; rm -rf ~"', "partition 'gpu; rm -rf ~' may only hold letters"),
        ('time_limit = "forever"', "time_limit 'forever' is not a Slurm time"),
        ('gpus_per_task = "two"', "gpus_per_task must be a whole number, got 'two'"),
        ('gpus_per_task = -1', "gpus_per_task cannot be negative, got -1"),
        ('jax_recipe = "rocm"', "unknown jax_recipe 'rocm'; choose from: cpu, cuda12, cuda13"),
        ('extra_sbatch = ["--qos=a b"]', "extra_sbatch '--qos=a b' is not a plain sbatch option"),
        ('extra_sbatch = "--qos=normal"', "extra_sbatch must be a list of strings"),
        ('partition = ', "not valid TOML"),
        ('[xla_flags]\nresnet5 = "--xla_gpu_autotune_level=0"', "xla_flags.resnet5: 'resnet5' is not a model; known: "),
        ('[xla_flags]\nvit_b_16 = "--xla_a=1; rm -rf ~"', "xla_flags.vit_b_16 '--xla_a=1; rm -rf ~' is not a list of XLA"),
        ('[xla_flags]\nvit_b_16 = "xla_a=1"', "is not a list of XLA flags"),
        ('xla_flags = "--xla_a=1"', "xla_flags must be a table"),
        ('[xla_flags]\nmlp = 3', "xla_flags.mlp must be a string, got 3"),
        ('qos = "a b"', "qos 'a b' may only hold letters"),
        ('qos = "high"\nextra_sbatch = ["--qos=low"]', "both name the QOS"),
        ('array_parallelism = 0', "array_parallelism must be at least 1, got 0"),
        ('array_parallelism = "2"', "array_parallelism must be a whole number, got '2'"),
        ('[data_mirrors]\nmnist = ["ftp://x/"]', "data_mirrors.mnist 'ftp://x/' is not an http(s):// or file://"),
        ('[data_mirrors]\nimagenet1k = ["https://x/"]', "data_mirrors.imagenet1k: 'imagenet1k' is not a data set"),
    ],
)
def test_bad_profiles_are_refused(tmp_path, text, message):
    with pytest.raises(UsageError) as info:
        load_profile(profile_file(tmp_path, text))
    assert message in str(info.value) and str(info.value).startswith(f"cluster profile {tmp_path / 'site.toml'}")


def test_missing_profile_file(tmp_path):
    with pytest.raises(UsageError, match="does not exist"):
        load_profile(tmp_path / "nope.toml")


def test_profile_validates_when_built_in_code_too():
    with pytest.raises(UsageError):
        ClusterProfile(cpus_per_task=0)


def test_preemption_settings_become_sbatch_directives(tmp_path):
    from orchestrator.plan.render import sbatch_directives

    default = sbatch_directives(load_profile(None), "jax_digits_1", 3, tmp_path)
    assert "--signal=B:TERM@120" in default and "--open-mode=append" in default and "--no-requeue" in default
    site = load_profile(profile_file(tmp_path, 'warning_signal = "USR1"\nwarning_seconds = 300\nrequeue = true\n'))
    directives = sbatch_directives(site, "jax_digits_1", 3, tmp_path)
    assert "--signal=B:USR1@300" in directives and "--requeue" in directives
    off = sbatch_directives(load_profile(profile_file(tmp_path, 'warning_signal = "none"\n')), "j", 1, tmp_path)
    assert not any(d.startswith("--signal") for d in off)


@pytest.mark.parametrize("text, message", [
    ('warning_signal = "KILL"', "unknown warning_signal 'KILL'; choose from: TERM, USR1, none"),
    ("warning_seconds = 0", "warning_seconds must be at least 1, got 0"),
    ("warning_seconds = 65536", r"warning_seconds must be at most 65535 \(sbatch's --signal counts seconds in 16"),
    ('warning_seconds = "60"', "warning_seconds must be a whole number, got '60'"),
    ('requeue = "yes"', "requeue is true or false, got 'yes'"),
    ('time_limit = "00:02:00"', r"^cluster profile \S+: warning_seconds = 120: a warning 120 s before a time limit of "
                                r"00:02:00 \(120 s\) would come as the task starts; make the warning shorter than the "
                                r"time limit"),
    ('time_limit = "00:05:00"\nwarning_seconds = 301', "a warning 301 s before a time limit of 00:05:00 \\(300 s\\)"),
])
def test_bad_preemption_settings_are_refused(tmp_path, text, message):
    with pytest.raises(UsageError, match=message):
        load_profile(profile_file(tmp_path, text))


def test_a_warning_just_shorter_than_the_time_limit_or_none_at_all_is_taken(tmp_path):
    late = profile_file(tmp_path, 'time_limit = "00:02:00"\nwarning_seconds = 119\n')
    assert load_profile(late).warning_seconds == 119
    unsignalled = profile_file(tmp_path, 'time_limit = "00:02:00"\nwarning_signal = "none"\n')
    assert load_profile(unsignalled).time_limit == "00:02:00"


def test_xla_flags_per_model_reach_the_jax_specs_of_that_model_only(tmp_path):
    import json

    from helpers import run_cli

    flags = "--xla_force_host_platform_device_count=1 --xla_cpu_enable_fast_math=false"
    profile = profile_file(tmp_path, f'partition = "debug"\n[xla_flags]\nmlp = "{flags}"\ncnn = "--xla_b=2"\n')
    assert load_profile(profile).xla_flags == {"mlp": flags, "cnn": "--xla_b=2"}
    proc = run_cli("--benchmark", "mnist", "--use-case", "1", "--models", "mlp", "--dry-run", "--profile", str(profile),
                   "--results-dir", str(tmp_path / "r"), "--scripts-dir", str(tmp_path / "s"))
    assert proc.returncode == 0, proc.stderr
    specs = {fw: [json.loads(line) for line in next((tmp_path / "r").glob(f"*/specs/{fw}.jsonl")).read_text().splitlines()]
             for fw in ("jax", "torch")}
    assert specs["jax"] and all(spec["xla_flags"] == flags for spec in specs["jax"])
    assert specs["torch"] and all(spec["xla_flags"] == "" for spec in specs["torch"])
    scripts = {fw: (tmp_path / "s" / f"{fw}_mnist_1.sh").read_text() for fw in ("jax", "torch")}
    # NVML and CUDA number GPUs alike in both scripts; JAX's peak memory needs preallocation off.
    assert all("\nexport CUDA_DEVICE_ORDER=PCI_BUS_ID\n" in text for text in scripts.values())
    assert "\nexport XLA_PYTHON_CLIENT_PREALLOCATE=false\n" in scripts["jax"]


def test_gpus_with_the_cpu_jax_build_are_refused_with_the_fix(tmp_path):
    """GPUs per task with the CPU-only JAX would run JAX on the CPU beside PyTorch on the GPU, silently."""
    with pytest.raises(UsageError, match="jax_recipe = 'cpu' builds the CPU-only JAX.*set jax_recipe = 'cuda12'"):
        load_profile(profile_file(tmp_path, 'gpus_per_task = 1\njax_recipe = "cpu"\n'))
    assert load_profile(profile_file(tmp_path, 'gpus_per_task = 1\njax_recipe = "cuda12"\n')).gpus_per_task == 1
    default = load_profile(None)
    assert (default.gpus_per_task, default.jax_recipe) == (0, "cpu")  # the built-in default agrees with itself


def test_a_site_environment_is_the_interpreter_its_framework_runs(tmp_path):
    profile = load_profile(profile_file(tmp_path, '''
env_dir = "/scratch/envs"
[envs.jax]
python = "/opt/conda/envs/jax/bin/python"
setup_lines = ["module load cuda/12.4", "conda activate jax"]
'''))
    site = profile.site_environment("jax")
    assert site.python == "/opt/conda/envs/jax/bin/python"
    assert site.setup_lines == ("module load cuda/12.4", "conda activate jax")
    assert str(profile.python_path("jax")) == "/opt/conda/envs/jax/bin/python"
    assert str(profile.env_path("jax")) == "/opt/conda/envs/jax"  # the folder above its bin/
    assert profile.site_environment("torch") is None  # built from the lock as before
    assert str(profile.python_path("torch")) == "/scratch/envs/torch/bin/python"


@pytest.mark.parametrize("text, message", [
    ('[envs.tensorflow]\npython = "/usr/bin/python3"\n', "envs.tensorflow: 'tensorflow' is not a framework; known: jax, "
                                                         "torch"),
    ('[envs.jax]\npython = "envs/jax/bin/python"\n', "envs.jax.python 'envs/jax/bin/python' is not an absolute path to"),
    ('[envs.jax]\nsetup_lines = ["module load jax"]\n', "[envs.jax] needs python = "),
    ('[envs.jax]\npython = "/usr/bin/python3"\npyhton = "/x"\n', "unknown keys envs.jax.pyhton; known keys of [envs.jax]: "
                                                                "python, setup_lines"),
    ('[envs.jax]\npython = "/usr/bin/python3"\nsetup_lines = "module load jax"\n', "envs.jax.setup_lines must be a list"),
    ('[envs.jax]\npython = "/usr/bin/python3"\nsetup_lines = ["a\\nb"]\n', "envs.jax.setup_lines 'a\\nb' is not one shell"),
    ('envs = "/usr/bin/python3"\n', "envs must be a table"),
    ('envs = {jax = "/usr/bin/python3"}\n', "envs.jax must be a table"),
])
def test_a_bad_site_environment_is_refused_in_one_sentence(tmp_path, text, message):
    with pytest.raises(UsageError, match=re.escape(message)) as caught:
        load_profile(profile_file(tmp_path, text))
    assert "\n" not in str(caught.value)


def test_qos_and_array_parallelism_are_profile_keys_that_reach_the_script(tmp_path):
    from orchestrator.plan.render import sbatch_directives

    profile = load_profile(profile_file(tmp_path, 'qos = "high"\narray_parallelism = 4\n'))
    lines = sbatch_directives(profile, "jax_digits_1", 10, tmp_path)
    assert "--qos=high" in lines and "--array=0-9%4" in lines


@pytest.mark.parametrize("option, owned", [
    ("--output=/tmp/x.out", "--output"), ("--out=/tmp/x.out", "--output"), ("--error=/tmp/e", "--error"),
    ("--array=0-99", "--array"), ("--job-name=x", "--job-name"), ("--open-mode=truncate", "--open-mode"),
    ("--signal=B:USR1@60", "--signal"), ("--requeue", "--requeue"), ("--cpus-per-task=4", "--cpus-per-task"),
    ("--gres=gpu:2", "--gres"), ("--time=10", "--time"), ("--nodes=2", "--nodes"), ("--wrap=hostname", "--wrap"),
])
def test_extra_sbatch_may_not_set_an_option_the_script_writes_itself(tmp_path, option, owned):
    """extra_sbatch once came after the script's own #SBATCH lines and won: `--output` sent every task's log
    elsewhere (status and collect read none), `--array` ran other cells. sbatch takes an abbreviation of a long
    option for the option (`--out`), so a prefix counts too."""
    with pytest.raises(UsageError) as info:
        load_profile(profile_file(tmp_path, f'extra_sbatch = ["{option}"]'))
    assert str(info.value).startswith(f"cluster profile {tmp_path / 'site.toml'}: extra_sbatch {option!r} sets "
                                      f"{owned}, which every script writes itself ("), info.value


def test_extra_sbatch_keeps_the_options_the_script_leaves_to_it(tmp_path):
    """The options a script writes only where the profile sets their key, and every other, stay the site's."""
    profile = load_profile(profile_file(tmp_path, 'extra_sbatch = ["--partition=gpu", "--mem-per-cpu=4G", "--hold", '
                                           '"--constraint=a100", "--mail-type=FAIL", "--time-min=10", "--exclusive"]'))
    assert "--time-min=10" in profile.extra_sbatch
    with pytest.raises(UsageError, match="'--partition=gpu' sets --partition, which every script writes itself"):
        load_profile(profile_file(tmp_path, 'partition = "cpu"\nextra_sbatch = ["--partition=gpu"]'))


def test_memory_is_asked_one_way_the_more_specific_place_winning(tmp_path):
    """Slurm takes --mem or --mem-per-gpu, not both: mem wins within one place, a system's or the command line's over
    the profile's; extra_sbatch may spell neither where either key is set (--mem itself, not read as a prefix of
    --mem-per-gpu)."""
    from orchestrator.plan.render import sbatch_directives
    from orchestrator.run.executors.submitit import submitit_parameters

    gpu = 'gpus_per_task = 1\njax_recipe = "cuda12"\n'
    per_gpu = load_profile(profile_file(tmp_path, gpu + 'mem_per_gpu = "80G"\n[systems.big]\nmem = "500G"\n'))
    assert "--mem-per-gpu=80G" in sbatch_directives(per_gpu, "j", 1, tmp_path)
    assert "--mem-per-gpu=80G" not in sbatch_directives(ClusterProfile(mem_per_gpu="80G"), "j", 1, tmp_path)  # CPUs
    big = per_gpu.for_system("big")
    assert (big.mem, big.mem_per_gpu) == ("500G", None)
    both = load_profile(profile_file(tmp_path, gpu + 'mem = "64G"\nmem_per_gpu = "80G"\n'))
    assert [d for d in sbatch_directives(both, "j", 1, tmp_path) if d.startswith("--mem")] == ["--mem=64G"]
    given = per_gpu.with_options({"--mem": "32G"})
    assert (given.mem, given.mem_per_gpu, given.for_system("big").mem) == ("32G", None, "32G")
    params = submitit_parameters(per_gpu, "j", 40)
    assert (params["slurm_mem_per_gpu"], params["slurm_array_parallelism"]) == ("80G", 16)
    with pytest.raises(UsageError, match="extra_sbatch '--mem=4G' sets --mem, which every script writes itself"):
        load_profile(profile_file(tmp_path, gpu + 'mem_per_gpu = "80G"\nextra_sbatch = ["--mem=4G"]\n'))


def test_doctors_srun_step_asks_for_what_a_task_of_the_profile_gets():
    """doctor --on-node's srun step gets the options of the profile's jobs (queue_options and task_options): its
    partition, account, QOS, CPUs, typed GPUs and memory per GPU, and its system's constraint; memory per GPU only
    with GPUs."""
    from orchestrator.run.doctor import srun_prefix

    own = ["srun", "--nodes=1", "--ntasks=1", "--time=10", "--job-name=jaxtorch-doctor"]
    gpu = ClusterProfile(partition="gpu", account="lab", qos="high", gpus_per_task=2, gpu_type="a100", cpus_per_task=4,
                         mem_per_gpu="80G", jax_recipe="cuda12", extra_sbatch=("--constraint=h100", "--mail-type=FAIL"))
    assert srun_prefix(gpu) == own + ["--partition=gpu", "--account=lab", "--qos=high", "--cpus-per-task=4",
                                      "--gres=gpu:a100:2", "--mem-per-gpu=80G", "--constraint=h100"]
    assert srun_prefix(ClusterProfile(mem_per_gpu="80G", mem="4G")) == own + ["--cpus-per-task=2", "--mem=4G"]
    assert srun_prefix(ClusterProfile(mem_per_gpu="80G")) == own + ["--cpus-per-task=2"]
