"""Registries, one per axis of the benchmark matrix, and the rules for which combinations run.

Everything the user can name is declared here, including what is not implemented yet: such a
combination is refused at plan time with a message that says so, and is never submitted.
"""

from __future__ import annotations

from dataclasses import dataclass

from bench_contract.spec import (  # one definition, the contract's
    DATA_PARALLEL_USE_CASES,  # noqa: F401  (one process per device, under srun)
    FRAMEWORK_TITLES,
    INFERENCE_USE_CASE,
    LR_SCHEDULES,
    OPTIMIZERS,
    TORCH_COMPILE_MODES,  # noqa: F401  (torch.compile's modes, --torch-compile-mode)
    VARIANTS,
)
from orchestrator.errors import UsageError

FRAMEWORKS = FRAMEWORK_TITLES


@dataclass(frozen=True)
class UseCase:
    number: int
    title: str
    default_batch_sizes: tuple[int, ...] | None = None  # None: the benchmark's
    trains: bool = True  # False: no training split is read, so no batch-size limit from it


USE_CASES = {
    1: UseCase(1, "training on one GPU"),
    2: UseCase(2, "data-parallel training on several GPUs and nodes"),
    3: UseCase(3, "per-sample gradients (a DP-SGD step) on one GPU"),
    4: UseCase(4, "per-sample gradients (a DP-SGD step) on several GPUs and nodes"),
    5: UseCase(5, "inference (forward pass, eval mode) on one GPU", default_batch_sizes=(1, 8, 32, 128), trains=False),
}
INFERENCE = INFERENCE_USE_CASE
# Each data-parallel use case and the one-process use case that takes the same update on one device.
ONE_PROCESS_USE_CASE = {2: 1, 4: 3}

# Sizes of one architecture (bench_contract.models.vision): "tiny" has fewer blocks and smaller inputs, for CPU tests.
MODEL_VARIANTS = VARIANTS


@dataclass(frozen=True)
class Precision:
    name: str
    description: str
    implemented: bool
    use_cases: frozenset[int] | None = None  # where it is implemented; None: every use case
    elsewhere: str = ""  # why not in the other use cases


PRECISIONS = {
    "fp32": Precision("fp32", "float32 parameters and compute, TF32 off in both frameworks", True),
    "tf32": Precision("tf32", "float32 parameters, TF32 matmuls and convolutions in both frameworks (training; "
                              "refused with --device cpu, and at run time on a device without TF32)", True,
                      frozenset({1, 2, 3, 4}),
                      "inference compares float32 against the narrower bf16 and fp16 instead"),
    "bf16": Precision("bf16", "training: float32 master weights, bfloat16 compute (autocast; JAX casts in the "
                              "step); inference: everything in bfloat16", True),
    "fp16": Precision("fp16", "training: float32 master weights, float16 compute, dynamic loss scaling; "
                              "inference: everything in float16", True, frozenset({1, 2, 5}),
                      "loss scaling would clip DP-SGD's scaled per-example gradients, not the true ones; use bf16"),
}
# The PyTorch execution modes a campaign can compare with JAX (--torch-modes): eager, or torch.compile.
TORCH_MODES = ("eager", "compiled")


@dataclass(frozen=True)
class Model:
    name: str
    description: str


MODELS = {
    "mlp": Model("mlp", "MLP, hidden layers 512-512, ReLU"),
    "cnn": Model("cnn", "small CNN"),
    "resnet18": Model("resnet18", "ResNet-18 adapted to 32x32 inputs"),
    "resnet50": Model("resnet50", "ResNet-50 V1.5"),
    "resnet18_gn": Model("resnet18_gn", "ResNet-18 adapted to 32x32 inputs, GroupNorm (DP-trainable)"),
    "resnet50_gn": Model("resnet50_gn", "ResNet-50 V1.5, GroupNorm (DP-trainable)"),
    "vit_b_16": Model("vit_b_16", "ViT-Base, 16x16 patches"),
    "mobilenet_v3_small": Model("mobilenet_v3_small", "MobileNetV3-Small"),
    "efficientnet_b0": Model("efficientnet_b0", "EfficientNet-B0"),
    "transformer": Model("transformer", "transformer encoder text classifier (pre-norm, mean-pooled)"),
    "gpt": Model("gpt", "GPT-2 decoder-only language model, next-token loss"),
    "gcn": Model("gcn", "two-layer GCN (Kipf & Welling), segment sums"),
}


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

