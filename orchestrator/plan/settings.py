"""The settings every cell of a request shares (RunSettings, each option checked on its own), and the command
line's values turned into them: comma-separated lists, batch and memory sizes, the data source, the DP-SGD fields.
"""

from __future__ import annotations

import math
import os
from dataclasses import asdict, dataclass, field
from functools import cached_property
from pathlib import Path

from bench_contract.spec import FIRST_STAGE, PER_SAMPLE_USE_CASES, SAMPLINGS, TORCH_COMPILE_MODES, JobSpec
from orchestrator.errors import UsageError
from orchestrator.plan import catalog


# Bounds of the numbers a request may hold, so that each fits where it goes: the result columns (epochs, batch_size,
# trial and device_count are 32-bit integers), the seeds numpy and JAX take, and a plan that stays small.
INT32_MAX = 2**31 - 1
SEED_MAX = 2**32 - 1  # numpy's generators take no negative seed, and JAX's keys 32 bits
MAX_TRIALS = 1000
# `--trials auto`: the most trials a pair may run (--max-trials), and the interval it aims at (--target-interval)
DEFAULT_MAX_TRIALS = 20
DEFAULT_TARGET_INTERVAL = 0.05
MAX_MIN_DURATION_S = 86400.0  # a day of timed steps: no Slurm job of one cell needs more
# Each whole-number option and its bound (from 0 or 1, as its own check below says, to INT32_MAX unless given).
INTEGER_OPTIONS = {"epochs": "--epochs", "warmup_steps": "--warmup-steps",
                   "synthetic_samples": "--synthetic-samples", "lr_warmup_steps": "--lr-warmup-steps",
                   "lr_decay_steps": "--lr-decay-steps", "loop_batch_size": "--loop-batch-size", "nodes": "--nodes",
                   "tasks_per_node": "--tasks-per-node", "timed_steps": "--min-iterations", "trials": "--trials",
                   "batch_search_limit": "--max-batch-limit", "trace_steps": "--trace-steps"}
INTEGER_BOUNDS = {"trials": (MAX_TRIALS, "so that a plan stays small")}
FLOAT_OPTIONS = {"learning_rate": "--learning-rate", "momentum": "--momentum", "weight_decay": "--weight-decay",
                 "clip_norm": "--clip-norm", "noise_multiplier": "--noise-multiplier", "delta": "--delta",
                 "target_epsilon": "--target-epsilon", "min_duration_s": "--min-duration"}


def check_bounds(settings: RunSettings) -> None:
    """Every number finite and within what its column, its library or the plan can hold: one sentence each."""
    for name, option in FLOAT_OPTIONS.items():
        value = getattr(settings, name)
        if value is not None and not math.isfinite(value):
            raise UsageError(f"{option} must be a finite number, got {value}")
    if settings.min_duration_s > MAX_MIN_DURATION_S:
        raise UsageError(f"--min-duration must be at most {MAX_MIN_DURATION_S:.0f} seconds (a day of timed steps), "
                         f"got {settings.min_duration_s}")
    for name, option in INTEGER_OPTIONS.items():
        value = getattr(settings, name)
        bound, why = INTEGER_BOUNDS.get(name, (INT32_MAX, "a 32-bit integer, as the results hold it"))
        if value > bound:
            raise UsageError(f"{option} must be at most {bound} ({why}), got {value}")
    if not 0 <= settings.seed <= SEED_MAX:
        raise UsageError(f"--seed must be a whole number from 0 to {SEED_MAX} (the seeds numpy's generators and JAX "
                         f"take), got {settings.seed}")
    if settings.world_size > INT32_MAX:
        raise UsageError(f"--nodes x --tasks-per-node must be at most {INT32_MAX} processes (a 32-bit integer, as the "
                         f"results hold it), got {settings.world_size}")
    if settings.memory_limit_bytes > 2**63 - 1:
        raise UsageError(f"--memory-limit must be below 8E bytes (a 64-bit integer), got {settings.memory_limit_bytes}")


