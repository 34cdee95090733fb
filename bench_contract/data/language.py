"""The language model's data (the nlp benchmark's `gpt`): token sequences and their next tokens, the same ids in
the same order for both frameworks.

A sample is a window of the model's context length: x holds its tokens, y the token after each one (x shifted by
one), so the loss is next-token cross-entropy over every position and "accuracy" the fraction of next tokens
predicted exactly.
- Real data: the texts of the nlp benchmark's `train.tsv` and `test.tsv` (bench_contract.data.text; the labels are
  not used), through a byte-level tokenizer: each UTF-8 byte is one token, ids 0-255, so no vocabulary is learnt
  from the data and none can differ between the frameworks. The texts are joined by newlines and cut into
  non-overlapping windows of context + 1 bytes; a fixed tenth of the training windows is the validation split.
- Synthetic data: a fixed random Markov chain over the variant's vocabulary, in which each token is followed by one
  of its SUCCESSORS likely successors most of the time: learnable, so the loss curve means something.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from bench_contract.data.datasets import SPLIT_SEED, DataError, Dataset, _split
from bench_contract.data.text import TEST_FILE, TRAIN_FILE, read_labelled_lines
from bench_contract.models.language import GPT, GPTConfig

BYTE_VOCABULARY = 256
SUCCESSORS = 4
# How often the chain takes one of a token's likely successors, not any token at all.
FOLLOW_PROBABILITY = 0.9


def byte_tokens(texts: list[str]) -> np.ndarray:
    """The texts, joined by newlines, as one int32 array of UTF-8 byte values."""
    return np.frombuffer("\n".join(texts).encode("utf-8"), dtype=np.uint8).astype(np.int32)


def windows(tokens: np.ndarray, context: int) -> tuple[np.ndarray, np.ndarray]:
    """(inputs, next tokens), each (windows, context): non-overlapping windows of context + 1 tokens."""
    count = len(tokens) // (context + 1)
    blocks = tokens[: count * (context + 1)].reshape(count, context + 1)
    return np.ascontiguousarray(blocks[:, :-1]), np.ascontiguousarray(blocks[:, 1:])


def file_windows(path: Path, context: int) -> tuple[np.ndarray, np.ndarray]:
    _, texts = read_labelled_lines(path)
    x, y = windows(byte_tokens(texts), context)
    if len(x) == 0:
        raise DataError(f"{path} holds fewer than {context + 1} bytes of text, one window of the language "
                        f"model's context")
    return x, y


def load_language(data_dir: str | None, config: GPTConfig) -> Dataset:
    """The language model's splits from the nlp benchmark's files."""
    if config.vocab_size < BYTE_VOCABULARY:
        raise DataError(f"the byte-level tokenizer needs a vocabulary of {BYTE_VOCABULARY} ids; "
                        f"this model has {config.vocab_size}")
    if not data_dir:
        raise DataError(f"nlp needs --data-dir pointing at a folder with {TRAIN_FILE} and {TEST_FILE}")
    root = Path(data_dir)
    missing = [name for name in (TRAIN_FILE, TEST_FILE) if not (root / name).is_file()]
    if missing:
        raise DataError(f"data directory {root} lacks {', '.join(missing)} (`<label>\\t<text>` per line)")
    x_all, y_all = file_windows(root / TRAIN_FILE, config.context)
    if len(x_all) < 2:
        raise DataError(f"{root / TRAIN_FILE} needs text for at least two windows of {config.context + 1} bytes "
                        "(training and validation)")
    x_test, y_test = file_windows(root / TEST_FILE, config.context)
    order = np.random.default_rng(SPLIT_SEED).permutation(len(x_all))
    val_idx, train_idx = order[: max(1, len(order) // 10)], order[max(1, len(order) // 10):]
    return Dataset("nlp", "real", x_all[train_idx], y_all[train_idx], x_all[val_idx], y_all[val_idx],
                   x_test, y_test, config.vocab_size)


def markov_tokens(samples: int, config: GPTConfig) -> np.ndarray:
    """(samples, context + 1) tokens of the fixed chain, each sequence from its own random start."""
    rng = np.random.default_rng(SPLIT_SEED)
    successors = rng.integers(config.vocab_size, size=(config.vocab_size, SUCCESSORS))
    tokens = np.empty((samples, config.context + 1), dtype=np.int32)
    tokens[:, 0] = rng.integers(config.vocab_size, size=samples)
    for position in range(1, config.context + 1):
        likely = successors[tokens[:, position - 1], rng.integers(SUCCESSORS, size=samples)]
        anything = rng.integers(config.vocab_size, size=samples)
        tokens[:, position] = np.where(rng.random(samples) < FOLLOW_PROBABILITY, likely, anything)
    return tokens


def synthetic_language(samples: int, variant: str) -> Dataset:
    config = GPT[variant]
    tokens = markov_tokens(samples, config)
    tenth = max(1, samples // 10)
    return _split("nlp", tokens[:, :-1], tokens[:, 1:], val=tenth, test=tenth, num_classes=config.vocab_size,
                  source="synthetic")
