"""The cluster profile: where and how jobs run on one site. A TOML file, with a built-in default.

Every key is checked: an unknown key or a bad value is refused with the key's name and what is expected,
because a typo in a profile otherwise surfaces hours later on a compute node.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field, fields, replace
from pathlib import Path

from orchestrator import PROJECT_ROOT
from orchestrator.errors import UsageError
from orchestrator.plan.script_options import owned_option

# Values that go into #SBATCH lines, which sbatch reads itself: only a plain character set is accepted.
# \Z, not $: $ also matches before a final line break, and a value with one would end its #SBATCH line early.
SLURM_NAME = re.compile(r"^[A-Za-z0-9_.,:@+-]+\Z")
TIME_LIMIT = re.compile(r"^(\d{1,5}-)?\d{1,3}(:\d{2}){0,2}\Z")
# The profile's name goes into a "# ..." comment line of every rendered script: one line of printable characters.
PROFILE_NAME_LENGTH = 100
# Slurm keeps a task's CPU count in 16 bits (65534 is the largest it takes); GPUs are held to the same bound.
MAX_PER_TASK = 65534
# Slurm's MaxArraySize may not exceed 4000001, so no array holds more tasks than that.
MAX_ARRAY_SIZE = 4000001
JAX_RECIPES = ("cpu", "cuda12", "cuda13")
# Signals a backend turns into a failure row that says how far it got (bench_contract.run.stop_signals.STOP_SIGNALS).
WARNING_SIGNALS = ("TERM", "USR1", "none")
SITE_KEYS = ("python", "setup_lines", "container", "runtime")  # the keys of an [envs.<framework>] table
# How a container runs: Apptainer (`apptainer exec --nv IMAGE ...`) or Slurm's pyxis plugin (`srun
# --container-image=IMAGE ...`), the two ways most sites run NGC's JAX and PyTorch images.
CONTAINER_RUNTIMES = ("apptainer", "pyxis")
CONTAINER_PYTHON = "python3"  # the interpreter on the image's PATH where the table names none (NGC images)
# A system's name: it becomes part of script names, job names and specs file names.
SYSTEM_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]*\Z")
# The keys a [systems.<name>] table may set; each but constraint and expect replaces the profile's own value.
SYSTEM_KEYS = ("partition", "constraint", "gpu_type", "gpus_per_task", "cpus_per_task", "mem", "time_limit", "expect")
# The keys whose values go into #SBATCH lines as they are, each checked by slurm_value_problem; the command line's
# Slurm options (OPTION_KEYS) set the same keys and are checked by the same function.
SLURM_VALUE_KEYS = ("partition", "account", "qos", "gpu_type", "time_limit", "mem", "gpus_per_task", "cpus_per_task",
                    "array_parallelism")
# The default command's Slurm options and the profile key each replaces.
OPTION_KEYS = {"--partition": "partition", "--account": "account", "--qos": "qos", "--gpus-per-task": "gpus_per_task",
               "--time": "time_limit", "--mem": "mem", "--array-parallelism": "array_parallelism"}
# The sbatch option each key becomes, where extra_sbatch could spell it too: an option given on the command line
# drops that spelling, which would otherwise come later in the script and win.
SBATCH_NAMES = {"partition": "partition", "account": "account", "qos": "qos", "gpus_per_task": "gpus-per-task",
                "time_limit": "time", "mem": "mem"}
XLA_FLAGS = re.compile(r"^--[A-Za-z0-9_]+(=[A-Za-z0-9_.,:+/-]*)?( +--[A-Za-z0-9_]+(=[A-Za-z0-9_.,:+/-]*)?)*\Z")


@dataclass(frozen=True)
class SiteEnvironment:
    """An interpreter the site already has ([envs.jax] python = "/path/to/env/bin/python"), used as it is instead of
    an environment built from the lock: a conda env, a module's Python, or frameworks installed without an index;
    or a container image the framework runs in ([envs.jax] container = "docker://nvcr.io/nvidia/jax:25.01-py3",
    runtime = "apptainer" or "pyxis"), whose `python` is the image's interpreter."""

    python: str
    # Shell lines run before that interpreter (module load ..., conda activate ...), after the profile's own.
    setup_lines: tuple[str, ...] = ()
    container: str | None = None  # an .sif file or a registry reference (docker://..., or pyxis's own form)
    runtime: str = "apptainer"  # CONTAINER_RUNTIMES

    def __post_init__(self) -> None:
        if self.container is None and not Path(self.python).expanduser().is_absolute():
            raise UsageError(f"profile table 'envs': python = {self.python!r} is not an absolute path to an "
                             "interpreter such as \"/opt/conda/envs/jax/bin/python\"")
        if self.container is not None and (not self.container.strip() or any(c.isspace() for c in self.container)):
            raise UsageError(f"profile table 'envs': container = {self.container!r} is not an image reference")
        if self.runtime not in CONTAINER_RUNTIMES:
            raise UsageError(f"profile table 'envs': runtime = {self.runtime!r}; choose from: "
                             f"{', '.join(CONTAINER_RUNTIMES)}")
        for line in self.setup_lines:
            if "\n" in line:
                raise UsageError("profile table 'envs': give one shell line per setup_lines item, without newlines")

    @property
    def kind(self) -> str:
        """What the rows say the environment was (environment_kind): "container: <image>" or "site: <python>"."""
        return f"container: {self.container}" if self.container else f"site: {self.python}"


