"""Registries, one per axis of the benchmark matrix, and the rules for which combinations run.

Everything the user can name is declared here or in the contract, whose use cases (bench_contract.use_cases) and
models (bench_contract.model_registry) the backends read too, including what is not implemented yet: such a
combination is refused at plan time with a message that says so, and is never submitted. Which use cases a model runs
follows from what the two objects say (Model.runs), not from a table of numbers.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from bench_contract.model_registry import MODELS, Model, names  # noqa: F401  (the models, read through the catalog)
from bench_contract.spec import (  # one definition, the contract's
    DATA_PARALLEL_USE_CASES,  # noqa: F401  (one process per device, under srun)
    DEVICES,  # noqa: F401  (--device's choices, validate's)
    FRAMEWORK_TITLES,
    INFERENCE_USE_CASE,
    LR_SCHEDULES,
    OPTIMIZERS,
    TORCH_COMPILE_MODES,  # noqa: F401  (torch.compile's modes, --torch-compile-mode)
    VARIANTS,
)
from bench_contract.use_cases import USE_CASES, UseCase, numbers
from orchestrator.errors import UsageError

FRAMEWORKS = FRAMEWORK_TITLES
INFERENCE = INFERENCE_USE_CASE  # the number of the use case that trains nothing, as sentences and tests name it

# Sizes of one architecture (bench_contract.models.vision): "tiny" has fewer blocks and smaller inputs, for CPU tests.
MODEL_VARIANTS = VARIANTS


@dataclass(frozen=True)
class Precision:
    name: str
    description: str
    implemented: bool
    runs_in: Callable[[UseCase], bool] | None = None  # the use cases it is implemented for; None: every one
    elsewhere: str = ""  # why not in the other use cases

    def implemented_for(self, case: UseCase) -> bool:
        return self.implemented and (self.runs_in is None or self.runs_in(case))

    @property
    def use_cases(self) -> tuple[int, ...]:
        """The numbers of the use cases it is implemented for, as a sentence lists them."""
        return numbers(case for case in USE_CASES.values() if self.implemented_for(case))


PRECISIONS = {
    "fp32": Precision("fp32", "float32 parameters and compute, TF32 off in both frameworks", True),
    "tf32": Precision("tf32", "float32 parameters, TF32 matmuls and convolutions in both frameworks (training; "
                              "refused with --device cpu, and at run time on a device without TF32)", True,
                      lambda case: case.trains,
                      "inference compares float32 against the narrower bf16 and fp16 instead"),
    "bf16": Precision("bf16", "training: float32 master weights, bfloat16 compute (autocast; JAX casts in the "
                              "step); inference: everything in bfloat16", True),
    "fp16": Precision("fp16", "training: float32 master weights, float16 compute, dynamic loss scaling; "
                              "inference: everything in float16", True, lambda case: not case.per_sample,
                      "loss scaling would clip DP-SGD's scaled per-example gradients, not the true ones; use bf16"),
}
# The PyTorch execution modes a campaign can compare with JAX (--torch-modes): eager, or torch.compile.
TORCH_MODES = ("eager", "compiled")


@dataclass(frozen=True)
class Benchmark:
    name: str
    description: str
    models: tuple[str, ...]
    default_models: tuple[str, ...]
    default_batch_sizes: tuple[int, ...]
    default_epochs: int
    needs_data_dir: bool  # real data that lives outside the project
    train_samples: int | None = None  # known size of the real training split, to refuse batches larger than it
    test_samples: int | None = None  # known size of the packaged test split, which inference's batch is taken from


BENCHMARKS = {
    "digits": Benchmark(
        "digits", "scikit-learn's 8x8 digits (ships with the package): the convergence check",
        ("mlp",), ("mlp",), (16, 32), 30, needs_data_dir=False, train_samples=1257, test_samples=360,
    ),
    "mnist": Benchmark(
        "mnist", "MNIST 28x28 digits from the standard IDX files in --data-dir",
        ("mlp", "cnn"), ("mlp",), (64, 128), 3, needs_data_dir=True, train_samples=55000,
    ),
    # The small CNN is the default: DP-SGD studies train a CNN of this kind on CIFAR-10, and batch norm
    # (ResNet-18) has no per-sample gradients; its GroupNorm variant (resnet18_gn) has.
    "cifar10": Benchmark(
        "cifar10", "CIFAR-10 from its python batches in --data-dir",
        ("cnn", "resnet18", "resnet18_gn"), ("cnn",), (128,), 1, needs_data_dir=True, train_samples=45000,
    ),
    "imagenet": Benchmark(
        "imagenet", "ImageNet-100-style image folders",
        ("resnet50", "vit_b_16", "mobilenet_v3_small", "efficientnet_b0", "resnet50_gn"), ("resnet50",), (64,), 1,
        True,
    ),
    # The user's own files: their sizes are not known in advance (bench_contract.data.text, bench_contract.data.graph).
    # The classifier reads the labels; the language model (gpt) only the texts, as bytes.
    "nlp": Benchmark("nlp", "text classification, or language modelling (gpt), from train.tsv and test.tsv "
                            "(<label>TAB<text>) in --data-dir",
                     ("transformer", "gpt"), ("transformer",), (32,), 3, True),
    "gnn": Benchmark("gnn", "node classification from graph.npz (edges, features, labels, masks) in --data-dir",
                     ("gcn",), ("gcn",), (32,), 30, True),
}

# Why a model with batch norm is refused a use case, by what the use case runs; the models that can (no batch norm)
# are named from the registry.
BATCH_NORM_PER_SAMPLE = ("batch norm mixes the examples of a batch, so per-sample gradients are undefined for it "
                         "(Opacus refuses it too); per-sample gradients run for {}")
BATCH_NORM_DATA_PARALLEL = ("PyTorch's DistributedDataParallel takes batch-norm statistics per rank, a sharded JAX "
                            "step takes them over the global batch, and SyncBatchNorm, which would align them, runs on "
                            "GPUs only, so the two frameworks would not train the same model")


def batch_norm_refusal(case: UseCase) -> str | None:
    """Why a model with batch norm cannot run `case`; None where it can."""
    if case.per_sample:
        return BATCH_NORM_PER_SAMPLE.format(names(model for model in MODELS.values() if model.per_sample))
    if case.data_parallel:
        return BATCH_NORM_DATA_PARALLEL
    return None


def _choose(kind: str, value: str, choices) -> None:
    if value not in choices:
        raise UsageError(f"unknown {kind} {value!r}; choose from: {', '.join(str(c) for c in choices)}")


def benchmark(name: str) -> Benchmark:
    _choose("benchmark", name, BENCHMARKS)
    return BENCHMARKS[name]


def use_case(number: int) -> UseCase:
    if number not in USE_CASES:
        raise UsageError(
            f"unknown use case {number}; choose from: "
            + ", ".join(f"{u.number} ({u.title})" for u in USE_CASES.values())
        )
    return USE_CASES[number]


def use_cases_label(numbers) -> str:
    """The use cases of a campaign in a name (its id, its scripts'): "3", or "3+5" for several, in order."""
    return "+".join(str(number) for number in sorted(set(numbers)))


def check_framework(name: str) -> None:
    _choose("framework", name, FRAMEWORKS)


def check_precision(name: str) -> None:
    _choose("precision", name, PRECISIONS)


def check_variant(name: str) -> None:
    _choose("model variant", name, MODEL_VARIANTS)


def runs(model: str) -> tuple[int, ...]:
    """The use cases both backends run `model` in, by number."""
    return numbers(case for case in USE_CASES.values() if MODELS[model].runs(case))


def built_models() -> list[str]:
    """Models that both backends build: those of a benchmark that run at least one use case."""
    return [name for name in MODELS if runs(name) and any(name in bench.models for bench in BENCHMARKS.values())]


def inference_models() -> list[str]:
    """Built models whose forward pass runs alone (the use case that trains nothing): what `validate` compares
    forward pass by forward pass."""
    return [name for name in built_models() if MODELS[name].infers]


def home_benchmark(model: str) -> Benchmark:
    """The first benchmark that lists the model: it fixes the model's input shape and class count."""
    for bench in BENCHMARKS.values():
        if model in bench.models:
            return bench
    raise UsageError(f"model {model!r} belongs to no benchmark")


def skip_reason(bench: Benchmark, case: UseCase, model: str, precision: str) -> str | None:
    """Why this combination cannot run (yet), or None when it can. Each rule gives its reason."""
    if model not in bench.models:
        return f"model {model!r} is not part of benchmark {bench.name!r} (its models: {', '.join(bench.models)})"
    if MODELS[model].batch_norm and (why := batch_norm_refusal(case)):
        return f"use case {case.number} ({case.title}) is refused for {model}: {why}"
    if not MODELS[model].runs(case):
        implemented = runs(model)
        said = f"it runs use cases {', '.join(map(str, implemented))}" if implemented else "it runs nothing yet"
        return (f"use case {case.number} ({case.title}) is declared but not implemented yet for "
                f"{bench.name}/{model} ({said})")
    chosen = PRECISIONS[precision]
    if not chosen.implemented:
        implemented_precisions = [p.name for p in PRECISIONS.values() if p.implemented]
        return f"precision {precision!r} is declared but not implemented yet (implemented: {', '.join(implemented_precisions)})"
    if not chosen.implemented_for(case):
        return (f"precision {precision!r} is implemented for use case {', '.join(map(str, chosen.use_cases))} only, "
                f"not for use case {case.number} ({case.title}): {chosen.elsewhere}")
    return None
