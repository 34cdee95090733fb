"""The cluster profile: where and how jobs run on one site. A TOML file, with a built-in default.

A typed model of the same kind as the cell's configuration (bench_contract.config): every key is a field declared
once with `setting(default, help, ...)`, with its type, its choices, bounds or pattern, and the command-line option
that replaces it for one campaign. The tables of the file are models of their own: an [envs.<framework>] table a
SiteEnvironment, a [systems.<name>] table a System, whose keys that replace the profile's share the profile's
declarations. The checks come from these declarations (config.first_problem, each key named as the file spells
it: `cpus_per_task`, `systems.a100.time_limit`), then from the few rules that tie keys together (RULES). An unknown
key, a wrong type or a bad value is refused in one sentence before anything is written, because a typo in a
profile otherwise surfaces hours later on a compute node. profiles/example_gpu_cluster.toml shows every key
(tests/unit/test_readme_matches_code.py).
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field, fields, is_dataclass, replace
from pathlib import Path
from typing import Any, get_args, get_origin, get_type_hints

from bench_contract.config import Setting, check_value, first_problem, setting
from orchestrator import PROJECT_ROOT
from orchestrator.errors import UsageError
from orchestrator.plan.catalog import FRAMEWORKS, MODELS

# Values that go into #SBATCH lines, which sbatch reads itself: only a plain character set is accepted (each
# pattern must match a value whole: a value that ends in a line break would end its #SBATCH line early).
SLURM_NAME = r"[A-Za-z0-9_.,:@+-]+"
SLURM_NAME_WHY = "may only hold letters, digits and _.,:@+-"
TIME_LIMIT = r"(\d{1,5}-)?\d{1,3}(:\d{2}){0,2}"  # M, M:S, H:M:S, D-H, D-H:M or D-H:M:S; at most 99999 days
MEMORY = r"\d{1,15}[KMGT]?"
SBATCH_OPTION = r"--[a-z][a-z-]*(=[A-Za-z0-9_.,:@+%=/-]+)?"
XLA_FLAGS = r"--[A-Za-z0-9_]+(=[A-Za-z0-9_.,:+/-]*)?( +--[A-Za-z0-9_]+(=[A-Za-z0-9_.,:+/-]*)?)*"
MIRROR_URL = r"(https?|file)://\S+"
ONE_LINE = r"[^\n]*"  # a shell line of the site's own, run as written
SYSTEM_NAME = re.compile(r"[a-z0-9][a-z0-9_-]*")  # it becomes part of script names, job names and specs file names
# The profile's name goes into a "# ..." comment line of every rendered script: one line of printable characters.
PROFILE_NAME_LENGTH = 100
# Slurm keeps a task's CPU count in 16 bits (65534 is the largest it takes); GPUs are held to the same bound.
MAX_PER_TASK = 65534
PER_TASK_WHY = "the most per task that Slurm counts"
# Slurm's MaxArraySize may not exceed 4000001, so no array holds more tasks than that.
MAX_ARRAY_SIZE = 4000001
ARRAY_WHY = "Slurm's largest MaxArraySize"
JAX_RECIPES = ("cpu", "cuda12", "cuda13")
# Signals a backend turns into a failure row that says how far it got (bench_contract.run.stop_signals.STOP_SIGNALS).
WARNING_SIGNALS = ("TERM", "USR1", "none")
# How a container runs: Apptainer (`apptainer exec --nv IMAGE ...`) or Slurm's pyxis plugin (`srun
# --container-image=IMAGE ...`), the two ways most sites run NGC's JAX and PyTorch images.
CONTAINER_RUNTIMES = ("apptainer", "pyxis")
CONTAINER_PYTHON = "python3"  # the interpreter on the image's PATH where the table names none (NGC images)
# Where array_parallelism is not set, an array of more tasks than this runs at most this many at once: a modest
# share of a cluster (two 8-GPU nodes), so that one campaign never takes a partition's every GPU and a mistake in it
# fails a few tasks before the rest start. An array this small or smaller is not throttled.
DEFAULT_ARRAY_PARALLELISM = 16
# sbatch(1), --signal: "Due to the resolution of event handling by Slurm, the signal may be sent up to 60 seconds
# earlier than specified" (seen here: a warning asked for 30 s before a 3-minute limit came at 2 minutes).
SIGNAL_EARLY_S = 60


@dataclass(frozen=True)
class ClusterProfile:
    """The profile's keys. `option`: the default command's option that replaces the key for one campaign."""

    name: str = setting("default", "Named in a comment line of every script: one line of 1 to 100 printable "
                                   "characters (default: the file's name).")
    partition: str | None = setting(None, "Slurm partition (none: the cluster's default).", option="--partition",
                                    pattern=SLURM_NAME, pattern_why=SLURM_NAME_WHY)
    account: str | None = setting(None, "Slurm account to charge.", option="--account", pattern=SLURM_NAME,
                                  pattern_why=SLURM_NAME_WHY)
    qos: str | None = setting(None, "Slurm QOS (none: the association's default).", option="--qos",
                              pattern=SLURM_NAME, pattern_why=SLURM_NAME_WHY)
    # None: estimated from each campaign's cells when it is planned (orchestrator.plan.sizing).
    time_limit: str | None = setting(None, "Time limit of each task: M, M:S, H:M:S, D-H, D-H:M or D-H:M:S, at most "
                                           "99999 days (none: estimated from the cells' work).", option="--time",
                                     pattern=TIME_LIMIT,
                                     pattern_why="is not a Slurm time such as 00:30:00 or 1-00:00:00")
    # The built-in default runs on CPUs; a GPU site names its GPUs and its JAX build together (jax_recipe).
    gpus_per_task: int = setting(0, "GPUs per task, as --gres=gpu:N (0: on CPUs); GPUs need a CUDA jax_recipe.",
                                 option="--gpus-per-task", minimum=0, maximum=MAX_PER_TASK, maximum_why=PER_TASK_WHY)
    gpu_type: str | None = setting(None, "Typed GRES (--gres=gpu:a100:1), where the site names its GPU types.",
                                   pattern=SLURM_NAME, pattern_why=SLURM_NAME_WHY)
    cpus_per_task: int = setting(2, "CPUs per task.", minimum=1, maximum=MAX_PER_TASK, maximum_why=PER_TASK_WHY)
    mem: str | None = setting(None, "Memory per node, such as 16G (none: mem_per_gpu, else the partition's "
                                    "default).", option="--mem", pattern=MEMORY,
                              pattern_why="is not a Slurm memory size such as 16G")
    # Without a profile, each GPU's share of a node's memory as sinfo shows it (orchestrator.plan.discovery).
    mem_per_gpu: str | None = setting(None, "Memory per GPU of a task, such as 120G (--mem-per-gpu; only where tasks "
                                            "ask for GPUs); mem, where set, replaces it.", pattern=MEMORY,
                                      pattern_why="is not a Slurm memory size such as 120G")
    env_dir: str = setting(".envs", "Where the framework environments are built; relative to the project root.")
    # A site puts campaigns on scratch rather than in the home directory's checkout: results and task logs alike.
    results_dir: str | None = setting(None, "Where campaigns go, their results and task logs with them (~ is "
                                            "expanded; --results-dir replaces it; none: results/ in the checkout).")
    jax_recipe: str = setting("cpu", "The JAX build of the JAX environment: cpu, cuda12 or cuda13.",
                              choices=JAX_RECIPES)
    python: str = setting("python3", "The interpreter that creates the environments.")
    # The one deliberate exception to quoting: the site's own shell, written by the user.
    setup_lines: tuple[str, ...] = setting((), "Shell lines run as written before the environment is entered "
                                               "(module load ...), one per item.", pattern=ONE_LINE,
                                           pattern_why="is not one shell line; give one per item, without newlines")
    extra_sbatch: tuple[str, ...] = setting((), "Further sbatch options (--mail-type=FAIL), after the script's own; "
                                                "none that a script writes itself.", pattern=SBATCH_OPTION,
                                            pattern_why="is not a plain sbatch option such as --qos=normal")
    max_array_size: int | None = setting(None, "Most tasks per array job, where the site wants fewer than Slurm's "
                                               "MaxArraySize (which is always obeyed).", minimum=1,
                                         maximum=MAX_ARRAY_SIZE, maximum_why=ARRAY_WHY)
    array_parallelism: int | None = setting(None, "Most tasks of an array that run at once (--array=0-K%N; none: "
                                                  f"{DEFAULT_ARRAY_PARALLELISM} where an array holds more).",
                                            option="--array-parallelism",
                                            minimum=1, maximum=MAX_ARRAY_SIZE, maximum_why=ARRAY_WHY)
    # The backend turns the signal into a failure row that says at which step it stopped, and exits.
    warning_signal: str = setting("TERM", "The signal Slurm sends warning_seconds before the time limit "
                                          "(--signal=B:TERM@120): TERM, USR1, or none.", choices=WARNING_SIGNALS)
    warning_seconds: int = setting(120, "How long before the time limit the warning signal comes.", minimum=1,
                                   maximum=65535, maximum_why="sbatch's --signal counts seconds in 16 bits")
    # `python main.py resubmit` runs a task that Slurm did not requeue.
    requeue: bool = setting(False, "--requeue: Slurm may put a preempted or failed-node task back in the queue "
                                   "(false: --no-requeue).")
    xla_flags: dict[str, str] = setting({}, "[xla_flags] table of XLA flags per model (vit_b_16 = \"--xla_...\"), "
                                            "added to XLA_FLAGS in that model's JAX cells.", pattern=XLA_FLAGS,
                                        pattern_why="is not a list of XLA flags such as "
                                                    "\"--xla_gpu_enable_triton_gemm=false\" (--name or --name=value, "
                                                    "spaces between)")
    # Sites mirror data sets, and compute clusters often reach only their own.
    data_mirrors: dict[str, tuple[str, ...]] = setting({}, "[data_mirrors] table of base URLs per data set (mnist = "
                                                           "[\"https://mirror.site/mnist/\"]) that `data fetch` "
                                                           "tries before the published mirrors.", pattern=MIRROR_URL,
                                                       pattern_why="is not an http(s):// or file:// base URL")
    envs: dict[str, SiteEnvironment] = setting({}, "[envs.<framework>] tables: a framework that runs an interpreter "
                                                   "the site has, or a container, instead of one built from the lock.")
    systems: dict[str, System] = setting({}, "[systems.<name>] tables: kinds of nodes, each run by --systems.")
    default_system: str | None = setting(None, "The system a campaign without --systems runs on (none: the "
                                               "profile's own values).")

    def __post_init__(self) -> None:
        problem = refusal(self)
        if problem:
            raise UsageError(problem)

    @classmethod
    def from_dict(cls, data: dict) -> ClusterProfile:
        """A profile from its keys as TOML (or the manifest's record of it, asdict) holds them: lists and tables
        made the fields' types, then checked."""
        return from_table(cls, data, "")

    def earliest_warning_s(self) -> int:
        """How long before the time limit Slurm may send the warning signal at the earliest (0 without one)."""
        return self.warning_seconds + SIGNAL_EARLY_S if self.warning_signal != "none" else 0

    def gres(self, gpus: int) -> str:
        """The --gres value for this many GPUs: typed (gpu:a100:2) where the profile names a GPU type."""
        return f"gpu:{self.gpu_type}:{gpus}" if self.gpu_type else f"gpu:{gpus}"

    # The Slurm options of the profile's keys, read by every way a job is asked for (the sbatch scripts, submitit,
    # doctor's srun): (option, value) in the scripts' order, each the profile sets.
    def queue_options(self) -> list[tuple[str, str]]:
        """Where the job queues and who pays: partition, account and QOS (unset: Slurm's default)."""
        return [(o, v) for o, v in (("partition", self.partition), ("account", self.account), ("qos", self.qos)) if v]

    def task_options(self, gpus: int) -> list[tuple[str, str | int]]:
        """What a node's tasks get, `gpus` being the node's GPUs (--gres counts a whole node's): CPUs per task,
        GPUs and memory. Slurm takes one memory option: mem where it is set, and no memory per GPU without GPUs."""
        per_gpu = self.mem_per_gpu if gpus and not self.mem else None
        pairs = (("cpus-per-task", self.cpus_per_task), ("gres", self.gres(gpus) if gpus else None),
                 ("mem", self.mem), ("mem-per-gpu", per_gpu))
        return [(o, v) for o, v in pairs if v]

    def throttle(self, tasks: int) -> int | None:
        """How many of an array's `tasks` may run at once (the N of %N): array_parallelism, else
        DEFAULT_ARRAY_PARALLELISM where the array holds more tasks than that; None: no throttle."""
        if self.array_parallelism:
            return self.array_parallelism
        return DEFAULT_ARRAY_PARALLELISM if tasks > DEFAULT_ARRAY_PARALLELISM else None

    def array_spec(self, indices: str) -> str:
        """An --array value: the indices (0-9, or 1,3-5), throttled to `throttle` tasks at once (%N)."""
        limit = self.throttle(array_size(indices))
        return f"{indices}%{limit}" if limit else indices

    def results_folder(self) -> Path | None:
        """results_dir as a folder (~ expanded; a relative one from the project root), None where not set."""
        if self.results_dir is None:
            return None
        folder = Path(self.results_dir).expanduser()
        return folder if folder.is_absolute() else PROJECT_ROOT / folder

    def system_names(self, asked: list[str]) -> list[str]:
        """The systems a campaign runs on: those asked for (--systems), else the default one, else [""] (the
        profile's own values, no named system). An unknown name is refused with the known ones."""
        if not asked:
            return [self.default_system or ""]
        unknown = [name for name in asked if name not in self.systems]
        if unknown:
            known = ", ".join(self.systems) or "none (add [systems.<name>] tables)"
            raise UsageError(f"--systems: {', '.join(unknown)} {'is' if len(unknown) == 1 else 'are'} not a system "
                             f"of profile {self.name!r}; its systems: {known}")
        return list(dict.fromkeys(asked))

    def for_system(self, name: str) -> ClusterProfile:
        """The profile as one system's jobs get it: its values in place of the profile's, its constraint added to
        the sbatch options. Checked again, so a system whose values do not fit the profile's is refused by name."""
        if not name:
            return self
        system = self.systems[name]
        extra = self.extra_sbatch + ((f"--constraint={system.constraint}",) if system.constraint else ())
        try:
            return replace(self, **memory_replaced(system.overrides()), extra_sbatch=extra, systems={},
                           default_system=None)
        except UsageError as exc:
            raise UsageError(f"systems.{name} does not fit the profile's other keys: {exc}") from None

    def with_options(self, options: dict[str, object]) -> ClusterProfile:
        """The profile with the command line's Slurm options (OPTION_KEYS; None: not given) in place of its own and
        its systems' values, and without extra_sbatch's spelling of the same sbatch option. Each value is checked
        by its key's declaration, the sentence naming the option."""
        given = {OPTION_KEYS[option]: value for option, value in options.items() if value is not None}
        for option, key in OPTION_KEYS.items():
            problem = check_value(DECLARED[key], TYPES[key], option, given[key]) if key in given else None
            if problem:
                raise UsageError(problem)
        if given.get("gpus_per_task") and self.jax_recipe == "cpu":
            raise UsageError(f"--gpus-per-task {given['gpus_per_task']} asks Slurm for GPUs, but profile {self.name!r} "
                             "has jax_recipe = 'cpu', the CPU-only JAX, which would run on the CPU beside PyTorch on "
                             "the GPU: give a --profile with jax_recipe = 'cuda12' or 'cuda13'")
        if not given:
            return self
        # The options are named as sbatch's own (--array-parallelism aside, no sbatch option): each drops
        # extra_sbatch's spelling of it, which would otherwise come later in the script and win.
        dropped = tuple(option for option, key in OPTION_KEYS.items() if key in given)
        extra = tuple(option for option in self.extra_sbatch if option.partition("=")[0] not in dropped)
        given = memory_replaced(given)  # --mem replaces mem_per_gpu, the profile's and its systems' alike
        systems = {name: replace(system, **{key: None for key in given if key in system.overrides()})
                   for name, system in self.systems.items()}
        return replace(self, **given, extra_sbatch=extra, systems=systems)

    def site_environment(self, framework: str) -> SiteEnvironment | None:
        return self.envs.get(framework)

    def python_path(self, framework: str) -> Path:
        """The interpreter a framework's jobs run: the site's, or the one in the environment built from the lock."""
        site = self.site_environment(framework)
        return Path(site.python).expanduser() if site else self.env_path(framework) / "bin" / "python"

    def env_path(self, framework: str) -> Path:
        """The framework's environment folder: under env_dir, or for a site environment the folder above its
        interpreter's bin/ (a venv's or conda env's prefix)."""
        site = self.site_environment(framework)
        if site:
            return Path(site.python).expanduser().parent.parent
        base = Path(self.env_dir).expanduser()
        return (base if base.is_absolute() else PROJECT_ROOT / base) / framework


def array_size(indices: str) -> int:
    """How many indices an --array expression names (0-9, 1,3-5, 7)."""
    count = 0
    for part in indices.split(","):
        first, _, last = part.partition("-")
        count += int(last) - int(first) + 1 if last else 1
    return count


def memory_replaced(values: dict) -> dict:
    """`values` (a system's, or the command line's) with the other memory key cleared where one is given: Slurm
    takes --mem or --mem-per-gpu, not both, and the more specific place's wins (within one place, mem)."""
    if values.get("mem"):
        return {"mem_per_gpu": None, **values}
    if values.get("mem_per_gpu"):
        return {"mem": None, **values}
    return values


DECLARED: dict[str, Setting] = {f.name: f.metadata["setting"] for f in fields(ClusterProfile)}
TYPES: dict[str, str] = {f.name: str(f.type) for f in fields(ClusterProfile)}
# The default command's Slurm options and the profile key each replaces.
OPTION_KEYS: dict[str, str] = {declared.option: name for name, declared in DECLARED.items() if declared.option}


def as_in_the_profile(key: str) -> Any:
    """A [systems.<name>] key that replaces the profile's key of that name: the same declaration; None (the default)
    keeps the profile's value."""
    return field(default=None, metadata={"setting": DECLARED[key]})


@dataclass(frozen=True)
class SiteEnvironment:
    """An interpreter the site already has ([envs.jax] python = "/path/to/env/bin/python"), used as it is instead of
    an environment built from the lock: a conda env, a module's Python, or frameworks installed without an index;
    or a container image the framework runs in ([envs.jax] container = "docker://nvcr.io/nvidia/jax:25.01-py3",
    runtime = "apptainer" or "pyxis"), whose `python` is the image's interpreter."""

    python: str | None = setting(None, "The interpreter that has the framework: an absolute path; in a container, "
                                       "the image's (default python3).")
    setup_lines: tuple[str, ...] = setting((), "Shell lines run before that interpreter, after the profile's own "
                                               "(module load ..., conda activate ...).", pattern=ONE_LINE,
                                           pattern_why="is not one shell line; give one per item, without newlines")
    container: str | None = setting(None, "An image the framework runs in: an .sif file or a registry reference "
                                          "(docker://...).", pattern=r"\S+", pattern_why="is not an image reference")
    runtime: str | None = setting(None, "How the container runs: apptainer (the default) or pyxis.",
                                  choices=CONTAINER_RUNTIMES)

    def __post_init__(self) -> None:
        if self.container is not None:  # an image's own interpreter and the usual runtime, unless the table says
            object.__setattr__(self, "python", CONTAINER_PYTHON if self.python is None else self.python)
            object.__setattr__(self, "runtime", CONTAINER_RUNTIMES[0] if self.runtime is None else self.runtime)

    @property
    def kind(self) -> str:
        """What the rows say the environment was (environment_kind): "container: <image>" or "site: <python>"."""
        return f"container: {self.container}" if self.container else f"site: {self.python}"


@dataclass(frozen=True)
class System:
    """One kind of node of the site ([systems.a100] constraint = "a100"): where its jobs go and what they get, where
    that differs from the profile's own values (None: the profile's)."""

    partition: str | None = as_in_the_profile("partition")
    constraint: str | None = setting(None, "--constraint=<value>, after the profile's extra_sbatch.",
                                     pattern=SLURM_NAME, pattern_why=SLURM_NAME_WHY)
    gpu_type: str | None = as_in_the_profile("gpu_type")
    gpus_per_task: int | None = as_in_the_profile("gpus_per_task")
    cpus_per_task: int | None = as_in_the_profile("cpus_per_task")
    mem: str | None = as_in_the_profile("mem")
    mem_per_gpu: str | None = as_in_the_profile("mem_per_gpu")
    time_limit: str | None = as_in_the_profile("time_limit")
    # A row whose device does not match ran elsewhere (a constraint the site ignored), and is flagged.
    expect: str | None = setting(None, "A regular expression searched in the device_model its rows record (A100 "
                                       "in NVIDIA A100-SXM4-80GB).")

    def overrides(self) -> dict:
        """The profile values this system replaces: its keys that are the profile's too, where set."""
        return {f.name: getattr(self, f.name) for f in fields(self)
                if f.name in DECLARED and getattr(self, f.name) is not None}


def refusal(profile: ClusterProfile) -> str | None:
    """The first thing a profile's declarations or rules refuse, in one sentence: its own values, then each of its
    tables' (a key named as TOML spells it from the top: systems.a100.time_limit), then the rules that tie keys
    together."""
    problem = first_problem(profile, lambda key: key)
    if problem:
        return problem
    tables = [*((f"envs.{name}", site, SiteEnvironment, SITE_RULES) for name, site in profile.envs.items()),
              *((f"systems.{name}", system, System, SYSTEM_RULES) for name, system in profile.systems.items())]
    for where, table, model, rules in tables:
        if not isinstance(table, model):
            return f"{where} must be a table, got {table!r}"
        problem = first_problem(table, lambda key: f"{where}.{key}") or first(rule(table, where) for rule in rules)
        if problem:
            return problem
    return first(rule(profile) for rule in RULES)


def first(problems: Any) -> str | None:
    return next((problem for problem in problems if problem), None)


# The rules of an [envs.<framework>] table, then of a [systems.<name>] table: each returns why the table cannot
# be, or None.
def python_or_a_container(site: SiteEnvironment, where: str) -> str | None:
    if site.container is None and site.python is None:
        return (f"[{where}] needs python = \"/path/to/bin/python\", the interpreter that has the framework, or "
                "container = \"<image>\"")
    if site.container is None and not Path(site.python).expanduser().is_absolute():
        return (f"{where}.python {site.python!r} is not an absolute path to an interpreter such as "
                "\"/opt/conda/envs/jax/bin/python\"")
    return None


def runtime_goes_with_a_container(site: SiteEnvironment, where: str) -> str | None:
    return f"{where}.runtime goes with container = \"<image>\"" if site.runtime and not site.container else None


def expect_is_a_regular_expression(system: System, where: str) -> str | None:
    try:
        re.compile(system.expect or "")
    except re.error as exc:
        return f"{where}.expect {system.expect!r} is not a regular expression ({exc})"
    return None


SITE_RULES = (python_or_a_container, runtime_goes_with_a_container)
SYSTEM_RULES = (expect_is_a_regular_expression,)


# The rules of the profile, in the order they are checked: each returns why the profile cannot be, or None.
def name_is_one_printable_line(profile: ClusterProfile) -> str | None:
    if 0 < len(profile.name) <= PROFILE_NAME_LENGTH and profile.name.isprintable():
        return None
    return (f"name {profile.name!r} is not a profile name, which is one line of 1 to {PROFILE_NAME_LENGTH} "
            "printable characters without line breaks or control characters (without a name key, a profile is "
            "named after its file)")


def qos_named_once(profile: ClusterProfile) -> str | None:
    if profile.qos is not None and any(option.startswith("--qos=") for option in profile.extra_sbatch):
        return f"qos {profile.qos!r} and the --qos= in extra_sbatch both name the QOS; keep one of them"
    return None


def gpus_need_a_cuda_jax(profile: ClusterProfile) -> str | None:
    if profile.gpus_per_task and profile.jax_recipe == "cpu":
        return (f"gpus_per_task = {profile.gpus_per_task} asks Slurm for GPUs, but jax_recipe = 'cpu' builds the "
                "CPU-only JAX, which would run on the CPU beside PyTorch on the GPU: set jax_recipe = 'cuda12' or "
                "'cuda13' for GPU nodes, or gpus_per_task = 0 to run both frameworks on CPUs")
    return None


def warning_before_the_time_limit(profile: ClusterProfile) -> str | None:
    if profile.time_limit is None:  # estimated at plan time, the warning's time included (plan.sizing)
        return None
    limit = slurm_seconds(profile.time_limit)
    if profile.warning_signal != "none" and profile.warning_seconds >= limit:
        # Slurm would send it at the task's start: every task would stop before its first step.
        return (f"warning_seconds = {profile.warning_seconds}: a warning {profile.warning_seconds} s before a time "
                f"limit of {profile.time_limit} ({limit} s) would come as the task starts; make the warning shorter "
                "than the time limit, or warning_signal = \"none\"")
    return None


# The sbatch options every rendered script writes itself (orchestrator.plan.render.sbatch_directives), each with
# what sets it instead: a profile's extra_sbatch comes later in the script and would win, so it may not set them
# again. Option -> why the script owns it, and what sets it.
SCRIPT_LOG = "status and collect read each task's log where the script's --output puts it"
SCRIPT_OPTIONS = {
    "job-name": "each array is found again in Slurm by the job name it is given",
    "array": "each array index is a cell, and the profile's array_parallelism sets the throttle",
    "output": SCRIPT_LOG, "error": SCRIPT_LOG, "open-mode": SCRIPT_LOG,
    "signal": "the profile's warning_signal and warning_seconds set it",
    "requeue": "the profile's requeue sets it", "no-requeue": "the profile's requeue sets it",
    "nodes": "the command's --nodes sets it", "ntasks": "the command's --tasks-per-node sets it",
    "ntasks-per-node": "the command's --tasks-per-node sets it",
    "cpus-per-task": "the profile's cpus_per_task sets it, and the rows record it",
    "gres": "the profile's gpus_per_task and gpu_type set it", "gpus": "the profile's gpus_per_task sets it",
    "gpus-per-node": "the profile's gpus_per_task sets it", "gpus-per-task": "the profile's gpus_per_task sets it",
    "time": "the profile's time_limit (or --time) sets it",
    "wrap": "the rendered script is the job",
}
# Written where one of the profile keys is set: extra_sbatch may set them in its place (--qos has its own check).
# Slurm takes memory one way only, so either memory key owns both options.
MEMORY_KEYS = ("mem", "mem_per_gpu")
SCRIPT_OPTIONS_WHERE_SET = {"partition": ("partition",), "account": ("account",), "mem": MEMORY_KEYS,
                            "mem-per-gpu": MEMORY_KEYS}


def owned_option(option: str, profile: ClusterProfile) -> tuple[str, str] | None:
    """(the script's option, why) where an extra_sbatch `option` (--name or --name=value) sets one the script owns,
    with the keys `profile` sets; None otherwise. sbatch reads an unambiguous abbreviation of a long option as the
    option (getopt), so `--out=...` is --output: any prefix of an owned option counts."""
    name = option.removeprefix("--").partition("=")[0]
    owned = dict(SCRIPT_OPTIONS)
    for full, keys in SCRIPT_OPTIONS_WHERE_SET.items():
        key = next((k for k in keys if getattr(profile, k)), None)
        if key:
            owned[full] = f"the profile's {key} sets it"
    if name in owned:  # the option itself, before any it abbreviates (--mem, not --mem-per-gpu)
        return name, owned[name]
    return next(((full, why) for full, why in owned.items() if full.startswith(name)), None)


def extra_sbatch_leaves_the_scripts_options(profile: ClusterProfile) -> str | None:
    for option in profile.extra_sbatch:
        owned = owned_option(option, profile)
        if owned:
            return (f"extra_sbatch {option!r} sets --{owned[0]}, which every script writes itself ({owned[1]}); "
                    "remove it from extra_sbatch")
    return None


def tables_name_what_exists(profile: ClusterProfile) -> str | None:
    """Each table's keys name a model, a data set `data fetch` knows, a framework, or a system as names go."""
    # Imported here: `data fetch` reads the data sets' files with numpy, which `--help` and `list` (they import this
    # module for the option's default throttle) must not load.
    from orchestrator.data.fetch import SOURCES
    for where, names, what, known in (("xla_flags", profile.xla_flags, "a model", MODELS),
                                      ("data_mirrors", profile.data_mirrors, "a data set `data fetch` knows", SOURCES),
                                      ("envs", profile.envs, "a framework", FRAMEWORKS)):
        unknown = next((name for name in names if name not in known), None)
        if unknown is not None:
            return f"{where}.{unknown}: {unknown!r} is not {what}; known: {', '.join(known)}"
    wrong = next((name for name in profile.systems if not SYSTEM_NAME.fullmatch(name)), None)
    if wrong is not None:
        return f"[systems.{wrong}]: a system's name may only hold lower-case letters, digits, _ and -"
    return None


def default_system_is_a_system(profile: ClusterProfile) -> str | None:
    if profile.default_system is not None and profile.default_system not in profile.systems:
        return (f"default_system {profile.default_system!r} is not a [systems.<name>] table of the profile; its "
                f"systems: {', '.join(profile.systems) or 'none'}")
    return None


def systems_fit_the_profile(profile: ClusterProfile) -> str | None:
    """Each system's values with the profile's others, checked as one profile (a GPU count with the CPU JAX)."""
    for name in profile.systems:
        try:
            profile.for_system(name)
        except UsageError as exc:
            return str(exc)
    return None


RULES: tuple[Callable[[ClusterProfile], str | None], ...] = (
    name_is_one_printable_line, qos_named_once, gpus_need_a_cuda_jax, warning_before_the_time_limit,
    extra_sbatch_leaves_the_scripts_options, tables_name_what_exists, default_system_is_a_system,
    systems_fit_the_profile)


def slurm_seconds(time_limit: str) -> int:
    """Seconds in a Slurm time limit (TIME_LIMIT): M, M:S, H:M:S, D-H, D-H:M or D-H:M:S."""
    days, dash, clock = time_limit.rpartition("-")
    parts = [int(p) for p in clock.split(":")]
    if dash:  # after "D-" the fields are hours, then minutes, then seconds
        h, m, s = (parts + [0, 0])[:3]
    elif len(parts) == 3:
        h, m, s = parts
    else:  # without days: minutes, then seconds
        h, m, s = 0, parts[0], (parts[1] if len(parts) > 1 else 0)
    return ((int(days or 0) * 24 + h) * 60 + m) * 60 + s


def from_table(model: type, table: object, where: str) -> Any:
    """One table of the profile as its model: the file's top (where ""), or one of its tables ("systems.a100").
    An unknown key is refused with the known ones; lists become tuples and tables of tables their models, as the
    fields' types say; the values are the model's to check."""
    if not isinstance(table, dict):
        return table  # not a table: the model that holds it refuses it by name
    def spelled(key: str) -> str:
        return f"{where}.{key}" if where else key

    known = [f.name for f in fields(model)]
    unknown = sorted(set(table) - set(known))
    if unknown:
        raise UsageError(f"unknown keys {', '.join(map(spelled, unknown))}; known keys"
                         f"{f' of [{where}]' if where else ''}: {', '.join(known)}")
    types = get_type_hints(model)
    return model(**{key: as_typed(types[key], value, spelled(key)) for key, value in table.items()})


def as_typed(kind: Any, value: object, where: str) -> object:
    """A TOML value as the field's type holds it: a list as a tuple, a table of tables as their models."""
    if get_origin(kind) is tuple and isinstance(value, list):
        return tuple(value)
    if get_origin(kind) is dict and isinstance(value, dict):
        return {key: as_typed(get_args(kind)[1], item, f"{where}.{key}") for key, item in value.items()}
    return from_table(kind, value, where) if is_dataclass(kind) else value


def expected_devices(recorded: dict) -> dict[str, str]:
    """System -> its `expect` pattern, from the profile a manifest recorded (asdict of ClusterProfile); only the
    systems that give one."""
    return {name: values["expect"] for name, values in recorded.get("systems", {}).items() if values.get("expect")}


def device_matches(pattern: str, device_model: str | None) -> bool:
    """Whether a row's device_model is what its system expects (the pattern is searched, not anchored)."""
    return re.search(pattern, device_model or "") is not None


def parse_toml(path: Path) -> dict:
    """The profile's TOML as a dict; a file that is missing, a folder, unreadable, not UTF-8 (as TOML must be) or
    not TOML is refused in one sentence."""
    try:
        return tomllib.loads(path.read_bytes().decode("utf-8"))
    except FileNotFoundError:
        raise UsageError(f"cluster profile {path} does not exist") from None
    except IsADirectoryError:
        raise UsageError(f"cluster profile {path} is a folder; give the profile's TOML file") from None
    except UnicodeDecodeError as exc:
        raise UsageError(f"cluster profile {path} is not UTF-8 text (byte {exc.object[exc.start]:#04x} at offset "
                         f"{exc.start}), as TOML must be; save it as UTF-8") from None
    except OSError as exc:
        raise UsageError(f"cluster profile {path} cannot be read: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"cluster profile {path} is not valid TOML: {exc}") from None


def load_profile(path: str | Path | None) -> ClusterProfile:
    """The profile in the TOML file at `path` (named after the file unless it has a name key), or the built-in
    one; whatever it refuses is one sentence that names the file and the key."""
    if path is None:
        return ClusterProfile()
    path = Path(path)
    data = parse_toml(path)
    try:
        return ClusterProfile.from_dict({"name": path.stem, **data})
    except UsageError as exc:
        raise UsageError(f"cluster profile {path}: {exc}") from None
