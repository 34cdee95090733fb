"""The configuration of a cell: every setting declared once, with its type, default, bounds or choices, the use
cases that read it, its command-line option and its help. Validation and its one-sentence messages come from these
declarations; the orchestrator's command line is generated from them (orchestrator.cli.options), and the job spec a
backend reads is this configuration plus the cell's identity and paths (bench_contract.spec.JobSpec).

Dataclasses with field metadata, not pydantic: the contract runs in the frameworks' environments, site interpreters
and containers, whose imports `envs` checks, and it should need no library there beyond the standard one. A setting
is a field declared with `setting(default, help, ...)`; CellConfig's checks read each field's Setting, then the
rules that tie settings together (RULES), each a function returning a sentence or None.

To add a setting: declare it here, read it where a backend or the plan uses it, test it, and give it its line in the
docs. Its option, its help, its check, its place in the result rows' `settings` (when `measured`) and in a campaign's
configuration file all follow from the declaration.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

# The tuning's levels and budget (--tune), declared with its search spaces.
from bench_contract.tuning import MAX_TUNE, OUT_OF_THE_BOX, TRY, TUNING_LEVELS

# The readers of the training and of the DP-SGD settings, from the use cases' objects.
from bench_contract.use_cases import PER_SAMPLE_USE_CASES, TRAINING_USE_CASES

# The panels of the command line's help, one per kind of option (orchestrator.cli).
MATRIX = "Matrix: what runs (each axis a comma-separated list, or repeat the option)"
TRAINING = "Training"
PRIVACY = "DP-SGD (use cases 3 and 4)"
DATA = "Data"
SLURM = "Slurm: where and how the jobs run"
MEASUREMENT = "Measurement: repeats, trials, pairing, batch search, traces"

DEVICES = ("auto", "cpu", "gpu")
VARIANTS = ("full", "tiny")  # the published network, or the same layer types smaller for CPU tests
DATA_SOURCES = ("real", "synthetic")
TORCH_COMPILE_MODES = ("default", "reduce-overhead", "max-autotune")  # torch.compile's modes
# What both backends implement (bench_contract.run.optim): momentum is SGD with (optionally Nesterov) momentum;
# adamw is Adam with decoupled weight decay.
OPTIMIZERS = ("sgd", "momentum", "adam", "adamw")
LR_SCHEDULES = ("constant", "warmup_cosine")
# Which examples a training step takes (bench_contract.run.sampling): a shuffled fixed-size batch, or each example
# with probability B/N (Poisson, the sampler DP-SGD's privacy accounting assumes).
SAMPLINGS = ("shuffle", "poisson")
# PyTorch's DP-SGD engines: torch.func's vmap(grad) or Opacus's GradSampleModule (torch_backend.opacus_engine);
# JAX's per-sample gradients are always jax.vmap. "" for JAX and outside DP-SGD.
DP_ENGINES = ("torchfunc", "opacus")
# How data-parallel training lays the model's state over its processes: ddp keeps the parameters and optimizer state
# whole on every device (PyTorch's DistributedDataParallel, JAX's replicated arrays); fsdp shards them, all-gathers
# the parameters once a step for the forward and backward passes and reduce-scatters the gradients to the shards
# (PyTorch's FSDP2 fully_shard, JAX's shard_map step: jax_backend.parallel).
PARALLELISMS = ("ddp", "fsdp")
# `--trials auto`: a paired job runs this many trials before Stein's rule says how many the pair needs in all
# (bench_contract.sequential; with fewer, the rule's t quantile grows fast: 4.30 at 3 trials against 2.78 at 5).
FIRST_STAGE = 5

# The settings that say where a cell runs, not what it is: left out of its id (orchestrator.plan.matrix), so that a
# cell run in a pack is the same cell as in an array of its own, and ids planned before they existed stay the same.
PLACEMENT = ("pack", "pack_slots", "pack_nodes")

# Bounds that hold for every whole number unless its declaration says otherwise: the result columns (epochs,
# batch_size, trial and device_count are 32-bit integers).
INT32_MAX = 2**31 - 1
INT32_WHY = "a 32-bit integer, as the results hold it"
SEED_MAX = 2**32 - 1  # numpy's generators take no negative seed, and JAX's keys 32 bits
MAX_TRIALS = 1000


class ConfigError(ValueError):
    """A setting, or a combination of settings, that cannot run: one sentence that names the option."""


@dataclass(frozen=True)
class Setting:
    """What a field of CellConfig is, beyond its type and default."""

    help: str
    panel: str = TRAINING
    option: str = ""  # as the command line spells it; "" derives it from the field's name ("--learning-rate")
    aliases: tuple[str, ...] = ()  # further spellings of the option ("--timed-steps")
    choices: tuple[Any, ...] = ()
    pattern: str = ""  # a text (each text of a list or of a table) must match this regular expression whole
    pattern_why: str = ""  # what such a text is, said after one that does not match ("is not a Slurm time ...")
    minimum: float | None = None  # the smallest value allowed (inclusive)
    positive: bool = False  # above 0, not 0 itself
    below: float | None = None  # the value must stay below this (exclusive)
    maximum: float | None = None  # the largest value allowed (inclusive), with why
    maximum_why: str = ""
    note: str = ""  # said in parentheses after the option in a refusal ("0: the training batch")
    use_cases: tuple[int, ...] = ()  # the use cases that read it (inference refuses it if not one); () every one
    measured: bool = True  # can change what is measured: part of the rows' `settings`, so runs that differ in it
    #                        are never pooled as trials of one cell
    on_command_line: bool = True  # False: set by the plan (derived, or from a composite option such as --trials)
    parse: Callable[[str], Any] | None = None  # the option's text to the value, where the option takes text
    flag_value: Any = None  # an option that is a flag setting this value when given (--synthetic: "synthetic")
    shown_default: str = ""  # how the help names a default the plan derives ("the benchmark's")


def setting(default: Any, help: str, **declaration: Any) -> Any:
    """A field of a typed model checked by first_problem (CellConfig, the cluster profile): its default and its
    Setting (the keyword arguments)."""
    if isinstance(default, dict):
        return field(default_factory=lambda: dict(default), metadata={"setting": Setting(help, **declaration)})
    return field(default=default, metadata={"setting": Setting(help, **declaration)})


def option_of(name: str) -> str:
    """A field's option as the user types it: its declared one, else --name-with-dashes."""
    return declared(name).option or "--" + name.replace("_", "-")