@dataclass(frozen=True)
class RunSettings:
    """Settings shared by every cell of one request."""

    epochs: int
    learning_rate: float
    optimizer: str
    seed: int
    warmup_steps: int
    data_source: str  # "real" or "synthetic"
    data_dir: str | None
    synthetic_samples: int
    device: str
    # the optimizer's hyperparameters and the learning-rate schedule, with the job spec's defaults (one definition
    # of each, bench_contract.spec; bench_contract.run.optim)
    momentum: float = JobSpec.momentum
    nesterov: bool = JobSpec.nesterov
    weight_decay: float = JobSpec.weight_decay
    lr_schedule: str = JobSpec.lr_schedule
    lr_warmup_steps: int = JobSpec.lr_warmup_steps
    lr_decay_steps: int = JobSpec.lr_decay_steps
    # DP-SGD (use cases 3 and 4)
    clip_norm: float = JobSpec.clip_norm
    noise_multiplier: float = JobSpec.noise_multiplier
    loop_batch_size: int = JobSpec.loop_batch_size
    dp_engine: str = JobSpec.dp_engine  # PyTorch's DP-SGD engine, set per PyTorch cell by expand (--dp-engine)
    # which examples a step takes, and the privacy budget (privacy_settings; the budget is per cell, with_privacy)
    sampling: str = JobSpec.sampling
    delta: float | None = None
    target_epsilon: float | None = None
    privacy: dict = field(default_factory=dict)
    # data parallelism (use cases 2 and 4): one process per device; use case 2's state replicated or sharded, set
    # per cell by expand (--parallelism)
    parallelism: str = JobSpec.parallelism
    nodes: int = 1
    tasks_per_node: int = 1
    # model size and inference options (use case 5)
    model_variant: str = "full"
    timed_steps: int = 50  # at least this many timed repeats of one step (inference, vectorisation timing)
    torch_compile: bool = False  # PyTorch under torch.compile (in training the whole step), in this mode
    torch_compile_mode: str = JobSpec.torch_compile_mode
    channels_last: bool = False
    # ... and at least this many seconds of timed steps
    min_duration_s: float = 1.0
    # each cell runs as `trials` independent trials, each in a fresh process
    trials: int = 1
    # one job per JAX/PyTorch cell pair, the two alternating on one node (trials interleaved A B A B)
    paired: bool = False
    # `--trials auto`: trials until the speed-up's interval is within this fraction (bench_contract.sequential);
    # `trials` is then the most a pair may run. 0: exactly `trials` trials.
    target_interval: float = 0.0
    # the largest batch that fits (--find-max-batch), instead of measuring at given batch sizes
    batch_search: bool = False
    batch_search_limit: int = 65536
    memory_limit_bytes: int = 0
    # after measuring, this many steps under the framework's profiler, traced to a file next to the results
    trace_steps: int = 0

    @property
    def world_size(self) -> int:
        return self.nodes * self.tasks_per_node

    def __post_init__(self) -> None:
        check_bounds(self)
        if self.epochs < 1:
            raise UsageError(f"--epochs must be at least 1, got {self.epochs}")
        if not self.learning_rate > 0:
            raise UsageError(f"--learning-rate must be positive, got {self.learning_rate}")
        if self.warmup_steps < 0:
            raise UsageError(f"--warmup-steps cannot be negative, got {self.warmup_steps}")
        if self.synthetic_samples < 10:
            raise UsageError(f"--synthetic-samples must be at least 10, got {self.synthetic_samples}")
        if not self.clip_norm > 0:
            raise UsageError(f"--clip-norm must be positive, got {self.clip_norm}")
        if not self.noise_multiplier >= 0:
            raise UsageError(f"--noise-multiplier cannot be negative, got {self.noise_multiplier}")
        for option, value in (("--nodes", self.nodes), ("--tasks-per-node", self.tasks_per_node)):
            if value < 1:
                raise UsageError(f"{option} must be at least 1, got {value}")
        if self.loop_batch_size < 0:
            raise UsageError(f"--loop-batch-size cannot be negative (0: the training batch), got {self.loop_batch_size}")
        if self.timed_steps < 1:
            raise UsageError(f"--min-iterations (--timed-steps) must be at least 1, got {self.timed_steps}")
        if not self.min_duration_s >= 0:
            raise UsageError(f"--min-duration cannot be negative, got {self.min_duration_s}")
        if self.trials < 1:
            raise UsageError(f"--trials must be at least 1, got {self.trials}")
        if self.target_interval and not self.paired:
            raise UsageError("a target interval needs paired trials (--trials auto pairs them)")
        if self.trace_steps < 0:
            raise UsageError(f"--trace-steps cannot be negative, got {self.trace_steps}")
        if self.trace_steps and self.world_size > 1:
            raise UsageError("--trace-steps traces one process; it does not combine with --nodes or --tasks-per-node")
        if self.trace_steps and self.batch_search:
            raise UsageError("--trace-steps and --find-max-batch do not combine: a search records no steps to trace")
        if self.batch_search_limit < 1:
            raise UsageError(f"--max-batch-limit must be at least 1, got {self.batch_search_limit}")
        catalog.check_optimizer(self.optimizer)
        if self.torch_compile_mode not in TORCH_COMPILE_MODES:
            raise UsageError(f"unknown --torch-compile-mode {self.torch_compile_mode!r}; choose from: "
                             f"{', '.join(TORCH_COMPILE_MODES)}")
        catalog.check_variant(self.model_variant)
        if self.device not in catalog.DEVICES:
            raise UsageError(f"unknown device {self.device!r}; choose from: {', '.join(catalog.DEVICES)}")
        if self.memory_limit_bytes and not self.batch_search:
            raise UsageError("--memory-limit caps the tries of --find-max-batch; give --find-max-batch too")

    @cached_property
    def as_dict(self) -> dict:
        # Shared by every cell of a request: computed once, not once per cell (10,000 cells plan in well under 1 s).
        return asdict(self)

    @cached_property
    def hashed(self) -> dict:
        """What a cell's id hashes (Cell._digest): every setting, the default parallelism left out, so that the ids of
        cells planned before --parallelism existed stay the same."""
        if self.parallelism != JobSpec.parallelism:
            return self.as_dict
        return {name: value for name, value in self.as_dict.items() if name != "parallelism"}

    @cached_property
    def without_dp_engine(self) -> dict:
        """Every hashed setting but the DP-SGD engine: what a DP-SGD cell's id hashes (Cell._digest)."""
        return {name: value for name, value in self.hashed.items() if name != "dp_engine"}


