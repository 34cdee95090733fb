"""Expand the axes of a request into frozen cells with stable ids, every cell checked (the checks: `rules`).

A cell is one framework running one configuration. Its id is readable (framework, benchmark, use case,
model, batch size, precision) plus a short hash of everything that changes the result, so that a re-run
of the same cell is recognised and a changed setting is not mistaken for it.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, replace
from functools import cached_property

from bench_contract.data.datasets import counted_train_split
from bench_contract.spec import DEFAULT_PARALLELISM
from orchestrator.errors import UsageError
from orchestrator.plan import catalog, privacy
from orchestrator.plan.rules import (
    check_batch_search,
    check_dp_engines,
    check_paired,
    check_parallelisms,
    check_sampling,
    check_settings_read,
    check_torch_modes,
    check_torch_options,
)
from orchestrator.plan.settings import RunSettings


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
    # A tuned cell's or a tuning try's configuration of its framework's knobs, as sorted JSON ("" out of the box;
    # orchestrator.plan.tuning). One framework's own: left out of the pair key, named in the cell id.
    tuned: str = ""

    def _digest(self, with_framework: bool) -> str:
        # The same JSON as asdict(self) would give, without asdict's deep copies: every setting, defaults included.
        # A DP-SGD cell's engine is left out: the JAX cell has none and the PyTorch cell's id names it in words
        # (cell_id), so the two keep one pair key. Elsewhere it is "" and hashed like every setting.
        private = catalog.USE_CASES[self.use_case].per_sample
        settings = self.settings.without_dp_engine if private else self.settings.identity
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
        sharded = f"-{self.settings.parallelism}" if self.settings.parallelism != DEFAULT_PARALLELISM else ""
        return (f"{self.benchmark}-uc{self.use_case}-{self.model_label}-{batch}-{self.precision}{sharded}-"
                f"{self._digest(False)}")

    @cached_property
    def cell_id(self) -> str:
        engine = self.settings.dp_engine
        configuration = f"-t{hashlib.sha256(self.tuned.encode()).hexdigest()[:8]}" if self.tuned else ""
        return f"{self.framework}-{self.pair_key}" + (f"-{engine}" if engine else "") + configuration


def train_split_size(bench: catalog.Benchmark, settings: RunSettings) -> int | None:
    """The training split the backends will see: counted from the real files where that is cheap (MNIST's header,
    CIFAR-10's label lists: a user's folder may hold a subset), else the benchmark's usual split, or None."""
    if settings.data_source == "synthetic":
        tenth = max(1, settings.synthetic_samples // 10)
        return settings.synthetic_samples - 2 * tenth
    if not settings.data_dir:
        return bench.train_samples

    counted = counted_train_split(bench.name, settings.data_dir)
    return bench.train_samples if counted is None else counted


def test_split_size(bench: catalog.Benchmark, settings: RunSettings) -> int | None:
    """The test split inference takes its batch from, where it is known without reading data: the packaged
    benchmark's (synthetic inputs are made to the batch's size, a user's folder may hold a subset)."""
    if settings.data_source == "synthetic" or settings.data_dir:
        return None
    return bench.test_samples


def check_split_sizes(bench: catalog.Benchmark, case: catalog.UseCase, batch_sizes: list[int],
                      settings: RunSettings) -> None:
    """A batch larger than the split it is drawn from is refused here, not by every task of the campaign."""
    if settings.batch_search:
        return
    limit, split = ((train_split_size(bench, settings), "training") if case.trains
                    else (test_split_size(bench, settings), "test"))
    if limit is not None and max(batch_sizes) > limit:
        raise UsageError(f"batch size {max(batch_sizes)} is larger than the {limit} {split} samples of {bench.name}")


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
    parallelisms: list[str] | None = None,
) -> list[Cell]:
    """The product of the axes (defaults from the registry where an axis is empty), every cell validated.

    torch_modes (eager, compiled; default: what settings.torch_compile says) gives every cell once per PyTorch
    mode, its settings' torch_compile set accordingly. The JAX cell goes with each mode too: a comparison row
    pairs runs of equal settings, so JAX against eager and JAX against compiled PyTorch are two rows.

    dp_engines (torchfunc, opacus; use cases 3 and 4; default torchfunc) gives every PyTorch cell once per DP-SGD
    engine. The JAX cell (always jax.vmap) is planned once: the comparison pairs it with each engine.

    parallelisms (ddp, fsdp; use case 2; default ddp) gives every cell once per way of laying out the state, in both
    frameworks: JAX replicated against DDP, JAX sharded against FSDP2."""
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
    if world > 1 and not case.data_parallel:
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
    check_settings_read(case, settings)
    if settings.batch_search:
        check_batch_search(case, batch_sizes, settings)
        batch_sizes = batch_sizes[:1]
    check_split_sizes(bench, case, batch_sizes, settings)
    engines = check_dp_engines(case, dp_engines, frameworks, models, modes, settings, precisions)
    layouts = check_parallelisms(case, parallelisms, models)
    per_mode = [replace(settings, torch_compile=mode == "compiled", parallelism=layout)
                for mode in modes for layout in layouts]
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

    delta = privacy.chosen_delta(train_samples, settings.delta)
    steps = settings.epochs * (train_samples // batch_size)
    sigma = settings.noise_multiplier
    if settings.target_epsilon is not None:
        sigma = privacy.noise_for_epsilon(batch_size / train_samples, steps, settings.target_epsilon, delta)
    return {"noise_multiplier": sigma,
            "privacy": privacy.budget(train_samples, batch_size, settings.epochs, sigma, settings.delta)}


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
