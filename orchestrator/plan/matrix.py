"""Expand the axes of a request into frozen cells with stable ids, and validate every cell.

A cell is one framework running one configuration. Its id is readable (framework, benchmark, use case,
model, batch size, precision) plus a short hash of everything that changes the result, so that a re-run
of the same cell is recognised and a changed setting is not mistaken for it.
"""

from __future__ import annotations

import hashlib
import json
import shlex
from dataclasses import asdict, dataclass, field, replace
from functools import cached_property

from bench_contract.spec import (
    DEFAULT_DP_ENGINE,
    DP_ENGINES,
    OPACUS_GRAD_SAMPLE_MODES,
    PAIRED_ORDER,
    PER_SAMPLE_USE_CASES,
    SAMPLINGS,
    TORCH_COMPILE_MODES,
    JobSpec,
)
from orchestrator.errors import UsageError
from orchestrator.plan import catalog


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
    # data parallelism (use cases 2 and 4): one process per device
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
    def without_dp_engine(self) -> dict:
        """Every setting but the DP-SGD engine: what a DP-SGD cell's id hashes (Cell._digest)."""
        return {name: value for name, value in self.as_dict.items() if name != "dp_engine"}


@dataclass(frozen=True)
class Cell:
    framework: str
    benchmark: str
    use_case: int
    model: str
    batch_size: int
    precision: str
    settings: RunSettings
    system: str = ""  # the profile's system (kind of node) it runs on; "": the profile's own values

    def _digest(self, with_framework: bool) -> str:
        # The same JSON as asdict(self) would give, so ids stay stable, without asdict's deep copies. A DP-SGD cell's
        # engine is left out: the JAX cell has none and the PyTorch cell's id names it in words (cell_id), so the two
        # keep one pair key. Elsewhere it is "" and hashed like every setting.
        settings = self.settings.without_dp_engine if self.use_case in PER_SAMPLE_USE_CASES else self.settings.as_dict
        fields = {"benchmark": self.benchmark, "use_case": self.use_case, "model": self.model,
                  "batch_size": self.batch_size, "precision": self.precision, "settings": settings,
                  "system": self.system}
        if with_framework:
            fields["framework"] = self.framework
        return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:8]

    @property
    def model_label(self) -> str:
        """The model name, with the variant when it is not the full network (resnet50.tiny)."""
        variant = self.settings.model_variant
        return self.model if variant == "full" else f"{self.model}.{variant}"

    # Cached: the id is read several times per cell (script header, spec, manifest). cached_property writes
    # the instance's __dict__ directly, so it works on a frozen dataclass and leaves equality and hashing alone.
    @cached_property
    def pair_key(self) -> str:
        """Shared by the JAX cell and the PyTorch cell that are compared with each other."""
        batch = "maxbatch" if self.settings.batch_search else f"bs{self.batch_size}"
        return f"{self.benchmark}-uc{self.use_case}-{self.model_label}-{batch}-{self.precision}-{self._digest(False)}"

    @cached_property
    def cell_id(self) -> str:
        engine = self.settings.dp_engine
        return f"{self.framework}-{self.pair_key}" + (f"-{engine}" if engine else "")


def data_source(synthetic: bool, batch_search: bool) -> str:
    """The data a request runs on, "synthetic" or "real". A batch search runs on synthetic data: memory depends on
    the shapes, not on the values."""
    return "synthetic" if synthetic or batch_search else "real"


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
        if size < 1:
            raise UsageError(f"batch size {size} must be a positive integer")
        sizes.append(size)
    return sizes


MEMORY_UNITS = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def parse_memory_size(text: str) -> int:
    """'6G' -> bytes: a number with a K, M, G or T suffix (powers of 1024, as Slurm's --mem)."""
    value, unit = text.strip()[:-1], text.strip()[-1:].upper()
    try:
        size = float(value) * MEMORY_UNITS[unit]
    except (KeyError, ValueError):
        raise UsageError(f"memory size {text!r} is not a number with a K, M, G or T suffix, such as 6G") from None
    if size < 2**20:
        raise UsageError(f"memory size {text!r} is below 1M: no framework starts in that")
    return int(size)