def declared(name: str) -> Setting:
    return SETTINGS[name]


def parse_memory_size(text: str) -> int:
    """'6G' -> bytes: a number with a K, M, G or T suffix (powers of 1024, as Slurm's --mem)."""
    units = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
    value, unit = text.strip()[:-1], text.strip()[-1:].upper()
    try:
        size = float(value) * units[unit]
    except (KeyError, ValueError):
        raise ConfigError(f"memory size {text!r} is not a number with a K, M, G or T suffix, such as 6G") from None
    if not math.isfinite(size) or size >= 2**63:
        raise ConfigError(f"memory size {text!r} is not a finite size below 8E (a 64-bit count of bytes)")
    if size < 2**20:
        raise ConfigError(f"memory size {text!r} is below 1M: no framework starts in that")
    return int(size)


@dataclass(frozen=True, kw_only=True)
class CellConfig:
    """The settings of a cell, other than its place in the matrix (benchmark, use case, framework, model, batch
    size, precision): each declared once, with its check and its option."""

    device: str = setting("auto", "auto (GPU if the framework sees one), cpu or gpu.", panel=SLURM, choices=DEVICES)
    data_source: str = setting("real", "Use synthetic data instead of real data.", panel=DATA, option="--synthetic",
                               choices=DATA_SOURCES, flag_value="synthetic")
    data_dir: str | None = setting(None, "Folder with the benchmark's real data files.", panel=DATA, measured=False)
    synthetic_samples: int = setting(2048, "Size of the synthetic data set.", panel=DATA, minimum=10)
    epochs: int = setting(1, "Training epochs.", minimum=1, shown_default="the benchmark's")
    learning_rate: float = setting(0.01, "Learning rate.", positive=True, use_cases=TRAINING_USE_CASES)
    optimizer: str = setting("sgd", "Optimizer: sgd, momentum, adam, or adamw (decoupled weight decay); the same "
                                    "update in both frameworks (docs/measurement.md).", choices=OPTIMIZERS,
                             use_cases=TRAINING_USE_CASES)
    seed: int = setting(0, "Seed of the shared initial weights and of the batch order.", minimum=0, maximum=SEED_MAX,
                        maximum_why="the seeds numpy's generators and JAX take")
    warmup_steps: int = setting(5, "Steps run before timing starts.", minimum=0)
    momentum: float = setting(0.9, "Momentum of --optimizer momentum.", minimum=0, below=1,
                              use_cases=TRAINING_USE_CASES)
    nesterov: bool = setting(False, "Nesterov momentum (--optimizer momentum).", use_cases=TRAINING_USE_CASES)
    weight_decay: float = setting(0.0, "Weight decay: L2 added to the gradient (sgd, momentum, adam), decoupled "
                                       "(adamw).", minimum=0, use_cases=TRAINING_USE_CASES)
    lr_schedule: str = setting("constant", "constant, or warmup_cosine: linear warm-up, then a cosine to 0.",
                               choices=LR_SCHEDULES, use_cases=TRAINING_USE_CASES)
    lr_warmup_steps: int = setting(0, "warmup_cosine: steps of the linear warm-up.", minimum=0,
                                   use_cases=TRAINING_USE_CASES)
    lr_decay_steps: int = setting(1000, "warmup_cosine: steps of the cosine after the warm-up (then 0).", minimum=1,
                                  use_cases=TRAINING_USE_CASES)
    label_smoothing: float = setting(0.0, "Cross-entropy against targets smoothed towards the uniform distribution: "
                                          "(1-ε)·one-hot + ε/K over the K classes, as torch.nn.CrossEntropyLoss("
                                          "label_smoothing=ε) and optax.smooth_labels; 0 for none.", minimum=0,
                                     below=1, use_cases=TRAINING_USE_CASES)
    clip_norm: float = setting(1.0, "Clip each per-example gradient to this L2 norm C.", panel=PRIVACY,
                               positive=True, use_cases=PER_SAMPLE_USE_CASES)
    noise_multiplier: float = setting(1.0, "Gaussian noise of std sigma*C on the summed gradients; 0 for none (then "
                                           "JAX and PyTorch match step by step).", panel=PRIVACY, minimum=0,
                                      use_cases=PER_SAMPLE_USE_CASES)
    sampling: str = setting("shuffle", "poisson (each example joins a step's batch with probability B/N; what the "
                                       "privacy budget assumes) or shuffle (fixed-size batches: no guarantee).",
                            panel=PRIVACY, choices=SAMPLINGS, use_cases=PER_SAMPLE_USE_CASES,
                            shown_default="poisson for DP-SGD")
    delta: float | None = setting(None, "The delta of the privacy budget epsilon (default: the largest power of ten "
                                        "below 1/N, N the training samples).", panel=PRIVACY, positive=True,
                                  below=1, use_cases=PER_SAMPLE_USE_CASES, measured=False)
    target_epsilon: float | None = setting(None, "Derive the noise multiplier that spends this epsilon over the "
                                                 "cell's steps (instead of --noise-multiplier).", panel=PRIVACY,
                                           positive=True, use_cases=PER_SAMPLE_USE_CASES, measured=False)
    # The privacy budget the orchestrator's accountant computed at plan time, once for both frameworks
    # (orchestrator.plan.privacy): epsilon, delta, sampling_rate, steps, train_samples, accountant; {} for none.
    privacy: dict = setting({}, "The privacy budget computed at plan time.", on_command_line=False, measured=False)
    loop_batch_size: int = setting(0, "Batch at which vmap and the naive per-example loop are timed; 0 (the "
                                      "default): the training batch of one device.", panel=PRIVACY, minimum=0,
                                   note="0: the training batch", use_cases=PER_SAMPLE_USE_CASES)
    # Set per PyTorch cell by the matrix (--dp-engine is an axis of it); "" for JAX.
    dp_engine: str = setting("", "PyTorch's DP-SGD engine.", choices=("", *DP_ENGINES), on_command_line=False,
                             use_cases=PER_SAMPLE_USE_CASES)
    # Set per cell by the matrix (--parallelism is an axis of it).
    parallelism: str = setting("ddp", "Use case 2's state layout.", choices=PARALLELISMS, on_command_line=False)
    nodes: int = setting(1, "Nodes per cell (use cases 2 and 4); one process per device, started by srun.",
                         panel=SLURM, minimum=1)
    tasks_per_node: int = setting(1, "Processes (devices) per node (use cases 2 and 4).", panel=SLURM, minimum=1)
    model_variant: str = setting("full", "Model size: full, or tiny (fewer blocks, smaller inputs) for CPU tests.",
                                 panel=MATRIX, option="--variant", choices=VARIANTS)
    timed_steps: int = setting(50, "Inference and the per-sample vectorisation timing: time at least this many "
                                   "repeats of the step; training: the steps of the pipelined throughput.",
                               panel=MEASUREMENT, option="--min-iterations", aliases=("--timed-steps",), minimum=1)
    min_duration_s: float = setting(1.0, "With --min-iterations: keep timing until the timed steps add up to at "
                                         "least this many seconds.", panel=MEASUREMENT, option="--min-duration",
                                    minimum=0, maximum=86400.0, maximum_why="a day of timed steps")
    # Repeats: each cell runs as `trials` independent trials, each in a fresh process; `paired`: one job per
    # JAX/PyTorch pair, the two alternating on one node; `target_interval`: --trials auto's aim (0: fixed trials).
    # Set from --trials, --target-interval, --max-trials and --paired (orchestrator.cli.options.TRIALS).
    trials: int = setting(1, "Trials of each cell.", minimum=1, maximum=MAX_TRIALS,
                          maximum_why="so that a plan stays small", on_command_line=False, measured=False)
    paired: bool = setting(False, "One job per JAX/PyTorch cell pair: both run alternately on one node, JAX first "
                                  "in even trials, PyTorch first in odd ones.", panel=MEASUREMENT, measured=False)
    # Packed jobs (bench_contract.run.driver's pack mode): `pack` pairs share one allocation, each run a `srun
    # --exact` step with its own CPUs and GPU; `pack_slots` of them side by side. Not measured: the rows record the
    # neighbours instead (a pair whose sides ran beside different cells is flagged by the verdict).
    pack: int | None = setting(None, "With --paired: run this many cell pairs in one job (a pack), each "
                                     "framework's trial a `srun --exact` step of its own with its own CPUs and GPU, "
                                     "so that short cells share one allocation and one wait in the queue instead of "
                                     "a job each; 0: one job per pair. Default: the plan packs pairs whose estimated "
                                     "work is shorter than their start-up, about 2 hours of the estimate a pack "
                                     "within the time limit, and says so (plan.sizing.default_pack); else a job "
                                     "per pair.", panel=SLURM, minimum=0, maximum=MAX_TRIALS,
                               maximum_why="so that a pack ends within one time limit", measured=False)
    pack_slots: int = setting(1, "With --pack: pairs that run side by side in the pack's allocation, each in its own "
                                 "slot (a Slurm task: --cpus-per-task CPUs and one GPU where the job has GPUs); "
                                 "both frameworks of a pair run in the same slot, one after the other.",
                              panel=SLURM, minimum=1, maximum=64, maximum_why="one node's slots", measured=False)
    pack_nodes: int = setting(1, "With --pack-slots: the nodes the pack's slots are spread over, the same number on "
                                 "each (--pack-slots 16 --pack-nodes 2: 8 per node), for packs wider than one node.",
                              panel=SLURM, minimum=1, maximum=64, maximum_why="one node per slot", measured=False)
    target_interval: float = setting(0.0, "--trials auto's target interval.", minimum=0, below=1,
                                     on_command_line=False, measured=False)
    torch_compile: bool = setting(False, "PyTorch cells use torch.compile instead of eager (in training the whole "
                                         "step); short for --torch-modes compiled.", panel=MATRIX)
    torch_compile_mode: str = setting("default", "torch.compile's mode: default, reduce-overhead (CUDA graphs on a "
                                                 "GPU) or max-autotune.", panel=MATRIX, choices=TORCH_COMPILE_MODES)
    channels_last: bool = setting(False, "PyTorch CNNs run in channels_last memory format (inference).",
                                  panel=MATRIX)
    # Equal-effort tuning (bench_contract.tuning): the budget K, the same for both frameworks, and the cell's level
    # (set by the plan: out of the box, tuned, or one try of the search). The level is measured, so that rows of
    # different levels are never pooled or paired. The budget is the tuning's, not the measurement's: each tuned run
    # records it (framework_options), and the certificate refuses a row whose sides were tuned with different
    # budgets, or a side that pools runs of several (orchestrator.results.certificate).
    tune: int = setting(0, "Equal-effort tuning: each framework tries this many configurations of its search space "
                           "(out of the box among them, the rest drawn by a seeded generator), each measured with the "
                           "same stopping rule; the best of each then runs paired against the other's, beside out of "
                           "the box against out of the box (docs/fairness.md); 0 for none.", panel=MEASUREMENT,
                        minimum=0, maximum=MAX_TUNE, maximum_why="each try is a process of its own", measured=False)
    tuning: str = setting(OUT_OF_THE_BOX, "The cell's tuning level.", choices=TUNING_LEVELS, on_command_line=False)
    batch_search: bool = setting(False, "Instead of measuring, find the largest batch that fits in memory: "
                                        "doubling, then binary search, each try a fresh process on synthetic data; "
                                        "--batch-sizes gives the start (default 1).", panel=MEASUREMENT,
                                 option="--find-max-batch")
    batch_search_limit: int = setting(65536, "Largest batch size --find-max-batch tries.", panel=MEASUREMENT,
                                      option="--max-batch-limit", minimum=1)
    memory_limit_bytes: int = setting(0, "Artificial memory cap of each --find-max-batch try, e.g. 6G or 512M: on a "
                                         "GPU its device memory (the framework's allocator limit), on a CPU its "
                                         "address space (like ulimit -v).", panel=MEASUREMENT, option="--memory-limit",
                                      minimum=0, maximum=2**63 - 1, maximum_why="a 64-bit count of bytes",
                                      parse=parse_memory_size)
    trace_steps: int = setting(0, "After measuring, run this many more steps under the framework's profiler and keep "
                                  "the trace (Perfetto/TensorBoard) beside the results; 0 for none.",
                               panel=MEASUREMENT, minimum=0, measured=False)

    def __post_init__(self) -> None:
        problem = first_problem(self, option_of)
        if problem:
            raise ConfigError(problem)
        for rule in RULES:
            problem = rule(self)
            if problem:
                raise ConfigError(problem)

    @property
    def world_size(self) -> int:
        """How many processes run the cell together: one per device, nodes x tasks_per_node."""
        return self.nodes * self.tasks_per_node

    def settings(self) -> dict[str, Any]:
        """Every setting by name, as the spec holds it."""
        return {name: getattr(self, name) for name in SETTINGS}


