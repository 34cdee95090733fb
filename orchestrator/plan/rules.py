"""Which options combine: the checks `matrix.expand` runs over a request's axes and settings (each refusal one
sentence naming the options), the warning for a data-parallel use case planned with one process, and the data
directory a request needs."""

from __future__ import annotations

from dataclasses import replace

from bench_contract.config import SETTINGS, option_of
from bench_contract.data.datasets import missing_cifar10_files, missing_mnist_files
from bench_contract.data.images import folder_problem
from bench_contract.spec import (
    DEFAULT_DP_ENGINE,
    DEFAULT_PARALLELISM,
    PAIRED_ORDER,
    PER_SAMPLE_USE_CASES,
    SHARDED_PARALLELISM,
    JobSpec,
    opacus_refusal,
    sharding_refusal,
)
from orchestrator.data.fetch import fetch_hint
from orchestrator.errors import UsageError
from orchestrator.plan import catalog
from orchestrator.plan.profile import ClusterProfile
from orchestrator.plan.settings import RunSettings


# Array tasks one campaign may plan (cells x trials, on every system): twice the 10,000 cells `make bench` plans in
# well under a second, so that planning stays small; a larger study is several campaigns.
MAX_TASKS = 20_000


def check_campaign_size(cells: int, trials: int) -> None:
    """Refuse a plan of more than MAX_TASKS array tasks before any of it is written: its specs, scripts and
    manifest grow with every task (--trials 100000000 once grew a dry run to 7.4 GB)."""
    if cells * trials > MAX_TASKS:
        raise UsageError(f"the campaign would plan {cells} cells x {trials} trials = {cells * trials} array tasks, more "
                         f"than the {MAX_TASKS} one campaign may hold; ask for fewer batch sizes, models, precisions, "
                         "systems or trials, or split the study into several campaigns")


def check_sampling(case: catalog.UseCase, settings: RunSettings) -> None:
    """Poisson sampling means something for DP-SGD only (settings built without privacy_settings)."""
    if settings.sampling == "poisson" and not case.per_sample:
        raise UsageError(f"Poisson sampling is for DP-SGD (use cases {' and '.join(map(str, PER_SAMPLE_USE_CASES))}), "
                         f"not use case {case.number} ({case.title})")


def check_batch_search(case: catalog.UseCase, batch_sizes: list[int], settings: RunSettings) -> None:
    """A search starts from one batch size (the first of --batch-sizes, or 1) on one device."""
    if case.data_parallel:
        one_device = [str(c.number) for c in catalog.USE_CASES.values() if not c.data_parallel]
        raise UsageError(f"--find-max-batch searches on one device; use case {case.number} runs several processes "
                         f"(use {', '.join(one_device[:-1])} or {one_device[-1]})")
    if len(batch_sizes) > 1:
        raise UsageError("--find-max-batch starts from one batch size; give at most one --batch-sizes value")
    if settings.world_size > 1:
        raise UsageError("--find-max-batch searches on one device; it does not combine with --nodes or --tasks-per-node")
    if batch_sizes[0] > settings.batch_search_limit:
        raise UsageError(f"the starting batch size {batch_sizes[0]} is above --max-batch-limit {settings.batch_search_limit}")


def one_process_warning(use_case: int, nodes: int, tasks_per_node: int) -> str | None:
    """The warning for a data-parallel use case planned with one process, which measures one device under the
    data-parallel name; None otherwise. A warning, not a refusal: the plan is valid, only not what its name says."""
    case = catalog.use_case(use_case)
    if not case.data_parallel or nodes * tasks_per_node != 1:
        return None
    return (f"warning: use case {use_case} is data parallel, but --nodes 1 --tasks-per-node 1 gives it one process, "
            f"so it measures one device, not data parallelism; give --nodes or --tasks-per-node above 1 (or use "
            f"case {case.one_process.number} for one device)")


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
                     modes: list[str], settings: RunSettings, precisions: list[str]) -> list[str]:
    """PyTorch's DP-SGD engines to plan: --dp-engine, else torchfunc where PyTorch computes per-sample gradients;
    [] where it computes none."""
    for engine in engines or []:
        replace(settings, dp_engine=engine)  # an unknown engine: the configuration's refusal, before any other
    if not case.per_sample or "torch" not in frameworks:
        if engines:
            raise UsageError(f"--dp-engine chooses how PyTorch computes DP-SGD's per-sample gradients (use cases "
                             f"{' and '.join(map(str, PER_SAMPLE_USE_CASES))}, framework torch; JAX always uses "
                             f"jax.vmap), which use case {case.number} with {', '.join(frameworks)} does not compute")
        return []
    engines = engines or [DEFAULT_DP_ENGINE]
    if "opacus" in engines:
        check_opacus(models, modes, precisions)
    if settings.paired and len(engines) > 1:
        raise UsageError("--paired runs each JAX cell with one PyTorch cell; give one --dp-engine per paired campaign")
    return engines


def check_parallelisms(case: catalog.UseCase, parallelisms: list[str] | None, models: list[str]) -> list[str]:
    """The state layouts to plan (--parallelism; an unknown one the cells' settings refuse): sharded only where both
    backends implement it; default ddp (replicated). (A paired job runs one process per framework: no layout.)"""
    if SHARDED_PARALLELISM in (parallelisms or []):
        for model in models:
            if refusal := sharding_refusal(case.number, model):
                raise UsageError(f"--parallelism {SHARDED_PARALLELISM}: {refusal}")
    return list(dict.fromkeys(parallelisms or [DEFAULT_PARALLELISM]))