@dataclass(frozen=True)
class System:
    """One kind of node of the site ([systems.a100] constraint = "a100"): where its jobs go and what they get, where
    that differs from the profile's own values (None: the profile's)."""

    partition: str | None = None
    constraint: str | None = None  # rendered as --constraint=<value>
    gpu_type: str | None = None  # typed GRES: --gres=gpu:<type>:<count>
    gpus_per_task: int | None = None
    cpus_per_task: int | None = None
    mem: str | None = None
    time_limit: str | None = None
    # A regular expression searched in the device_model its rows record ("A100" in "NVIDIA A100-SXM4-80GB"): a
    # row whose device does not match ran elsewhere (a constraint the site ignored), and is flagged.
    expect: str | None = None

    def __post_init__(self) -> None:
        if self.constraint is not None and not SLURM_NAME.match(self.constraint):
            raise UsageError(f"constraint = {self.constraint!r} may only hold letters, digits and _.,:@+-")
        if self.expect is not None:
            try:
                re.compile(self.expect)
            except re.error as exc:
                raise UsageError(f"expect = {self.expect!r} is not a regular expression ({exc})") from None

    def overrides(self) -> dict:
        """The profile values this system replaces (ClusterProfile checks them)."""
        names = ("partition", "gpu_type", "gpus_per_task", "cpus_per_task", "mem", "time_limit")
        return {name: getattr(self, name) for name in names if getattr(self, name) is not None}


# sbatch(1), --signal: "Due to the resolution of event handling by Slurm, the signal may be sent up to 60 seconds
# earlier than specified" (seen here: a warning asked for 30 s before a 3-minute limit came at 2 minutes).
SIGNAL_EARLY_S = 60


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


