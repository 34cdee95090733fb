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

FRAMEWORK_TITLES = {"jax": "JAX", "torch": "PyTorch"}  # the frameworks, as every table and sentence names them
DEVICES = ("auto", "cpu", "gpu")
VARIANTS = ("full", "tiny")  # the published network, or the same layer types smaller for CPU tests
INFERENCE_USE_CASE = 5
TORCH_COMPILE_MODES = ("default", "reduce-overhead", "max-autotune")  # torch.compile's modes (torch_compile_mode)
# What both backends implement (bench_contract.run.optim); the orchestrator's catalog offers the same lists.
# momentum is SGD with (optionally Nesterov) momentum; adamw is Adam with decoupled weight decay.
OPTIMIZERS = ("sgd", "momentum", "adam", "adamw")
LR_SCHEDULES = ("constant", "warmup_cosine")
# DP-SGD's clipping factor is min(1, C / (||g|| + CLIP_EPSILON)) (Opacus' formula), the same in both backends
CLIP_EPSILON = 1e-6
DATA_SOURCES = ("real", "synthetic")
# PyTorch's DP-SGD engines (use cases 3 and 4, JobSpec.dp_engine): torch.func's vmap(grad) or Opacus's
# GradSampleModule (torch_backend.opacus_engine); JAX's per-sample gradients are always jax.vmap.
DP_ENGINES = ("torchfunc", "opacus")
DEFAULT_DP_ENGINE = "torchfunc"
# How data-parallel training (use case 2, JobSpec.parallelism) lays the model's state over its processes: ddp keeps
# the parameters and optimizer state whole on every device (PyTorch's DistributedDataParallel, JAX's replicated
# arrays); fsdp shards them across the devices, all-gathers the parameters once a step for the forward and backward
# passes and reduce-scatters the gradients to the shards (PyTorch's FSDP2 fully_shard, JAX's shard_map step:
# jax_backend.parallel).
PARALLELISMS = ("ddp", "fsdp")
DEFAULT_PARALLELISM = "ddp"
SHARDED_PARALLELISM = "fsdp"
SHARDED_USE_CASES = (2,)
SHARDED_MODELS = ("gpt",)  # the models fsdp is implemented and tested for in both backends
JAX_DP_ENGINE = "vmap"
# Opacus's grad_sample_mode per model it runs: expanded weights (ew, the faster of the two where both run: 12 against
# 17 ms for the tiny CNN at batch 64 here), else hooks. The ResNets' in-place residual add breaks the hooks; the ViT's
# class token (expand) breaks expanded weights; the text transformer and the GCN run in neither (docs/measurement.md).
# The precision policies whose training computes in a narrower dtype than its float32 master parameters.
MIXED = ("bf16", "fp16")
OPACUS_GRAD_SAMPLE_MODES = {"mlp": "ew", "cnn": "ew", "resnet18_gn": "ew", "resnet50_gn": "ew", "vit_b_16": "hooks"}
# Under mixed precision (bf16) Opacus runs hooks: its expanded weights multiply, in their backward (which autocast does
# not reach), the bfloat16 gradient by the float32 weight, and fail ("expected m1 and m2 to have the same dtype").
# The ResNets' in-place operations break the hooks, so Opacus runs bf16 on these models only.
OPACUS_MIXED_PRECISION_MODELS = ("mlp", "cnn", "vit_b_16")


def opacus_grad_sample_mode(model: str, precision: str) -> str | None:
    """The grad_sample_mode Opacus runs `model` in at `precision`; None where it runs it in neither."""
    if precision in MIXED:
        return "hooks" if model in OPACUS_MIXED_PRECISION_MODELS else None
    return OPACUS_GRAD_SAMPLE_MODES.get(model)


def sharding_refusal(use_case: int, model: str) -> str | None:
    """Why `--parallelism fsdp` cannot run `model` in `use_case`, in words; None where it can."""
    if use_case not in SHARDED_USE_CASES:
        return (f"sharded state is for data-parallel training (use case {' and '.join(map(str, SHARDED_USE_CASES))}), "
                f"not use case {use_case}")
    if model not in SHARDED_MODELS:
        return f"sharded state is implemented for {', '.join(SHARDED_MODELS)}, not {model}"
    return None