def check_opacus(models: list[str], modes: list[str], precisions: list[str]) -> None:
    """Opacus runs the models its grad_sample_modes handle, eagerly, and in bf16 those its hooks handle."""
    if "compiled" in modes:
        raise UsageError("--dp-engine opacus runs eagerly: its per-sample gradients come from hooks or expanded "
                         "weights, not a graph torch.compile captures; plan compiled PyTorch with --dp-engine torchfunc")
    for model in models:
        for precision in precisions:
            refusal = opacus_refusal(model, precision)
            if refusal is None:
                continue
            if not catalog.MODELS[model].opacus:  # at no precision: the model is the reason
                raise UsageError(f"--dp-engine opacus: {refusal}; plan {model} with --dp-engine torchfunc")
            raise UsageError(f"--dp-engine opacus with --precision {precision}: {refusal}; plan {model} in "
                             f"{precision} with --dp-engine torchfunc")


def check_torch_options(case: catalog.UseCase, models: list[str], settings: RunSettings) -> None:
    """channels_last is implemented for inference, and only means something for convolutional networks
    (torch.compile runs in every use case)."""
    if settings.channels_last and case.trains:
        raise UsageError(f"--channels-last is implemented for the inference use case ({catalog.INFERENCE}) only, "
                         f"not for use case {case.number}")
    if settings.channels_last:
        flat = [m for m in models if not catalog.MODELS[m].convolutional]
        if flat:
            convolutional = catalog.names(m for m in catalog.MODELS.values() if m.convolutional)
            raise UsageError(f"--channels-last is for convolutional networks; {', '.join(flat)} "
                             f"{'is' if len(flat) == 1 else 'are'} not one (they are: {convolutional})")


def check_settings_read(case: catalog.UseCase, settings: RunSettings) -> None:
    """A use case that trains nothing refuses, in one sentence, each setting given (not at the contract's default)
    that it does not read: each setting's declaration names the use cases that read it (bench_contract.config; the
    optimizer's settings, every training use case, DP-SGD's too, where adam is DP-Adam). A training use case takes
    DP-SGD's settings without reading them, so that `-u 1,3` plans the SGD cells DP-SGD's cost is measured against
    with the same settings (orchestrator.results.views.with_sgd_cost)."""
    if case.trains:
        return
    unread = [name for name, declaration in SETTINGS.items()
              if not case.reads(declaration) and getattr(settings, name) != JobSpec.__dataclass_fields__[name].default]
    if unread:
        raise UsageError(f"use case {case.number} trains nothing ({case.title}), so "
                         f"{', '.join(option_of(name) for name in unread)} {'does' if len(unread) == 1 else 'do'} "
                         "not apply")


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
        # The same hint as a folder without the files: `data fetch` makes the folder it is given.
        raise UsageError(f"data directory {root} does not exist{fetch_hint(benchmark, root)}")
    if benchmark == "mnist":
        missing = missing_mnist_files(root)
        if missing:
            raise UsageError(f"data directory {root} lacks the MNIST files {', '.join(missing)} (each may be .gz)"
                             f"{fetch_hint(benchmark, root)}")
    if benchmark == "cifar10":
        missing = missing_cifar10_files(root)
        if missing:
            raise UsageError(f"data directory {root} lacks the CIFAR-10 python batches {', '.join(missing)}"
                             f"{fetch_hint(benchmark, root)}")
    if benchmark == "imagenet":
        problem = folder_problem(root, "val")
        if problem:
            raise UsageError(problem)
        if use_case is not None and catalog.use_case(use_case).trains:
            if not (root / "train").is_dir() or not (root / "val").is_dir():
                raise UsageError(f"training on image folders needs {root}/train/<class>/<image> and "
                                 f"{root}/val/<class>/<image> (the test split)")
            problem = folder_problem(root, "train")
            if problem:
                raise UsageError(problem)


def check_device_has_gpus(device: str, profile: ClusterProfile, on_slurm: bool, discovered: str,
                          gpus_option: int | None = None) -> None:
    """--device gpu on a Slurm plan (`on_slurm`: its executor hands the arrays to Slurm) that asks for no GPU would
    queue jobs that find none: refused, with the fix (`gpus_option`: the command line's --gpus-per-task)."""
    if device != "gpu" or not on_slurm:
        return
    asks = [profile.for_system(name).gpus_per_task for name in profile.systems] or [profile.gpus_per_task]
    if gpus_option == 0:
        raise UsageError("--device gpu needs GPUs, and --gpus-per-task 0 asks Slurm for none; give --gpus-per-task 1 "
                         "or more, or plan with --device cpu")
    if not any(asks):
        why = f" ({discovered})" if discovered else f" (profile {profile.name!r} has gpus_per_task = 0)"
        raise UsageError(f"--device gpu needs GPUs, and this plan asks Slurm for none{why}; give a profile with "
                         "gpus_per_task (see profiles/example_gpu_cluster.toml), or plan with --device cpu")