def whole_number(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def slurm_value_problem(key: str, value: object) -> str | None:
    """What is wrong with a value of one of SLURM_VALUE_KEYS, as words that follow the key's (or the option's) name
    and a colon; None when it is good, or not set."""
    if value is None:
        return None
    if key in ("partition", "account", "qos", "gpu_type"):
        return None if SLURM_NAME.match(value) else f"{value!r} may only hold letters, digits and _.,:@+-"
    if key == "time_limit":
        return None if TIME_LIMIT.match(value) else f"{value!r} is not a Slurm time such as 00:30:00 or 1-00:00:00"
    if key == "mem":
        return None if re.match(r"^\d{1,15}[KMGT]?\Z", value) else f"{value!r} is not a Slurm memory size such as 16G"
    if key == "array_parallelism":
        if whole_number(value) and 1 <= value <= MAX_ARRAY_SIZE:
            return None
        return f"{value!r} is not a whole number of array tasks to run at once from 1 to {MAX_ARRAY_SIZE}"
    if not whole_number(value) or value < 0:  # gpus_per_task, cpus_per_task
        return f"{value!r} is not a non-negative integer"
    if value > MAX_PER_TASK:
        return f"{value} is more than the {MAX_PER_TASK} per task that Slurm can count"
    return None


@dataclass(frozen=True)
class ClusterProfile:
    name: str = "default"
    partition: str | None = None  # None: the cluster's default partition
    account: str | None = None
    qos: str | None = None  # --qos; None: the association's default QOS
    time_limit: str = "00:30:00"
    # The built-in default runs on CPUs; a GPU site names its GPUs and its JAX build together (jax_recipe).
    gpus_per_task: int = 0
    gpu_type: str | None = None  # typed GRES (--gres=gpu:a100:1) where the site names its GPU types
    cpus_per_task: int = 2
    mem: str | None = None  # e.g. "16G"; None: the partition's default
    env_dir: str = ".envs"  # where the framework environments live; relative to the project root
    jax_recipe: str = "cpu"  # which JAX build the JAX environment gets: cpu, cuda12 or cuda13
    python: str = "python3"  # the interpreter that creates the environments
    # Free-form shell lines run before the environment is activated (module load ..., conda ...).
    # They are the one deliberate exception to quoting: they are the site's own shell, written by the user.
    setup_lines: tuple[str, ...] = ()
    extra_sbatch: tuple[str, ...] = ()  # e.g. ("--constraint=a100", "--qos=normal")
    # Most tasks per array job, when the site wants fewer than Slurm's MaxArraySize (which is always obeyed).
    max_array_size: int | None = None
    # Most tasks of one array that run at once (Slurm's %N throttle on --array); None: as many as Slurm lets run.
    array_parallelism: int | None = None
    # Slurm signals the task this many seconds before its time limit (`--signal=B:TERM@120`); the backend
    # then writes a failure row saying at which step it stopped, and exits. "none": no warning signal.
    warning_signal: str = "TERM"
    warning_seconds: int = 120
    # `--requeue`: Slurm may put a preempted or failed-node task back in the queue (where the site allows it);
    # false renders `--no-requeue`, and `python main.py resubmit` runs such a task again.
    requeue: bool = False
    # XLA flags per model ([xla_flags] table: vit_b_16 = "--xla_gpu_..."), added to XLA_FLAGS in that model's
    # JAX cells (and recorded on their rows); some sites need one for a model on a GPU generation.
    xla_flags: dict[str, str] = field(default_factory=dict)
    # Where `data fetch` looks first ([data_mirrors] table: mnist = ["https://mirror.site/mnist/"]), before the
    # published mirrors: sites mirror data sets, and compute clusters often reach only their own.
    data_mirrors: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # Site environments per framework ([envs.jax] python = "...", setup_lines = [...]): such a framework runs that
    # interpreter, and `envs` checks it instead of building one; its rows say "site: <python>", not "locked".
    envs: dict[str, SiteEnvironment] = field(default_factory=dict)
    # Kinds of nodes ([systems.<name>] tables, SYSTEM_KEYS): --systems a100,h100 runs the matrix on each; a campaign
    # without --systems runs on default_system, or on the profile's own values where that is not set.
    systems: dict[str, System] = field(default_factory=dict)
    default_system: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not 0 < len(self.name) <= PROFILE_NAME_LENGTH \
                or not self.name.isprintable():
            raise UsageError(f"profile key 'name': {self.name!r} is not a profile name, which is one line of 1 to "
                             f"{PROFILE_NAME_LENGTH} printable characters without line breaks or control characters "
                             "(without a name key, a profile is named after its file)")
        for key in SLURM_VALUE_KEYS:
            problem = slurm_value_problem(key, getattr(self, key))
            if problem:
                raise UsageError(f"profile key {key!r}: {problem}")
        if self.qos is not None and any(option.startswith("--qos=") for option in self.extra_sbatch):
            raise UsageError(f"profile key 'qos': {self.qos!r} and the --qos= in extra_sbatch both name the QOS; "
                             "keep one of them")
        if self.max_array_size is not None and (
                not isinstance(self.max_array_size, int) or isinstance(self.max_array_size, bool)
                or not 1 <= self.max_array_size <= MAX_ARRAY_SIZE):
            raise UsageError(f"profile key 'max_array_size' must be a whole number from 1 to {MAX_ARRAY_SIZE} (Slurm's "
                             f"largest MaxArraySize), got {self.max_array_size!r}")
        if self.cpus_per_task < 1:
            raise UsageError("profile key 'cpus_per_task' must be at least 1")
        if self.jax_recipe not in JAX_RECIPES:
            raise UsageError(f"profile key 'jax_recipe': {self.jax_recipe!r} is not one of {', '.join(JAX_RECIPES)}")
        if self.gpus_per_task and self.jax_recipe == "cpu":
            raise UsageError(f"profile asks Slurm for {self.gpus_per_task} GPU per task (gpus_per_task) but "
                             "jax_recipe = 'cpu' builds the CPU-only JAX, which would run on the CPU beside PyTorch on "
                             "the GPU: set jax_recipe = 'cuda12' or 'cuda13' for GPU nodes, or gpus_per_task = 0 to "
                             "run both frameworks on CPUs")
        if self.warning_signal not in WARNING_SIGNALS:
            raise UsageError(f"profile key 'warning_signal': {self.warning_signal!r} is not one of "
                             f"{', '.join(WARNING_SIGNALS)}")
        if not isinstance(self.warning_seconds, int) or isinstance(self.warning_seconds, bool) \
                or not 0 < self.warning_seconds < 65536:
            raise UsageError(f"profile key 'warning_seconds' must be a whole number of seconds from 1 to 65535, "
                             f"got {self.warning_seconds!r}")
        if self.warning_signal != "none" and self.time_limit and \
                self.warning_seconds >= (limit := slurm_seconds(self.time_limit)):
            # Slurm would send it at the task's start: every task would stop before its first step.
            raise UsageError(f"profile key 'warning_seconds': a warning {self.warning_seconds} s before a time limit "
                             f"of {self.time_limit} ({limit} s) would come as the task starts; make the warning shorter "
                             "than the time limit, or warning_signal = \"none\"")
        if not isinstance(self.requeue, bool):
            raise UsageError(f"profile key 'requeue' must be true or false, got {self.requeue!r}")
        for option in self.extra_sbatch:
            if not re.match(r"^--[a-z][a-z-]*(=[A-Za-z0-9_.,:@+%=/-]+)?\Z", option):
                raise UsageError(
                    f"profile key 'extra_sbatch': {option!r} is not a plain sbatch option such as --qos=normal"
                )
            owned = owned_option(option, {key for key in ("partition", "account", "mem") if getattr(self, key)})
            if owned:
                raise UsageError(f"profile key 'extra_sbatch': {option!r} sets --{owned[0]}, which every script "
                                 f"writes itself ({owned[1]}); remove it from extra_sbatch")
        from orchestrator.plan.catalog import MODELS

        for model, flags in self.xla_flags.items():
            if model not in MODELS:
                raise UsageError(f"profile table 'xla_flags': unknown model {model!r}; known: {', '.join(MODELS)}")
            if not isinstance(flags, str) or not XLA_FLAGS.match(flags):
                raise UsageError(f"profile table 'xla_flags', model {model!r}: {flags!r} is not a list of XLA flags "
                                 "such as \"--xla_gpu_enable_triton_gemm=false\" (--name or --name=value, spaces between)")
        from orchestrator.data.fetch import SOURCES

        for name, urls in self.data_mirrors.items():
            if name not in SOURCES:
                raise UsageError(f"profile table 'data_mirrors': {name!r} is not a data set `data fetch` knows "
                                 f"({', '.join(SOURCES)})")
            for url in urls:
                if not re.match(r"^(https?|file)://\S+\Z", url):
                    raise UsageError(f"profile table 'data_mirrors', {name}: {url!r} is not an http(s):// or file:// "
                                     "base URL")
        if self.default_system is not None and self.default_system not in self.systems:
            raise UsageError(f"profile key 'default_system': {self.default_system!r} is not a [systems.<name>] table "
                             f"of the profile; its systems: {', '.join(self.systems) or 'none'}")
        for line in self.setup_lines:
            if "\n" in line:
                raise UsageError("profile key 'setup_lines': give one shell line per list item, without newlines")
        from orchestrator.plan.catalog import FRAMEWORKS

        for framework in self.envs:
            if framework not in FRAMEWORKS:
                raise UsageError(f"profile table 'envs': {framework!r} is not a framework; known: "
                                 f"{', '.join(FRAMEWORKS)}")

    def earliest_warning_s(self) -> int:
        """How long before the time limit Slurm may send the warning signal at the earliest (0 without one)."""
        return self.warning_seconds + SIGNAL_EARLY_S if self.warning_signal != "none" else 0

    def gres(self, gpus: int) -> str:
        """The --gres value for this many GPUs: typed (gpu:a100:2) where the profile names a GPU type."""
        return f"gpu:{self.gpu_type}:{gpus}" if self.gpu_type else f"gpu:{gpus}"

    def array_spec(self, indices: str) -> str:
        """An --array value: the indices (0-9, or 1,3-5), throttled to array_parallelism tasks at once (%N)."""
        return f"{indices}%{self.array_parallelism}" if self.array_parallelism else indices

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
        the sbatch options. Checked again, so a system whose values do not fit together is refused by name."""
        if not name:
            return self
        system = self.systems[name]
        extra = self.extra_sbatch + ((f"--constraint={system.constraint}",) if system.constraint else ())
        try:
            return replace(self, **system.overrides(), extra_sbatch=extra, systems={}, default_system=None)
        except UsageError as exc:
            raise UsageError(f"profile table 'systems.{name}': {exc}") from None

    def with_options(self, options: dict[str, object]) -> ClusterProfile:
        """The profile with the command line's Slurm options (OPTION_KEYS; None: not given) in place of its own and
        its systems' values, and without extra_sbatch's spelling of the same sbatch option. Each value is checked
        as its profile key is, the message naming the option."""
        given = {OPTION_KEYS[option]: value for option, value in options.items() if value is not None}
        if not given:
            return self
        for option, value in options.items():
            problem = slurm_value_problem(OPTION_KEYS[option], value)
            if problem:
                raise UsageError(f"{option}: {problem}")
        if given.get("gpus_per_task") and self.jax_recipe == "cpu":
            raise UsageError(f"--gpus-per-task {given['gpus_per_task']} asks Slurm for GPUs, but profile {self.name!r} "
                             "has jax_recipe = 'cpu', the CPU-only JAX, which would run on the CPU beside PyTorch on "
                             "the GPU: give a --profile with jax_recipe = 'cuda12' or 'cuda13'")
        dropped = tuple(f"--{SBATCH_NAMES[key]}" for key in given if key in SBATCH_NAMES)
        extra = tuple(option for option in self.extra_sbatch if option.partition("=")[0] not in dropped)
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


def site_environments(table: object) -> dict[str, SiteEnvironment]:
    """The [envs] table: one [envs.<framework>] table each, with python (required without a container),
    setup_lines, and container with its runtime."""
    if not isinstance(table, dict) or not all(isinstance(v, dict) for v in table.values()):
        raise UsageError("profile key 'envs' must hold one table per framework, such as [envs.jax] python = \"...\"")
    environments = {}
    for framework, keys in table.items():
        unknown = sorted(set(keys) - set(SITE_KEYS))
        if unknown:
            raise UsageError(f"profile table 'envs.{framework}' has unknown keys {', '.join(unknown)}; known keys: "
                             f"{', '.join(SITE_KEYS)}")
        container = keys.get("container")
        python = keys.get("python", CONTAINER_PYTHON if container is not None else None)
        if not isinstance(python, str):
            raise UsageError(f"profile table 'envs.{framework}' needs python = \"/path/to/bin/python\", the "
                             "interpreter that has the framework, or container = \"<image>\"")
        for key in ("container", "runtime"):
            if key in keys and not isinstance(keys[key], str):
                raise UsageError(f"profile table 'envs.{framework}': {key} must be a string, got {keys[key]!r}")
        if "runtime" in keys and container is None:
            raise UsageError(f"profile table 'envs.{framework}': runtime goes with container = \"<image>\"")
        lines = keys.get("setup_lines", [])
        if not isinstance(lines, list) or not all(isinstance(line, str) for line in lines):
            raise UsageError(f"profile table 'envs.{framework}': setup_lines must be a list of strings")
        environments[framework] = SiteEnvironment(python, tuple(lines), container, keys.get("runtime", "apptainer"))
    return environments


def expected_devices(recorded: dict) -> dict[str, str]:
    """System -> its `expect` pattern, from the profile a manifest recorded (asdict of ClusterProfile); only the
    systems that give one."""
    return {name: values["expect"] for name, values in recorded.get("systems", {}).items() if values.get("expect")}


def device_matches(pattern: str, device_model: str | None) -> bool:
    """Whether a row's device_model is what its system expects (the pattern is searched, not anchored)."""
    return re.search(pattern, device_model or "") is not None


def system_tables(table: object) -> dict[str, System]:
    """The [systems] table: one [systems.<name>] table each, with SYSTEM_KEYS."""
    if not isinstance(table, dict) or not all(isinstance(v, dict) for v in table.values()):
        raise UsageError("profile key 'systems' must hold one table per system, such as [systems.a100] "
                         "constraint = \"a100\"")
    systems = {}
    for name, keys in table.items():
        where = f"profile table 'systems.{name}'"
        if not SYSTEM_NAME.match(name):
            raise UsageError(f"{where}: a system's name may only hold lower-case letters, digits, _ and -")
        unknown = sorted(set(keys) - set(SYSTEM_KEYS))
        if unknown:
            raise UsageError(f"{where} has unknown keys {', '.join(unknown)}; known keys: {', '.join(SYSTEM_KEYS)}")
        for key, value in keys.items():
            wanted = int if key in ("gpus_per_task", "cpus_per_task") else str
            if not isinstance(value, wanted) or isinstance(value, bool):
                kind = "an integer" if wanted is int else "a string"
                raise UsageError(f"{where}: {key} must be {kind}, got {value!r}")
        try:
            systems[name] = System(**keys)
        except UsageError as exc:
            raise UsageError(f"{where}: {exc}") from None
    return systems


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
    if path is None:
        return ClusterProfile()
    path = Path(path)
    data = parse_toml(path)
    known = {f.name: f for f in fields(ClusterProfile)}
    unknown = sorted(set(data) - set(known))
    if unknown:
        raise UsageError(f"cluster profile {path} has unknown keys {', '.join(unknown)}; known keys: {', '.join(known)}")
    values = {}
    for key, value in data.items():
        if key in ("setup_lines", "extra_sbatch"):
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise UsageError(f"profile key {key!r} must be a list of strings")
            value = tuple(value)
        elif key == "xla_flags":
            if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
                raise UsageError("profile key 'xla_flags' must be a table of model = \"flags\" strings")
        elif key == "data_mirrors":
            if not isinstance(value, dict) or not all(
                    isinstance(v, list) and all(isinstance(u, str) for u in v) for v in value.values()):
                raise UsageError("profile key 'data_mirrors' must be a table of data set = [\"base URL\", ...] lists")
            value = {name: tuple(urls) for name, urls in value.items()}
        elif key == "envs":
            value = site_environments(value)
        elif key == "systems":
            value = system_tables(value)
        elif key in ("gpus_per_task", "cpus_per_task", "max_array_size", "array_parallelism", "warning_seconds"):
            if not isinstance(value, int) or isinstance(value, bool):
                raise UsageError(f"profile key {key!r} must be an integer, got {value!r}")
        elif key == "requeue":
            if not isinstance(value, bool):
                raise UsageError(f"profile key 'requeue' must be true or false, got {value!r}")
        elif not isinstance(value, str):
            raise UsageError(f"profile key {key!r} must be a string, got {value!r}")
        values[key] = value
    values.setdefault("name", path.stem)
    profile = ClusterProfile(**values)
    for name in profile.systems:  # each system's values checked with the profile's, before anything is planned
        profile.for_system(name)
    return profile