def first_problem(declared_object: Any, spelled: Callable[[str], str]) -> str | None:
    """The first field of a dataclass declared with `setting` whose value its declaration refuses, in one sentence
    (`spelled` names a field as its user writes it: an option, a profile key); None when every value may be. Any
    typed model made of such fields (the cell's configuration, the cluster profile) is checked by this."""
    for item in dataclasses.fields(declared_object):
        declaration = item.metadata.get("setting")
        if declaration is not None:
            problem = check_value(declaration, str(item.type), spelled(item.name), getattr(declared_object, item.name))
            if problem:
                return problem
    return None


def check_value(declaration: Setting, kind: str, option: str, value: Any) -> str | None:
    """Why `value` cannot be the declared field whose type is `kind` and which its user calls `option`, in one
    sentence; None when it can. From its declaration alone."""
    if value is None:
        return None if kind.endswith("| None") else f"{option} needs a value"
    if declaration.choices:
        if value not in declaration.choices:
            shown = ", ".join(str(c) for c in declaration.choices if c != "")
            return f"unknown {option} {value!r}; choose from: {shown}"
        return None
    if kind.startswith("bool"):
        return None if isinstance(value, bool) else f"{option} is true or false, got {value!r}"
    if kind.startswith(("str", "tuple", "dict")):
        return text_problem(declaration, kind, option, value)
    if kind.startswith("int") and (isinstance(value, bool) or not isinstance(value, int)):
        return f"{option} must be a whole number, got {value!r}"
    if kind.startswith("float"):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return f"{option} must be a number, got {value!r}"
        if not math.isfinite(value):
            return f"{option} must be a finite number, got {value}"
    if not isinstance(value, (int, float)):
        return None
    return out_of_bounds(declaration, option, value)