def opacus_refusal(model: str, precision: str) -> str | None:
    """Why Opacus cannot run `model` at `precision`, in words; None where it can."""
    if opacus_grad_sample_mode(model, precision) is not None:
        return None
    if model in OPACUS_GRAD_SAMPLE_MODES:
        return (f"Opacus runs {precision} on {', '.join(OPACUS_MIXED_PRECISION_MODELS)} only ({model}'s in-place "
                "operations break its hooks, and its expanded weights fail under autocast)")
    return (f"{model} runs in neither of its modes (hooks, expanded weights): Opacus runs "
            f"{', '.join(OPACUS_GRAD_SAMPLE_MODES)}")
DATA_PARALLEL_USE_CASES = (2, 4)  # several processes, one per device, each on its shard of the global batch
PER_SAMPLE_USE_CASES = (3, 4)  # DP-SGD: per-example gradients, clipped, summed, noised
# Which examples a training step takes (bench_contract.run.sampling): a shuffled fixed-size batch, or each example
# with probability B/N (Poisson, the sampler DP-SGD's privacy accounting assumes; use cases 3 and 4 only).
SAMPLINGS = ("shuffle", "poisson")
# The order in which a paired job runs the two frameworks within its even trials; odd trials run them the other way
# round (pair_order), so that an effect of the position within a pair (a warmer CPU, caches, turbo) falls on both
# frameworks alike instead of being counted as one's, and the verdict can test for it (orchestrator.results.verdict).
PAIRED_ORDER = ("jax", "torch")


def pair_order(trial: int) -> tuple[str, str]:
    """The frameworks in the order a paired job runs them in `trial`: PAIRED_ORDER, reversed in odd trials."""
    return PAIRED_ORDER if trial % 2 == 0 else PAIRED_ORDER[::-1]


# `--trials auto`: a paired job runs this many trials before Stein's rule says how many the pair needs in all
# (bench_contract.sequential; with fewer, the rule's t quantile grows fast: 4.30 at 3 trials against 2.78 at 5).
FIRST_STAGE = 5


# Every JobSpec field, in one of four classes (tests/unit/test_comparison_settings.py fails on a new field until
# it is placed here). A comparison pools runs, as trials of one cell, only where the key and the measured
# settings agree; bookkeeping differs between runs of the same thing.
COMPARISON_KEY = ("benchmark", "use_case", "model", "batch_size", "precision")  # columns of their own
MEASURED_SETTINGS = (
    "device", "data_source", "epochs", "optimizer", "learning_rate", "seed", "warmup_steps", "synthetic_samples",
    "clip_norm", "noise_multiplier", "loop_batch_size", "nodes", "tasks_per_node", "model_variant", "timed_steps",
    "min_duration_s", "torch_compile", "torch_compile_mode", "channels_last", "batch_search", "batch_search_limit", "memory_limit_bytes",
    "momentum", "nesterov", "weight_decay", "lr_schedule", "lr_warmup_steps", "lr_decay_steps",
    "sampling",
    "system",  # the kind of node asked for (the profile's systems): runs on two systems are not trials of one cell
    "dp_engine",  # the JAX side has none ("") and is compared with each PyTorch engine (orchestrator.results.compare)
    "parallelism",  # replicated (ddp) or sharded (fsdp) state in use case 2: a different program, not a trial
)
# The measured settings only DP-SGD reads (use cases 3 and 4): without them, a DP-SGD cell's settings are those of
# the plain SGD cell it costs more than (orchestrator.results.dp_sgd_cost).
DP_SGD_SETTINGS = ("clip_norm", "noise_multiplier", "loop_batch_size", "sampling", "dp_engine")
# A framework's own tuning knobs: they belong to one side (only JAX reads XLA_FLAGS), so they never split a JAX
# run from its PyTorch pair. The rows record them as run (`xla_flags`), the tables show them beside the row, and a
# row that pools runs of one side made with different values is not comparable (orchestrator.results.certificate).
FRAMEWORK_TUNING = ("xla_flags",)
BOOKKEEPING = (
    "campaign", "cell_id", "pair_key", "framework",  # which cell and side: the comparison puts the sides together
    "trial", "trials", "paired",  # repeats of the same settings; pairing is resampled as such by the comparison
    "target_interval",  # how many trials a sequential pair runs, not what each measures (bench_contract.sequential)
    "search_try", "trace_steps",  # a try is internal to a search; traced steps run after the measurement
    "data_dir",  # where the same data set lies on this cluster; data_source says real or synthetic
    "results_path", "init_weights_path", "git_commit", "schema_version", "extra",
    "privacy",  # derived at plan time from the measured settings (sampling rate, noise, steps) and delta
    "delta", "target_epsilon",  # what the budget was asked for: they change the privacy claim, not the measurement
)


