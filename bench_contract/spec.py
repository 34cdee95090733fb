"""The job spec: everything a backend needs to run one cell, and where to write what it measured.

A spec is a JSON object of plain values, readable by a person. The orchestrator writes one specs file per
array job at plan time, one object per line (JSON Lines): line i+1 is array task i, so planning 10,000 cells
writes two files, not 10,000. The array task reads its own line on the compute node. A single spec may
also stand alone in a .json file (the backend tests do that).
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench_contract import SCHEMA_VERSION
from bench_contract.atomic import publish
from bench_contract.config import (  # noqa: F401  (the configuration's vocabulary, read through the spec by many)
    DEVICES,
    DP_ENGINES,
    DP_SGD_ONLY,
    FIRST_STAGE,
    LR_SCHEDULES,
    MEASURED,
    OPTIMIZERS,
    PARALLELISMS,
    SAMPLINGS,
    TORCH_COMPILE_MODES,
    VARIANTS,
    CellConfig,
    ConfigError,
)
from bench_contract.model_registry import MODELS, names
from bench_contract.tuning import OUT_OF_THE_BOX, TunedExecution, unknown_knob
from bench_contract.use_cases import (  # noqa: F401  (the use cases' numbers, read through the spec by many)
    DATA_PARALLEL_USE_CASES,
    INFERENCE_USE_CASE,
    PER_SAMPLE_USE_CASES,
    SHARDED_USE_CASES,
    USE_CASES,
    UseCase,
)

FRAMEWORK_TITLES = {"jax": "JAX", "torch": "PyTorch"}  # the frameworks, as every table and sentence names them
# DP-SGD's clipping factor is min(1, C / (||g|| + CLIP_EPSILON)) (Opacus' formula), the same in both backends
CLIP_EPSILON = 1e-6
DEFAULT_DP_ENGINE = "torchfunc"
DEFAULT_PARALLELISM = "ddp"
SHARDED_PARALLELISM = "fsdp"
JAX_DP_ENGINE = "vmap"
# The precision policies whose training computes in a narrower dtype than its float32 master parameters.
MIXED = ("bf16", "fp16")


def opacus_grad_sample_mode(model: str, precision: str) -> str | None:
    """The grad_sample_mode Opacus runs `model` in at `precision` (its declaration's, bench_contract.model_registry);
    None where it runs it in neither."""
    declared = MODELS.get(model)
    return declared.opacus_mode(precision in MIXED) if declared else None


def sharding_refusal(use_case: int, model: str) -> str | None:
    """Why `--parallelism fsdp` cannot run `model` in `use_case`, in words; None where it can."""
    case, declared = USE_CASES.get(use_case), MODELS.get(model)
    if not (case and case.shards_state):
        return (f"sharded state is for data-parallel training (use case {' and '.join(map(str, SHARDED_USE_CASES))}), "
                f"not use case {use_case}")
    if not (declared and declared.shardable):
        return f"sharded state is implemented for {names(m for m in MODELS.values() if m.shardable)}, not {model}"
    return None


def opacus_refusal(model: str, precision: str) -> str | None:
    """Why Opacus cannot run `model` at `precision`, in words; None where it can."""
    if opacus_grad_sample_mode(model, precision) is not None:
        return None
    if (declared := MODELS.get(model)) and declared.opacus:  # in float32 only: the precision is the reason
        return (f"Opacus runs {precision} on {names(m for m in MODELS.values() if m.opacus_mode(mixed=True))} only "
                f"({model}'s in-place operations break its hooks, and its expanded weights fail under autocast)")
    return (f"{model} runs in neither of its modes (hooks, expanded weights): Opacus runs "
            f"{names(m for m in MODELS.values() if m.opacus)}")
# The order in which a paired job runs the two frameworks within its even trials; odd trials run them the other way
# round (pair_order), so that an effect of the position within a pair (a warmer CPU, caches, turbo) falls on both
# frameworks alike instead of being counted as one's, and the verdict can test for it (orchestrator.results.verdict).
PAIRED_ORDER = ("jax", "torch")


def pair_order(trial: int) -> tuple[str, str]:
    """The frameworks in the order a paired job runs them in `trial`: PAIRED_ORDER, reversed in odd trials."""
    return PAIRED_ORDER if trial % 2 == 0 else PAIRED_ORDER[::-1]


# The settings that can change what is measured: a comparison pools runs, as trials of one cell, only where they
# and the cell's key agree. The configuration's settings each declare whether they are (bench_contract.config); the
# system the cell ran on is one too. (Every JobSpec field is classified in tests/unit/test_comparison_settings.py.)
MEASURED_SETTINGS = (*MEASURED, "system")


class SpecError(ConfigError):
    """A job spec that cannot be run as written."""


@dataclass(frozen=True, kw_only=True)
class JobSpec(CellConfig, TunedExecution):
    """Everything a backend needs to run one cell: its place in the matrix, its configuration (CellConfig, each
    setting declared there), the trial it is, and where its results go."""

    # identity of the cell
    campaign: str
    cell_id: str
    pair_key: str  # the same for the JAX and the PyTorch cell that are compared with each other
    framework: str
    benchmark: str
    use_case: int
    model: str
    batch_size: int
    precision: str
    # this spec is trial `trial` of the configuration's `trials`, each in a fresh process
    trial: int = 0
    search_try: bool = False  # one try of a search: no energy or peak calibration, whose memory is not the cell's
    # XLA flags for this cell from the cluster profile (per model); the JAX backend adds them to XLA_FLAGS
    # before JAX starts, and the rows record the XLA_FLAGS that resulted.
    xla_flags: str = ""
    # A tuned cell's configuration, the knobs of its framework's search space that it changes from out of the box
    # (bench_contract.tuning; {} out of the box): chosen by the tuning, one framework's own, so it never splits a
    # pair. The backends read it through TunedExecution's methods; the rows record it in framework_options.
    tuned: dict[str, Any] = field(default_factory=dict)
    # The cluster profile's system (kind of node) the cell was submitted to, "" where the profile names none; the
    # rows record it beside the device model the backend detects.
    system: str = ""
    # where results go (absolute paths, written by the orchestrator)
    results_path: str = ""
    init_weights_path: str = ""
    # provenance known only on the submitting side
    git_commit: str = "not available: not given in the job spec"
    schema_version: int = SCHEMA_VERSION
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.schema_version != SCHEMA_VERSION:
            raise SpecError(
                f"spec schema version {self.schema_version} does not match this code's {SCHEMA_VERSION}; "
                "re-plan the campaign with the current code"
            )
        try:
            super().__post_init__()  # each setting's check and the rules between settings (bench_contract.config)
        except ConfigError as error:
            raise SpecError(str(error)) from None
        for rule in CELL_RULES:
            problem = rule(self)
            if problem:
                raise SpecError(problem)

    @property
    def case(self) -> UseCase:
        """The cell's use case, the object its code asks what to run (bench_contract.use_cases)."""
        return USE_CASES[self.use_case]

    def dp_engine_columns(self) -> tuple[str, str]:
        """(dp_engine, dp_engine_mode) as every row records them: the engine that computed the per-sample
        gradients and how; ("", "") outside the DP-SGD use cases."""
        if not self.case.per_sample:
            return "", ""
        if self.framework != "torch":
            return JAX_DP_ENGINE, "jax.vmap(jax.value_and_grad) of one example's loss"
        if (self.dp_engine or DEFAULT_DP_ENGINE) == "opacus":
            return "opacus", f"GradSampleModule, grad_sample_mode={opacus_grad_sample_mode(self.model, self.precision)}"
        return DEFAULT_DP_ENGINE, "torch.func.vmap(grad_and_value) over functional_call"

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=2, sort_keys=True) + "\n"

    def measured_settings(self) -> str:
        """The settings that can change what is measured, as sorted JSON: equal for the runs a comparison pools."""
        return json.dumps({name: getattr(self, name) for name in MEASURED_SETTINGS}, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "JobSpec":
        data = json.loads(text)
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise SpecError(f"unknown fields in job spec: {', '.join(unknown)}")
        return cls(**data)

    def to_line(self) -> str:
        """One line of a specs file: the same object as to_json, without the indentation."""
        return json.dumps(vars(self), sort_keys=True)  # a frozen dataclass's __dict__ holds exactly its fields

    @classmethod
    def read(cls, path: str | os.PathLike[str], index: int | None = None) -> "JobSpec":
        """The spec in a .json file, or the one on line index+1 of a specs file (JSON Lines)."""
        try:
            if index is None:
                return cls.from_json(Path(path).read_text())
            if index < 0:
                raise SpecError(f"array index {index} is negative")
            count = 0
            with open(path) as lines:
                for count, line in enumerate(lines, start=1):
                    if count == index + 1:
                        return cls.from_json(line)
            raise SpecError(f"specs file {path} has {count} lines, so no spec for array index {index}")
        except FileNotFoundError:
            raise SpecError(f"job spec {path} does not exist") from None


# The rules that tie the configuration to the cell's place in the matrix (its framework, use case, model, batch).
def known_use_case(spec: JobSpec) -> str | None:
    """First: the rules after it ask the use case's object (JobSpec.case)."""
    if isinstance(spec.use_case, int) and not isinstance(spec.use_case, bool) and spec.use_case in USE_CASES:
        return None
    return f"use_case must be one of {', '.join(map(str, USE_CASES))}, got {spec.use_case!r}"


def positive_batch(spec: JobSpec) -> str | None:
    if not isinstance(spec.batch_size, int) or isinstance(spec.batch_size, bool) or spec.batch_size < 1:
        return f"batch_size must be a positive integer, got {spec.batch_size!r}"
    return None


def search_starts_below_its_limit(spec: JobSpec) -> str | None:
    if spec.batch_search and spec.batch_search_limit < spec.batch_size:
        return f"--max-batch-limit {spec.batch_search_limit} is below the starting batch {spec.batch_size}"
    return None


def memory_limit_for_a_search(spec: JobSpec) -> str | None:
    """The cap bounds a search's tries: the search's spec carries it, and a GPU try's (for its allocator)."""
    if spec.memory_limit_bytes and not (spec.batch_search or spec.search_try):
        return "--memory-limit caps the tries of --find-max-batch; give --find-max-batch too"
    return None


def trial_within_trials(spec: JobSpec) -> str | None:
    if not isinstance(spec.trial, int) or not 0 <= spec.trial < spec.trials:
        return f"trial must be an integer from 0 to trials - 1 ({spec.trials - 1}), got {spec.trial!r}"
    return None


def paired_frameworks(spec: JobSpec) -> str | None:
    if spec.paired and spec.framework not in PAIRED_ORDER:
        return f"a paired run is one of {', '.join(PAIRED_ORDER)}, not {spec.framework!r}"
    return None


def poisson_for_dp_sgd(spec: JobSpec) -> str | None:
    if spec.sampling == "poisson" and not spec.case.per_sample:
        return (f"Poisson sampling is for DP-SGD (use cases {' and '.join(map(str, PER_SAMPLE_USE_CASES))}), "
                f"not use case {spec.use_case}")
    return None


def dp_engine_fits(spec: JobSpec) -> str | None:
    if not spec.dp_engine:
        return None
    if spec.framework != "torch" or not spec.case.per_sample:
        return (f"dp_engine is PyTorch's DP-SGD engine (use cases {' and '.join(map(str, PER_SAMPLE_USE_CASES))}); "
                f"leave it empty for {spec.framework} use case {spec.use_case}")
    if spec.dp_engine == "opacus" and (refusal := opacus_refusal(spec.model, spec.precision)):
        return f"dp_engine opacus: {refusal}"
    if spec.dp_engine == "opacus" and spec.compile_mode() is not None:
        return ("dp_engine opacus runs eagerly (its per-sample gradients come from hooks or expanded weights, not a "
                "graph torch.compile captures); plan it without torch_compile")
    return None


def parallelism_fits(spec: JobSpec) -> str | None:
    if spec.parallelism == SHARDED_PARALLELISM and (refusal := sharding_refusal(spec.use_case, spec.model)):
        return f"parallelism {SHARDED_PARALLELISM}: {refusal}"
    return None


def processes_for_data_parallel(spec: JobSpec) -> str | None:
    if spec.world_size > 1 and not spec.case.data_parallel:
        return (f"use case {spec.use_case} runs on one device; {spec.world_size} processes are for use cases "
                f"{' and '.join(map(str, DATA_PARALLEL_USE_CASES))}")
    if spec.batch_size % spec.world_size:
        return (f"batch_size {spec.batch_size} does not split evenly over {spec.world_size} processes; choose a "
                "multiple of nodes * tasks_per_node")
    return None


def tuned_knobs_known(spec: JobSpec) -> str | None:
    if spec.tuned and spec.tuning == OUT_OF_THE_BOX:
        return "an out-of-the-box run takes no tuned settings; its spec's tuned must be {}"
    return unknown_knob(spec.framework, spec.tuned)


CELL_RULES = (known_use_case, tuned_knobs_known, positive_batch, search_starts_below_its_limit, memory_limit_for_a_search,
              trial_within_trials, paired_frameworks, poisson_for_dp_sgd, dp_engine_fits, parallelism_fits,
              processes_for_data_parallel)


def write_text_atomic(path: str | os.PathLike[str], text: str) -> None:
    """Write a whole file or nothing: a reader never sees half of it."""
    publish(path, lambda tmp: tmp.write_text(text))