def text_problem(declaration: Setting, kind: str, option: str, value: Any) -> str | None:
    """Why a text, a list of texts (tuple[str, ...]) or a table (dict[str, ...]) cannot be the declared field: its
    type, then each text against the declared pattern. A table's values are checked as its kind says, each named
    `option.key`, as TOML spells a key of a table; a value of a kind this module does not know (a nested model) is
    its model's to check."""
    if kind.startswith("dict"):
        if not isinstance(value, dict):
            return f"{option} must be a table, got {value!r}"
        inner = kind.partition(",")[2].removesuffix("]").strip()  # dict[str, tuple[str, ...]] -> tuple[str, ...]
        problems = (check_value(declaration, inner, f"{option}.{key}", item) for key, item in value.items())
        return next((problem for problem in problems if problem), None) if inner else None
    if kind.startswith("tuple") and not (isinstance(value, tuple) and all(isinstance(t, str) for t in value)):
        return f"{option} must be a list of strings, got {value!r}"
    if kind.startswith("str") and not isinstance(value, str):
        return f"{option} must be a string, got {value!r}"
    texts = value if isinstance(value, tuple) else (value,)
    wrong = next((text for text in texts if declaration.pattern and not re.fullmatch(declaration.pattern, text)), None)
    return None if wrong is None else f"{option} {wrong!r} {declaration.pattern_why}"