def train_split_size(bench: catalog.Benchmark, settings: RunSettings) -> int | None:
    """The training split the backends will see: counted from the real files where that is cheap (MNIST's header,
    CIFAR-10's label lists: a user's folder may hold a subset), else the benchmark's usual split, or None."""
    if settings.data_source == "synthetic":
        tenth = max(1, settings.synthetic_samples // 10)
        return settings.synthetic_samples - 2 * tenth
    if not settings.data_dir:
        return bench.train_samples
    from bench_contract.data.datasets import counted_train_split  # numpy: never at the orchestrator's start

    counted = counted_train_split(bench.name, settings.data_dir)
    return bench.train_samples if counted is None else counted


def expand(
    benchmark: str,
    use_case: int,
    frameworks: list[str],
    models: list[str],
    batch_sizes: list[int],
    precisions: list[str],
    settings: RunSettings,
    torch_modes: list[str] | None = None,
    dp_engines: list[str] | None = None,
) -> list[Cell]:
    """The product of the axes (defaults from the registry where an axis is empty), every cell validated.

    torch_modes (eager, compiled; default: what settings.torch_compile says) gives every cell once per PyTorch
    mode, its settings' torch_compile set accordingly. The JAX cell goes with each mode too: a comparison row
    pairs runs of equal settings, so JAX against eager and JAX against compiled PyTorch are two rows.

    dp_engines (torchfunc, opacus; use cases 3 and 4; default torchfunc) gives every PyTorch cell once per DP-SGD
    engine. The JAX cell (always jax.vmap) is planned once: the comparison pairs it with each engine."""
    bench = catalog.benchmark(benchmark)
    case = catalog.use_case(use_case)
    frameworks = frameworks or list(catalog.FRAMEWORKS)
    models = models or list(bench.default_models)
    default_batches = [1] if settings.batch_search else list(case.default_batch_sizes or bench.default_batch_sizes)
    batch_sizes = batch_sizes or default_batches
    precisions = precisions or ["fp32"]
    for name in frameworks:
        catalog.check_framework(name)
    for name in models:
        if name not in catalog.MODELS:
            raise UsageError(f"unknown model {name!r}; benchmark {benchmark!r} has: {', '.join(bench.models)}")
    for name in precisions:
        catalog.check_precision(name)
    for model in models:
        for precision in precisions:
            reason = catalog.skip_reason(bench, case, model, precision)
            if reason:
                raise UsageError(f"cannot plan {benchmark} use case {use_case} with {model}/{precision}: {reason}")
    if "tf32" in precisions and settings.device == "cpu":
        # Known at plan time here; on "auto" or "gpu" the node's device decides, and the backend refuses it there.
        raise UsageError("--precision tf32 cannot run with --device cpu: a CPU has no TF32 arithmetic, so it would "
                         "silently be float32; use fp32 on a CPU")
    world = settings.world_size
    if world > 1 and use_case not in catalog.DATA_PARALLEL_USE_CASES:
        raise UsageError(
            f"use case {use_case} ({case.title}) runs one process; --nodes and --tasks-per-node above 1 are for "
            f"use cases {' and '.join(map(str, catalog.DATA_PARALLEL_USE_CASES))}"
        )
    uneven = [size for size in batch_sizes if size % world]
    if uneven:
        raise UsageError(
            f"batch size {uneven[0]} does not split evenly over {world} processes "
            f"({settings.nodes} node(s) x {settings.tasks_per_node} task(s)); give multiples of {world}"
        )
    modes = check_torch_modes(torch_modes, settings)
    check_sampling(case, settings)
    check_torch_options(case, models, settings)
    check_paired(frameworks, settings)
    check_optimizer_options(case, settings)
    if settings.batch_search:
        check_batch_search(case, batch_sizes, settings)
        batch_sizes = batch_sizes[:1]
    limit = train_split_size(bench, settings) if case.trains and not settings.batch_search else None
    if limit is not None and max(batch_sizes) > limit:
        raise UsageError(f"batch size {max(batch_sizes)} is larger than the {limit} training samples of {benchmark}")
    engines = check_dp_engines(case, dp_engines, frameworks, models, modes, settings)
    per_mode = [replace(settings, torch_compile=mode == "compiled") for mode in modes]
    private = {size: with_privacy(bench, settings, size) for size in batch_sizes}  # one budget per batch size
    cells = [
        Cell(framework, benchmark, use_case, model, batch_size, precision,
             replace(mode_settings, **private[batch_size]) if private[batch_size] else mode_settings)
        for mode_settings in per_mode
        for framework in frameworks
        for model in models
        for batch_size in batch_sizes
        for precision in precisions
    ]
    return with_dp_engines(cells, engines)


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


def check_sampling(case: catalog.UseCase, settings: RunSettings) -> None:
    """Poisson sampling means something for DP-SGD only (settings built without privacy_settings)."""
    if settings.sampling not in SAMPLINGS:
        raise UsageError(f"unknown sampling {settings.sampling!r}; choose from: {', '.join(SAMPLINGS)}")
    if settings.sampling == "poisson" and case.number not in PER_SAMPLE_USE_CASES:
        raise UsageError(f"Poisson sampling is for DP-SGD (use cases {' and '.join(map(str, PER_SAMPLE_USE_CASES))}), "
                         f"not use case {case.number} ({case.title})")


def with_privacy(bench: catalog.Benchmark, settings: RunSettings, batch_size: int) -> dict:
    """The fields of a Poisson-sampled DP-SGD cell's settings that depend on its batch size: the privacy budget
    (orchestrator.plan.privacy), and with --target-epsilon the noise multiplier derived for it. {} for a cell
    without one, or where the training split's size is not known at plan time (the rows say so)."""
    if settings.sampling != "poisson":
        return {}
    train_samples = train_split_size(bench, settings)
    if train_samples is None:
        if settings.target_epsilon is not None:
            raise UsageError(f"--target-epsilon needs the training split's size at plan time, which {bench.name}'s "
                             "own files do not give; give --noise-multiplier instead")
        return {}
    from orchestrator.plan import privacy

    delta = 1 / train_samples if settings.delta is None else settings.delta
    steps = settings.epochs * (train_samples // batch_size)
    sigma = settings.noise_multiplier
    if settings.target_epsilon is not None:
        sigma = privacy.noise_for_epsilon(batch_size / train_samples, steps, settings.target_epsilon, delta)
    return {"noise_multiplier": sigma,
            "privacy": privacy.budget(train_samples, batch_size, settings.epochs, sigma, settings.delta)}


def check_batch_search(case: catalog.UseCase, batch_sizes: list[int], settings: RunSettings) -> None:
    """A search starts from one batch size (the first of --batch-sizes, or 1) on one device."""
    if case.number in catalog.DATA_PARALLEL_USE_CASES:
        raise UsageError(f"--find-max-batch searches on one device; use case {case.number} runs several processes "
                         "(use 1, 3 or 5)")
    if len(batch_sizes) > 1:
        raise UsageError("--find-max-batch starts from one batch size; give at most one --batch-sizes value")
    if settings.world_size > 1:
        raise UsageError("--find-max-batch searches on one device; it does not combine with --nodes or --tasks-per-node")
    if batch_sizes[0] > settings.batch_search_limit:
        raise UsageError(f"the starting batch size {batch_sizes[0]} is above --max-batch-limit {settings.batch_search_limit}")


def one_process_warning(use_case: int, nodes: int, tasks_per_node: int) -> str | None:
    """The warning for a data-parallel use case planned with one process, which measures one device under the
    data-parallel name; None otherwise. A warning, not a refusal: the plan is valid, only not what its name says."""
    if use_case not in catalog.DATA_PARALLEL_USE_CASES or nodes * tasks_per_node != 1:
        return None
    return (f"warning: use case {use_case} is data parallel, but --nodes 1 --tasks-per-node 1 gives it one process, "
            f"so it measures one device, not data parallelism; give --nodes or --tasks-per-node above 1 (or use "
            f"case {catalog.ONE_PROCESS_USE_CASE[use_case]} for one device)")


def check_torch_modes(torch_modes: list[str] | None, settings: RunSettings) -> list[str]:
    """The PyTorch modes to plan: --torch-modes, or --torch-compile's short form of `compiled`, or eager."""
    for mode in torch_modes or []:
        if mode not in catalog.TORCH_MODES:
            raise UsageError(f"unknown PyTorch mode {mode!r} in --torch-modes; choose from: {', '.join(catalog.TORCH_MODES)}")
    if torch_modes and settings.torch_compile and torch_modes != ["compiled"]:
        raise UsageError("--torch-compile is the short form of --torch-modes compiled; give one of them")
    modes = torch_modes or ["compiled" if settings.torch_compile else "eager"]
    if settings.torch_compile_mode != "default" and "compiled" not in modes:
        raise UsageError(f"--torch-compile-mode {settings.torch_compile_mode} is for compiled PyTorch; add "
                         "--torch-modes compiled (or eager,compiled)")
    return modes


def check_dp_engines(case: catalog.UseCase, engines: list[str] | None, frameworks: list[str], models: list[str],
                     modes: list[str], settings: RunSettings) -> list[str]:
    """PyTorch's DP-SGD engines to plan: --dp-engine, else torchfunc where PyTorch computes per-sample gradients;
    [] where it computes none."""
    for engine in engines or []:
        if engine not in DP_ENGINES:
            raise UsageError(f"unknown DP-SGD engine {engine!r} in --dp-engine; choose from: {', '.join(DP_ENGINES)}")
    if case.number not in PER_SAMPLE_USE_CASES or "torch" not in frameworks:
        if engines:
            raise UsageError(f"--dp-engine chooses how PyTorch computes DP-SGD's per-sample gradients (use cases "
                             f"{' and '.join(map(str, PER_SAMPLE_USE_CASES))}, framework torch; JAX always uses "
                             f"jax.vmap), which use case {case.number} with {', '.join(frameworks)} does not compute")
        return []
    engines = engines or [DEFAULT_DP_ENGINE]
    if "opacus" in engines:
        check_opacus(models, modes)
    if settings.paired and len(engines) > 1:
        raise UsageError("--paired runs each JAX cell with one PyTorch cell; give one --dp-engine per paired campaign")
    return engines


def check_opacus(models: list[str], modes: list[str]) -> None:
    """Opacus runs the models its grad_sample_modes handle, eagerly."""
    if "compiled" in modes:
        raise UsageError("--dp-engine opacus runs eagerly: its per-sample gradients come from hooks or expanded "
                         "weights, not a graph torch.compile captures; plan compiled PyTorch with --dp-engine torchfunc")
    others = [m for m in models if m not in OPACUS_GRAD_SAMPLE_MODES]
    if others:
        raise UsageError(f"--dp-engine opacus runs {', '.join(OPACUS_GRAD_SAMPLE_MODES)}; {', '.join(others)} "
                         f"{'runs' if len(others) == 1 else 'run'} in neither of its modes (hooks, expanded weights): "
                         f"plan {'it' if len(others) == 1 else 'them'} with --dp-engine torchfunc")


def with_dp_engines(cells: list[Cell], engines: list[str]) -> list[Cell]:
    """Every PyTorch cell once per DP-SGD engine; the others (JAX's, always jax.vmap) once."""
    if not engines:
        return cells
    out = []
    for cell in cells:
        if cell.framework != "torch":
            out.append(cell)
            continue
        out += [replace(cell, settings=replace(cell.settings, dp_engine=engine)) for engine in engines]
    return out


def check_torch_options(case: catalog.UseCase, models: list[str], settings: RunSettings) -> None:
    """channels_last is implemented for inference, and only means something for convolutional networks
    (torch.compile runs in every use case)."""
    if settings.channels_last and case.number != catalog.INFERENCE:
        raise UsageError(f"--channels-last is implemented for the inference use case ({catalog.INFERENCE}) only, "
                         f"not for use case {case.number}")
    if settings.channels_last:
        flat = [m for m in models if m not in catalog.CONVOLUTIONAL]
        if flat:
            raise UsageError(f"--channels-last is for convolutional networks; {', '.join(flat)} "
                             f"{'is' if len(flat) == 1 else 'are'} not one (they are: {', '.join(catalog.CONVOLUTIONAL)})")


OPTIMIZER_OPTIONS = {"optimizer": "--optimizer", "learning_rate": "--learning-rate", "momentum": "--momentum",
                     "nesterov": "--nesterov", "weight_decay": "--weight-decay", "lr_schedule": "--lr-schedule",
                     "lr_warmup_steps": "--lr-warmup-steps", "lr_decay_steps": "--lr-decay-steps"}


def check_optimizer_options(case: catalog.UseCase, settings: RunSettings) -> None:
    """The optimizer's options where they mean something: training (DP-SGD's use cases too, where adam is DP-Adam),
    the momentum ones with the momentum optimizer, the schedule's steps with a schedule."""
    catalog.check_lr_schedule(settings.lr_schedule)
    given = [option for name, option in OPTIMIZER_OPTIONS.items()
             if getattr(settings, name) != JobSpec.__dataclass_fields__[name].default]  # the contract's defaults
    if given and not case.trains:
        raise UsageError(f"use case {case.number} trains nothing ({case.title}), so {', '.join(given)} "
                         f"{'does' if len(given) == 1 else 'do'} not apply")
    momentum_options = [option for option in ("--momentum", "--nesterov") if option in given]
    if momentum_options and settings.optimizer != "momentum":
        raise UsageError(f"{' and '.join(momentum_options)} belong to --optimizer momentum, not {settings.optimizer}")
    if not 0 <= settings.momentum < 1:
        raise UsageError(f"--momentum must be at least 0 and below 1, got {settings.momentum}")
    if not settings.weight_decay >= 0:
        raise UsageError(f"--weight-decay cannot be negative, got {settings.weight_decay}")
    schedule_steps = [option for option in ("--lr-warmup-steps", "--lr-decay-steps") if option in given]
    if schedule_steps and settings.lr_schedule == "constant":
        raise UsageError(f"{' and '.join(schedule_steps)} shape a schedule; give --lr-schedule warmup_cosine too")
    if settings.lr_warmup_steps < 0 or settings.lr_decay_steps < 1:
        raise UsageError(f"--lr-warmup-steps cannot be negative and --lr-decay-steps must be at least 1, got "
                         f"{settings.lr_warmup_steps} and {settings.lr_decay_steps}")


def check_paired(frameworks: list[str], settings: RunSettings) -> None:
    """A paired job runs one JAX and one PyTorch process at a time on one node."""
    if not settings.paired:
        return
    if sorted(frameworks) != sorted(PAIRED_ORDER):
        raise UsageError(f"--paired runs JAX and PyTorch alternately in one job; it needs both frameworks "
                         f"({', '.join(PAIRED_ORDER)}), not only {', '.join(frameworks)}")
    if settings.world_size > 1:
        raise UsageError("--paired runs one process per framework at a time; a data-parallel cell "
                         f"({settings.world_size} processes) cannot be paired")


def fetch_hint(benchmark: str, data_dir) -> str:
    """The command that fetches the data, for the benchmarks `data fetch` knows; "" for the others."""
    from orchestrator.data.fetch import SOURCES

    if benchmark not in SOURCES:
        return ""
    return f"; fetch it with: python main.py data fetch {benchmark} --data-dir {shlex.quote(str(data_dir))}"


def check_data(benchmark: str, settings: RunSettings, use_case: int | None = None) -> None:
    """Refuse a data directory that is missing or lacks the benchmark's files, before anything is written.
    Training (any use case but inference) also needs an image folder's train/ split."""
    bench = catalog.benchmark(benchmark)
    if settings.data_source == "synthetic" or not bench.needs_data_dir:
        return
    if not settings.data_dir:
        raise UsageError(f"benchmark {benchmark!r} reads real data: give --data-dir, or ask for --synthetic data"
                         f"{fetch_hint(benchmark, 'DIR')}")
    from pathlib import Path

    root = Path(settings.data_dir)
    if not root.is_dir():
        raise UsageError(f"data directory {root} does not exist")
    if benchmark == "mnist":
        from bench_contract.data.datasets import missing_mnist_files

        missing = missing_mnist_files(root)
        if missing:
            raise UsageError(f"data directory {root} lacks the MNIST files {', '.join(missing)} (each may be .gz)"
                             f"{fetch_hint(benchmark, root)}")
    if benchmark == "cifar10":
        from bench_contract.data.datasets import missing_cifar10_files

        missing = missing_cifar10_files(root)
        if missing:
            raise UsageError(f"data directory {root} lacks the CIFAR-10 python batches {', '.join(missing)}"
                             f"{fetch_hint(benchmark, root)}")
    if benchmark == "imagenet":
        from bench_contract.data.images import folder_problem

        problem = folder_problem(root, "val")
        if problem:
            raise UsageError(problem)
        if use_case is not None and use_case != catalog.INFERENCE:
            if not (root / "train").is_dir() or not (root / "val").is_dir():
                raise UsageError(f"training on image folders needs {root}/train/<class>/<image> and "
                                 f"{root}/val/<class>/<image> (the test split)")
            problem = folder_problem(root, "train")
            if problem:
                raise UsageError(problem)