def trial_settings(trials: str, paired: bool, target_interval: str | None, max_trials: int | None) -> dict:
    """--trials N, or --trials auto with its --target-interval and --max-trials, as RunSettings fields: `trials`
    (the most a cell runs), `paired` (auto pairs), `target_interval` (0 for a fixed number)."""
    if trials.strip().lower() != "auto":
        given = [option for option, value in (("--target-interval", target_interval), ("--max-trials", max_trials))
                 if value is not None]
        if given:
            verb = "go" if len(given) > 1 else "goes"
            raise UsageError(f"{' and '.join(given)} {verb} with --trials auto, not --trials {trials}")
        try:
            return {"trials": int(trials), "paired": paired, "target_interval": 0.0}
        except ValueError:
            raise UsageError(f"--trials takes a whole number or `auto`, got {trials!r}") from None
    most = DEFAULT_MAX_TRIALS if max_trials is None else max_trials
    if not FIRST_STAGE <= most <= MAX_TRIALS:
        raise UsageError(f"--max-trials must be from {FIRST_STAGE} (the trials before the rule decides) to "
                         f"{MAX_TRIALS}, got {most}")
    return {"trials": most, "paired": True, "target_interval": parse_fraction(target_interval)}


def parse_fraction(text: str | None) -> float:
    """--target-interval as typed ("5%", "0.05"; None: the default) as a fraction, refused outside (0, 1)."""
    if text is None:
        return DEFAULT_TARGET_INTERVAL
    try:
        value = float(text[:-1]) / 100 if text.strip().endswith("%") else float(text)
    except ValueError:
        raise UsageError(f"--target-interval takes a percentage such as 5% or a fraction such as 0.05, "
                         f"got {text!r}") from None
    if not 0 < value < 1:
        raise UsageError(f"--target-interval must be above 0% and below 100%, got {text}")
    return value


def data_source(synthetic: bool, batch_search: bool) -> str:
    """The data a request runs on, "synthetic" or "real". A batch search runs on synthetic data: memory depends on
    the shapes, not on the values."""
    return "synthetic" if synthetic or batch_search else "real"