def out_of_bounds(declaration: Setting, option: str, value: float) -> str | None:
    """The sentence for a number outside its declared bounds (and, for a whole number, a 32-bit column's)."""
    wrong = bound_broken(declaration, value)
    if wrong is None:
        return None
    note = f" ({declaration.note})" if declaration.note else ""
    spellings = f" ({', '.join(declaration.aliases)})" if declaration.aliases else ""
    return f"{option}{spellings} {wrong}{note}, got {value}"


def bound_broken(declaration: Setting, value: float) -> str | None:
    """Which declared bound `value` breaks, in words ("must be positive"); None within them all."""
    low, below = declaration.minimum, declaration.below
    if declaration.positive and not (value > 0 and (below is None or value < below)):
        return "must be positive" if below is None else f"must be above 0 and below {number(below)}"
    if low is not None and below is not None and not low <= value < below:
        return f"must be at least {number(low)} and below {number(below)}"
    if low is not None and not value >= low:
        return "cannot be negative" if low == 0 else f"must be at least {number(low)}"
    if below is not None and not value < below:
        return f"must be below {number(below)}"
    most, why = declaration.maximum, declaration.maximum_why
    if most is None and isinstance(value, int):
        most, why = INT32_MAX, INT32_WHY
    if most is not None and value > most:
        return f"must be at most {number(most)} ({why})"
    return None