# What runs today: (benchmark, model) -> the use cases both backends implement for it. Everything else
# declared above is refused at plan time. A combination is added here when both backends run it.
IMPLEMENTED: dict[tuple[str, str], frozenset[int]] = {
    ("digits", "mlp"): frozenset({1, 2, 3, 4, INFERENCE}),
    ("mnist", "mlp"): frozenset({1, 2, 3, 4, INFERENCE}),
    # The vision models. Those with batch norm train on one device only (see BATCH_NORM_MODELS).
    ("imagenet", "resnet50"): frozenset({1, INFERENCE}),
    ("imagenet", "vit_b_16"): frozenset({1, 2, 3, 4, INFERENCE}),
    ("imagenet", "mobilenet_v3_small"): frozenset({1, INFERENCE}),
    ("imagenet", "efficientnet_b0"): frozenset({1, INFERENCE}),
    ("cifar10", "resnet18"): frozenset({1, INFERENCE}),
    # Their GroupNorm variants normalise each example alone, so they run everything (DP-SGD included).
    ("cifar10", "resnet18_gn"): frozenset({1, 2, 3, 4, INFERENCE}),
    ("imagenet", "resnet50_gn"): frozenset({1, 2, 3, 4, INFERENCE}),
    ("mnist", "cnn"): frozenset({1, 2, 3, 4, INFERENCE}),
    ("cifar10", "cnn"): frozenset({1, 2, 3, 4, INFERENCE}),
    ("nlp", "transformer"): frozenset({1, 2, 3, 4}),
    ("nlp", "gpt"): frozenset({1, 2}),
    ("gnn", "gcn"): frozenset({1, 2, 3, 4}),
}

# Models with batch norm, and why they run neither per-sample gradients nor data-parallel training.
BATCH_NORM_MODELS = ("resnet18", "resnet50", "mobilenet_v3_small", "efficientnet_b0")
# The models that can (no batch norm), for the message; the last two are the ResNets' GroupNorm variants.
PER_SAMPLE_MODELS = ("mlp", "cnn", "vit_b_16", "resnet18_gn", "resnet50_gn")
BATCH_NORM_REFUSALS = {
    3: "batch norm mixes the examples of a batch, so per-sample gradients are undefined for it "
       f"(Opacus refuses it too); per-sample gradients run for {', '.join(PER_SAMPLE_MODELS)}",
    2: "PyTorch's DistributedDataParallel takes batch-norm statistics per rank, a sharded JAX step takes them "
       "over the global batch, and SyncBatchNorm, which would align them, runs on GPUs only, so the two "
       "frameworks would not train the same model",
}
BATCH_NORM_REFUSALS[4] = BATCH_NORM_REFUSALS[3]

# Models whose activations are images (N, C, H, W) all the way: PyTorch's channels_last applies to them.
CONVOLUTIONAL = ("cnn", "resnet18", "resnet50", "mobilenet_v3_small", "efficientnet_b0", "resnet18_gn",
                 "resnet50_gn")

DEVICES = ("auto", "cpu", "gpu")


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


def built_models() -> list[str]:
    """Models that both backends build: those with at least one implemented (benchmark, model) entry."""
    return [name for name in MODELS if any(model == name and cases for (_, model), cases in IMPLEMENTED.items())]


def inference_models() -> list[str]:
    """Built models that also run inference (use case 5): what `validate` compares forward pass by forward pass."""
    return [name for name in built_models()
            if any(model == name and INFERENCE in cases for (_, model), cases in IMPLEMENTED.items())]


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
    implemented = IMPLEMENTED.get((bench.name, model), frozenset())
    if model in BATCH_NORM_MODELS and case.number in BATCH_NORM_REFUSALS:
        return f"use case {case.number} ({case.title}) is refused for {model}: {BATCH_NORM_REFUSALS[case.number]}"
    if case.number not in implemented:
        runs = f"it runs use cases {', '.join(map(str, sorted(implemented)))}" if implemented else "it runs nothing yet"
        return (f"use case {case.number} ({case.title}) is declared but not implemented yet for "
                f"{bench.name}/{model} ({runs})")
    if not PRECISIONS[precision].implemented:
        implemented_precisions = [p.name for p in PRECISIONS.values() if p.implemented]
        return f"precision {precision!r} is declared but not implemented yet (implemented: {', '.join(implemented_precisions)})"
    cases = PRECISIONS[precision].use_cases
    if cases is not None and case.number not in cases:
        return (f"precision {precision!r} is implemented for use case {', '.join(map(str, sorted(cases)))} only, "
                f"not for use case {case.number} ({case.title}): {PRECISIONS[precision].elsewhere}")
    return None