class SpecError(ValueError):
    """A job spec that cannot be run as written."""


@dataclass(frozen=True)
class JobSpec:
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
    # how to run it
    device: str = "auto"
    data_source: str = "real"
    data_dir: str | None = None
    epochs: int = 1
    optimizer: str = "sgd"
    learning_rate: float = 0.01
    seed: int = 0
    warmup_steps: int = 5  # steps run before timing starts (not the learning-rate warm-up)
    # The optimizer's hyperparameters (bench_contract.run.optim): momentum and nesterov for "momentum";
    # weight_decay is L2 added to the gradient for sgd, momentum and adam, decoupled for adamw.
    momentum: float = 0.9
    nesterov: bool = False
    weight_decay: float = 0.0
    # The learning-rate schedule: constant, or a linear warm-up over lr_warmup_steps then a cosine to 0 over
    # lr_decay_steps (bench_contract.run.optim.learning_rate_at)
    lr_schedule: str = "constant"
    lr_warmup_steps: int = 0
    lr_decay_steps: int = 1000
    synthetic_samples: int = 2048
    # DP-SGD (use cases 3 and 4): each per-example gradient is clipped to L2 norm clip_norm, and Gaussian noise
    # of standard deviation noise_multiplier * clip_norm is added to their sum.
    clip_norm: float = 1.0
    noise_multiplier: float = 1.0
    sampling: str = "shuffle"  # one of SAMPLINGS; the orchestrator plans "poisson" for use cases 3 and 4
    # The privacy budget the orchestrator's accountant computed at plan time, once for both frameworks
    # (orchestrator.plan.privacy): epsilon, delta, sampling_rate, steps, train_samples, accountant; {} for none.
    privacy: dict[str, Any] = field(default_factory=dict)
    # The delta the budget is computed at (None: 1/N), and the epsilon noise_multiplier was derived from (None:
    # noise_multiplier was given)
    delta: float | None = None
    target_epsilon: float | None = None
    # The batch at which the vectorised per-sample gradients and the naive per-example loop are timed; 0: the
    # training batch of one device (bench_contract.run.training.vectorization_batch_size)
    loop_batch_size: int = 0
    # PyTorch's DP-SGD engine (DP_ENGINES) in use cases 3 and 4; "" for JAX (always jax.vmap) and elsewhere.
    dp_engine: str = ""
    # Data parallelism (use cases 2 and 4): one process per device, nodes * tasks_per_node processes; in use case 2
    # the state replicated (ddp) or sharded (fsdp) over them (PARALLELISMS).
    parallelism: str = DEFAULT_PARALLELISM
    nodes: int = 1
    tasks_per_node: int = 1
    model_variant: str = "full"  # "full", or "tiny" for CPU tests (bench_contract.models.vision)
    # Use cases that repeat one step (inference, the per-sample vectorisation timing) time at least
    # timed_steps steps and keep going until the timed steps add up to at least min_duration_s seconds.
    timed_steps: int = 50
    min_duration_s: float = 1.0
    # Repeats: this spec is trial `trial` of `trials` independent runs of the cell, each in a fresh process;
    # `paired`: run by a paired job, JAX and PyTorch alternating on one node (PAIRED_ORDER within a trial).
    trials: int = 1
    trial: int = 0
    paired: bool = False
    # `--trials auto`: above 0, a paired job runs FIRST_STAGE trials, then as many as Stein's rule needs for a
    # speed-up interval within this fraction (0.05: 5%), at most `trials` (bench_contract.sequential).
    target_interval: float = 0.0
    # PyTorch options: torch.compile instead of eager (every use case; in training the whole step), in which
    # mode; channels_last memory format for CNNs (inference)
    torch_compile: bool = False
    torch_compile_mode: str = "default"
    channels_last: bool = False
    # The largest batch that fits (bench_contract.run.batch_search): from batch_size, doubling then bisecting up to
    # batch_search_limit, each try a fresh process, capped at memory_limit_bytes (0: no cap): on a GPU its device
    # memory (the try's spec carries the cap; its backend sets the allocator's limit), on a CPU its address space.
    batch_search: bool = False
    batch_search_limit: int = 65536
    memory_limit_bytes: int = 0
    search_try: bool = False  # one try of a search: no energy or peak calibration, whose memory is not the cell's
    # After measuring, this many more steps under the framework's profiler, traced to a file (bench_contract.measure.tracing).
    trace_steps: int = 0
    # XLA flags for this cell from the cluster profile (per model); the JAX backend adds them to XLA_FLAGS
    # before JAX starts, and the rows record the XLA_FLAGS that resulted.
    xla_flags: str = ""
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
        if self.device not in DEVICES:
            raise SpecError(f"device {self.device!r} is not one of {', '.join(DEVICES)}")
        if self.data_source not in DATA_SOURCES:
            raise SpecError(f"data_source {self.data_source!r} is not one of {', '.join(DATA_SOURCES)}")
        if self.model_variant not in VARIANTS:
            raise SpecError(f"model_variant {self.model_variant!r} is not one of {', '.join(VARIANTS)}")
        for name in ("batch_size", "epochs", "synthetic_samples", "nodes", "tasks_per_node", "timed_steps", "trials"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise SpecError(f"{name} must be a positive integer, got {value!r}")
        if self.batch_search and self.batch_search_limit < self.batch_size:
            raise SpecError(f"batch_search_limit {self.batch_search_limit} is below the starting batch {self.batch_size}")
        loop = self.loop_batch_size
        if not isinstance(loop, int) or isinstance(loop, bool) or loop < 0:
            raise SpecError(f"loop_batch_size must be a non-negative integer (0: the training batch), got {loop!r}")
        if not isinstance(self.trace_steps, int) or self.trace_steps < 0:
            raise SpecError(f"trace_steps must be a non-negative integer, got {self.trace_steps!r}")
        if not isinstance(self.memory_limit_bytes, int) or self.memory_limit_bytes < 0:
            raise SpecError(f"memory_limit_bytes must be a non-negative integer, got {self.memory_limit_bytes!r}")
        if not isinstance(self.warmup_steps, int) or self.warmup_steps < 0:
            raise SpecError(f"warmup_steps must be a non-negative integer, got {self.warmup_steps!r}")
        if not isinstance(self.trial, int) or not 0 <= self.trial < self.trials:
            raise SpecError(f"trial must be an integer from 0 to trials - 1 ({self.trials - 1}), got {self.trial!r}")
        if not self.min_duration_s >= 0:
            raise SpecError(f"min_duration_s cannot be negative, got {self.min_duration_s!r}")
        self._check_target_interval()
        if self.paired and self.framework not in PAIRED_ORDER:
            raise SpecError(f"a paired run is one of {', '.join(PAIRED_ORDER)}, not {self.framework!r}")
        if not self.learning_rate > 0:
            raise SpecError(f"learning_rate must be positive, got {self.learning_rate!r}")
        self._check_optimizer()
        if not self.clip_norm > 0:
            raise SpecError(f"clip_norm must be positive, got {self.clip_norm!r}")
        if not self.noise_multiplier >= 0:
            raise SpecError(f"noise_multiplier cannot be negative, got {self.noise_multiplier!r}")
        if self.sampling not in SAMPLINGS:
            raise SpecError(f"sampling {self.sampling!r} is not one of {', '.join(SAMPLINGS)}")
        if self.sampling == "poisson" and self.use_case not in PER_SAMPLE_USE_CASES:
            raise SpecError(f"Poisson sampling is for DP-SGD (use cases {' and '.join(map(str, PER_SAMPLE_USE_CASES))}), "
                            f"not use case {self.use_case}")
        if self.torch_compile_mode not in TORCH_COMPILE_MODES:
            raise SpecError(f"torch_compile_mode {self.torch_compile_mode!r} is not one of {', '.join(TORCH_COMPILE_MODES)}")
        self._check_dp_engine()
        self._check_parallelism()
        if self.world_size > 1 and self.use_case not in DATA_PARALLEL_USE_CASES:
            raise SpecError(
                f"use case {self.use_case} runs on one device; {self.world_size} processes are for use cases "
                f"{' and '.join(map(str, DATA_PARALLEL_USE_CASES))}"
            )
        if self.batch_size % self.world_size:
            raise SpecError(
                f"batch_size {self.batch_size} does not split evenly over {self.world_size} processes; "
                "choose a multiple of nodes * tasks_per_node"
            )
        if self.schema_version != SCHEMA_VERSION:
            raise SpecError(
                f"spec schema version {self.schema_version} does not match this code's {SCHEMA_VERSION}; "
                "re-plan the campaign with the current code"
            )

    def _check_target_interval(self) -> None:
        target = self.target_interval
        if isinstance(target, bool) or not isinstance(target, (int, float)) or not 0 <= target < 1:
            raise SpecError(f"target_interval must be a fraction from 0 (fixed trials) to below 1, got {target!r}")
        if target and not (self.paired and self.trials >= FIRST_STAGE):
            raise SpecError(f"a target_interval needs a paired run of at least {FIRST_STAGE} trials (Stein's first "
                            f"stage), got paired={self.paired}, trials={self.trials}")

    def _check_optimizer(self) -> None:
        if self.optimizer not in OPTIMIZERS:
            raise SpecError(f"optimizer {self.optimizer!r} is not one of {', '.join(OPTIMIZERS)}")
        if self.lr_schedule not in LR_SCHEDULES:
            raise SpecError(f"lr_schedule {self.lr_schedule!r} is not one of {', '.join(LR_SCHEDULES)}")
        if not 0 <= self.momentum < 1:
            raise SpecError(f"momentum must be at least 0 and below 1, got {self.momentum!r}")
        if self.nesterov and self.optimizer != "momentum":
            raise SpecError(f"nesterov applies to the momentum optimizer, not {self.optimizer!r}")
        if not self.weight_decay >= 0:
            raise SpecError(f"weight_decay cannot be negative, got {self.weight_decay!r}")
        if not isinstance(self.lr_warmup_steps, int) or self.lr_warmup_steps < 0:
            raise SpecError(f"lr_warmup_steps must be a non-negative integer, got {self.lr_warmup_steps!r}")
        if not isinstance(self.lr_decay_steps, int) or self.lr_decay_steps < 1:
            raise SpecError(f"lr_decay_steps must be a positive integer, got {self.lr_decay_steps!r}")

    def _check_parallelism(self) -> None:
        if self.parallelism not in PARALLELISMS:
            raise SpecError(f"parallelism {self.parallelism!r} is not one of {', '.join(PARALLELISMS)}")
        if self.parallelism == SHARDED_PARALLELISM and (refusal := sharding_refusal(self.use_case, self.model)):
            raise SpecError(f"parallelism {SHARDED_PARALLELISM}: {refusal}")

    def _check_dp_engine(self) -> None:
        if not self.dp_engine:
            return
        if self.dp_engine not in DP_ENGINES:
            raise SpecError(f"dp_engine {self.dp_engine!r} is not one of {', '.join(DP_ENGINES)}")
        if self.framework != "torch" or self.use_case not in PER_SAMPLE_USE_CASES:
            raise SpecError(f"dp_engine is PyTorch's DP-SGD engine (use cases {' and '.join(map(str, PER_SAMPLE_USE_CASES))});"
                            f" leave it empty for {self.framework} use case {self.use_case}")
        if self.dp_engine == "opacus" and (refusal := opacus_refusal(self.model, self.precision)):
            raise SpecError(f"dp_engine opacus: {refusal}")
        if self.dp_engine == "opacus" and self.torch_compile:
            raise SpecError("dp_engine opacus runs eagerly (its per-sample gradients come from hooks or expanded "
                            "weights, not a graph torch.compile captures); plan it without torch_compile")

    def dp_engine_columns(self) -> tuple[str, str]:
        """(dp_engine, dp_engine_mode) as every row records them: the engine that computed the per-sample
        gradients and how; ("", "") outside the DP-SGD use cases."""
        if self.use_case not in PER_SAMPLE_USE_CASES:
            return "", ""
        if self.framework != "torch":
            return JAX_DP_ENGINE, "jax.vmap(jax.value_and_grad) of one example's loss"
        if (self.dp_engine or DEFAULT_DP_ENGINE) == "opacus":
            return "opacus", f"GradSampleModule, grad_sample_mode={opacus_grad_sample_mode(self.model, self.precision)}"
        return DEFAULT_DP_ENGINE, "torch.func.vmap(grad_and_value) over functional_call"

    @property
    def world_size(self) -> int:
        """How many processes run this cell together (1 outside the data-parallel use cases)."""
        return self.nodes * self.tasks_per_node

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


def write_text_atomic(path: str | os.PathLike[str], text: str) -> None:
    """Write a whole file or nothing: a reader never sees half of it."""
    publish(path, lambda tmp: tmp.write_text(text))
