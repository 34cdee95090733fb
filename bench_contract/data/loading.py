"""The dispatcher: a benchmark's data set, real or synthetic, from the reader that knows its files.

Both backends load through here. It imports every reader (datasets' array readers, images, text, graph); no
reader imports it, so the readers never import each other.
"""

from __future__ import annotations

from bench_contract.data.datasets import (
    SYNTHETIC_SHAPES,
    SYNTHETIC_VARIANT_SIZED,
    DataError,
    Dataset,
    load_cifar10,
    load_digits,
    load_mnist,
    synthetic_images,
)
from bench_contract.data.graph import load_graph, synthetic_graph
from bench_contract.data.images import load_image_folders
from bench_contract.data.language import load_language, synthetic_language
from bench_contract.data.text import load_text, synthetic_text
from bench_contract.models import language, vision


def load_dataset(benchmark: str, source: str, data_dir: str | None = None, synthetic_samples: int = 2048,
                 variant: str = "full", model: str | None = None) -> Dataset:
    """The benchmark's splits; `variant` (the model's size) fixes the image size where the benchmark has several
    (imagenet: 224x224 full, 64x64 tiny) and the language model's context. The nlp benchmark's language model
    (`model` gpt) reads its text as token windows with their next tokens (bench_contract.data.language)."""
    if benchmark == "nlp" and model == language.MODEL_NAME:
        if source == "synthetic":
            return synthetic_language(synthetic_samples, variant)
        return load_language(data_dir, language.GPT[variant])
    if source == "synthetic":
        return synthetic_dataset(benchmark, synthetic_samples, variant)
    loaders = {"digits": load_digits, "mnist": lambda: load_mnist(data_dir), "cifar10": lambda: load_cifar10(data_dir),
               "imagenet": lambda: load_image_folders(data_dir, vision.input_shape("imagenet", variant)[-1]),
               "nlp": lambda: load_text(data_dir), "gnn": lambda: load_graph(data_dir)}
    if benchmark not in loaders:
        raise DataError(f"no reader for benchmark {benchmark!r}; known: {', '.join(sorted(loaders))}")
    return loaders[benchmark]()


def synthetic_dataset(benchmark: str, samples: int, variant: str = "full") -> Dataset:
    """Synthetic data for the benchmark: text and graphs from their own generators, images (and digits' pixel
    vectors) labelled by a fixed random linear teacher (datasets.synthetic_images)."""
    if benchmark == "nlp":
        return synthetic_text(samples)
    if benchmark == "gnn":
        return synthetic_graph(samples)
    if benchmark not in SYNTHETIC_SHAPES and benchmark not in SYNTHETIC_VARIANT_SIZED:
        known = ", ".join((*SYNTHETIC_SHAPES, *SYNTHETIC_VARIANT_SIZED, "nlp", "gnn"))
        raise DataError(f"no synthetic data shape for benchmark {benchmark!r}; known: {known}")
    return synthetic_images(benchmark, samples, variant)