def check_output_folder(path: Path, option: str) -> None:
    """A folder that planning writes into (--results-dir, --scripts-dir), refused in one sentence before anything
    is written: a file, a folder under a file, or one that cannot be written. A missing folder is made later."""
    existing = path
    while not os.path.lexists(existing) and existing.parent != existing:
        existing = existing.parent
    if existing == path and not path.is_dir():
        raise UsageError(f"{option} {path} is a file, not a folder; give a folder (a missing one is made)")
    if not existing.is_dir():
        raise UsageError(f"{option} {path} cannot be made: {existing} is a file, not a folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise UsageError(f"{option} {path} cannot be written: {existing} is not writable")


def parse_list(values: list[str] | None) -> list[str]:
    """Options that take a comma-separated list or repeat: ["a,b", "c"] -> ["a", "b", "c"], order kept, no repeats.
    An empty item ("32,,64", "jax,") is refused: it is a typo more often than a wish, and skipping it would hide
    which value was meant."""
    items: list[str] = []
    for value in values or []:
        for item in value.split(","):
            item = item.strip()
            if not item:
                raise UsageError(f"{value!r} has an empty item between its commas; remove the extra comma")
            if item not in items:
                items.append(item)
    return items


def parse_batch_sizes(values: list[str] | None) -> list[int]:
    sizes = []
    for item in parse_list(values):
        try:
            size = int(item)
        except ValueError:
            raise UsageError(f"batch size {item!r} is not a whole number; give positive integers such as 32,64") from None
        if not 1 <= size <= INT32_MAX:
            raise UsageError(f"batch size {size} must be a positive integer of at most {INT32_MAX} (a 32-bit integer, "
                             "as the results hold it)")
        sizes.append(size)
    return sizes


def parse_use_cases(values: list[str] | None) -> list[int]:
    """--use-case as a comma-separated list or repeated, like every matrix axis: ["3,5"] or ["3", "5"] -> [3, 5].
    Each one is checked here, so that a typo is one sentence before anything is planned."""
    cases = []
    for item in parse_list(values):
        try:
            number = int(item)
        except ValueError:
            raise UsageError(f"use case {item!r} is not a whole number; give use cases such as 3,5 "
                             "(see `python main.py list`)") from None
        catalog.use_case(number)  # an unknown number: the catalog's sentence, which lists the use cases
        cases.append(number)
    return cases


MEMORY_UNITS = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def parse_memory_size(text: str) -> int:
    """'6G' -> bytes: a number with a K, M, G or T suffix (powers of 1024, as Slurm's --mem)."""
    value, unit = text.strip()[:-1], text.strip()[-1:].upper()
    try:
        size = float(value) * MEMORY_UNITS[unit]
    except (KeyError, ValueError):
        raise UsageError(f"memory size {text!r} is not a number with a K, M, G or T suffix, such as 6G") from None
    if not math.isfinite(size) or size >= 2**63:
        raise UsageError(f"memory size {text!r} is not a finite size below 8E (a 64-bit count of bytes)")
    if size < 2**20:
        raise UsageError(f"memory size {text!r} is below 1M: no framework starts in that")
    return int(size)


def privacy_settings(use_case: int, sampling: str | None, noise_multiplier: float | None, delta: float | None,
                     target_epsilon: float | None, batch_search: bool = False) -> dict:
    """RunSettings' sampling and DP-SGD fields from the command line, its refusals in one sentence each.
    Poisson sampling is the default for DP-SGD (use cases 3 and 4) outside a batch search, which measures
    memory at fixed shapes; the budget options ask the accountant, which assumes Poisson sampling."""
    private = use_case in PER_SAMPLE_USE_CASES
    if sampling is not None and sampling not in SAMPLINGS:
        raise UsageError(f"unknown --sampling {sampling!r}; choose from: {', '.join(SAMPLINGS)}")
    given = [option for option, value in (("--delta", delta), ("--target-epsilon", target_epsilon)) if value is not None]
    if not private and (sampling or given):
        options = ", ".join(([f"--sampling {sampling}"] if sampling else []) + given)
        raise UsageError(f"use case {use_case} trains without DP-SGD, so {options} "
                         f"{'does' if len(given) + bool(sampling) == 1 else 'do'} not apply (use cases "
                         f"{' and '.join(map(str, PER_SAMPLE_USE_CASES))} do)")
    if sampling == "poisson" and batch_search:
        raise UsageError("--find-max-batch measures memory at fixed batch shapes; it does not combine with "
                         "--sampling poisson")
    sampling = sampling or ("poisson" if private and not batch_search else JobSpec.sampling)
    if given and sampling != "poisson":
        one = len(given) == 1
        raise UsageError(f"{' and '.join(given)} {'asks' if one else 'ask'} the privacy accountant, whose guarantee "
                         f"assumes Poisson sampling; {'it does' if one else 'they do'} not combine with --sampling "
                         f"{sampling}")
    if target_epsilon is not None and noise_multiplier is not None:
        raise UsageError("--target-epsilon derives the noise multiplier; give it or --noise-multiplier, not both")
    if delta is not None and not 0 < delta < 1:
        raise UsageError(f"--delta must be between 0 and 1, got {delta}")
    if target_epsilon is not None and not target_epsilon > 0:
        raise UsageError(f"--target-epsilon must be positive, got {target_epsilon}")
    return {"sampling": sampling, "delta": delta, "target_epsilon": target_epsilon,
            "noise_multiplier": JobSpec.noise_multiplier if noise_multiplier is None else noise_multiplier}