def number(value: float) -> str:
    """A bound as a person writes it: 1, 0.5, 4294967295 (never 4.29497e+09)."""
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def given(config: CellConfig, names: tuple[str, ...]) -> list[str]:
    """The options among `names` whose settings differ from their declared defaults."""
    defaults = {f.name: f.default for f in dataclasses.fields(CellConfig)}
    return [option_of(name) for name in names if getattr(config, name) != defaults[name]]


# The rules that tie settings together, in the order they are checked: each returns why the configuration cannot
# run, or None.
def momentum_options_need_momentum(config: CellConfig) -> str | None:
    options = given(config, ("momentum", "nesterov"))
    if options and config.optimizer != "momentum":
        return f"{' and '.join(options)} belong to --optimizer momentum, not {config.optimizer}"
    return None


def schedule_steps_need_a_schedule(config: CellConfig) -> str | None:
    options = given(config, ("lr_warmup_steps", "lr_decay_steps"))
    if options and config.lr_schedule == "constant":
        return f"{' and '.join(options)} shape a schedule; give --lr-schedule warmup_cosine too"
    return None


def target_needs_pairs(config: CellConfig) -> str | None:
    if config.target_interval and not (config.paired and config.trials >= FIRST_STAGE):
        return (f"a target interval needs paired trials, at least {FIRST_STAGE} of them (--trials auto pairs "
                "them)")
    return None


