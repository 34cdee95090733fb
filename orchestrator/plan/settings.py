"""The settings every cell of a request shares (RunSettings, each option checked on its own), and the command
line's values turned into them: comma-separated lists, batch and memory sizes, the data source, the DP-SGD fields.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from functools import cached_property
from pathlib import Path

from bench_contract.config import INT32_MAX, MAX_TRIALS, PLACEMENT, CellConfig, ConfigError
from bench_contract.config import parse_memory_size as parse_memory_text
from bench_contract.spec import FIRST_STAGE, PER_SAMPLE_USE_CASES, SAMPLINGS, JobSpec
from orchestrator.errors import UsageError
from orchestrator.plan import catalog


# `--trials auto`: the most trials a pair may run (--max-trials), and the interval it aims at (--target-interval)
DEFAULT_MAX_TRIALS = 20
DEFAULT_TARGET_INTERVAL = 0.05


@dataclass(frozen=True, kw_only=True)
class RunSettings(CellConfig):
    """The configuration every cell of one request shares (bench_contract.config declares and checks each setting;
    a setting that cannot run is bad input here: UsageError, exit 2)."""

    def __post_init__(self) -> None:
        try:
            super().__post_init__()
        except ConfigError as error:
            raise UsageError(str(error)) from None

    @cached_property
    def as_dict(self) -> dict:
        # Shared by every cell of a request: computed once, not once per cell (10,000 cells plan in well under 1 s).
        return asdict(self)

    @cached_property
    def identity(self) -> dict:
        """Every setting but those that only place the cell (bench_contract.config.PLACEMENT): what a cell's id
        hashes (Cell._digest)."""
        return {name: value for name, value in self.as_dict.items() if name not in PLACEMENT}

    @cached_property
    def without_dp_engine(self) -> dict:
        """The identity's settings but the DP-SGD engine: what a DP-SGD cell's id hashes (Cell._digest)."""
        return {name: value for name, value in self.identity.items() if name != "dp_engine"}


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


def parse_memory_size(text: str) -> int:
    """'6G' -> bytes (bench_contract.config.parse_memory_size), refused as bad input."""
    try:
        return parse_memory_text(text)
    except ConfigError as error:
        raise UsageError(str(error)) from None


def privacy_settings(use_case: int, sampling: str | None, noise_multiplier: float | None, delta: float | None,
                     target_epsilon: float | None, batch_search: bool = False) -> dict:
    """RunSettings' sampling and DP-SGD fields from the command line, refusing what does not combine (RunSettings
    bounds each value). Poisson sampling is the default for DP-SGD (use cases 3 and 4) outside a batch search,
    which measures memory at fixed shapes; the budget options ask the accountant, which assumes Poisson sampling."""
    private = catalog.use_case(use_case).per_sample
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
    return {"sampling": sampling, "delta": delta, "target_epsilon": target_epsilon,
            "noise_multiplier": JobSpec.noise_multiplier if noise_multiplier is None else noise_multiplier}