def packs_need_pairs(config: CellConfig) -> str | None:
    if config.pack and not config.paired:
        return "--pack runs cell pairs through the paired driver; it needs --paired"
    if config.pack_slots > 1 and not config.pack:
        return "--pack-slots places the pairs of a pack side by side; it needs --pack N"
    if config.pack_nodes > 1 and config.pack_slots % config.pack_nodes:
        return (f"--pack-nodes {config.pack_nodes} spreads the pack's slots evenly over its nodes; --pack-slots "
                f"{config.pack_slots} is not a multiple of it")
    if config.pack and config.world_size > 1:
        return "--pack runs one-process cells; it does not combine with --nodes or --tasks-per-node"
    return None


def one_process_to_trace(config: CellConfig) -> str | None:
    if config.trace_steps and config.world_size > 1:
        return "--trace-steps traces one process; it does not combine with --nodes or --tasks-per-node"
    if config.trace_steps and config.batch_search:
        return "--trace-steps and --find-max-batch do not combine: a search records no steps to trace"
    return None


def tuning_chooses_execution(config: CellConfig) -> str | None:
    """--tune draws PyTorch's execution (eager or torch.compile and its mode, channels_last) from its search space:
    a campaign names them as axes or tunes them, not both."""
    if not config.tune:
        return None
    if config.tune == 1:
        return "--tune 1 would try out of the box alone; give 2 or more configurations (or 0 for no tuning)"
    options = given(config, ("torch_compile", "torch_compile_mode", "channels_last", "batch_search"))
    if options:
        return (f"--tune chooses PyTorch's execution from its search space (bench_contract.tuning); "
                f"{' and '.join(options)} cannot be given with it")
    if config.device not in ("cpu", "gpu"):
        return "--tune draws from the search space of the device the cells run on; give --device cpu or --device gpu"
    if not config.paired and config.tuning != TRY:  # a try is measured once, on its own
        return "--tune runs the winners as paired trials; it needs --paired"
    return None


def processes_fit_a_column(config: CellConfig) -> str | None:
    if config.world_size > INT32_MAX:
        return (f"--nodes x --tasks-per-node must be at most {INT32_MAX} processes ({INT32_WHY}), got "
                f"{config.world_size}")
    return None


RULES: tuple[Callable[[CellConfig], str | None], ...] = (
    momentum_options_need_momentum, schedule_steps_need_a_schedule, target_needs_pairs, packs_need_pairs,
    one_process_to_trace, tuning_chooses_execution, processes_fit_a_column)

SETTINGS: dict[str, Setting] = {f.name: f.metadata["setting"] for f in dataclasses.fields(CellConfig)}
FIELD_TYPES: dict[str, str] = {f.name: str(f.type) for f in dataclasses.fields(CellConfig)}
# The settings that can change what is measured (the rows' `settings`, JobSpec.measured_settings), and those of
# them that only DP-SGD reads: without these, a DP-SGD cell's settings are those of the plain cell it costs more
# than (orchestrator.results.views.with_sgd_cost).
MEASURED = tuple(name for name, declaration in SETTINGS.items() if declaration.measured)
DP_SGD_ONLY = tuple(name for name in MEASURED if SETTINGS[name].use_cases == PER_SAMPLE_USE_CASES)
# The settings that are options of their own on the command line (and keys of a campaign file's [settings]).
ON_COMMAND_LINE = tuple(name for name, declaration in SETTINGS.items() if declaration.on_command_line)
