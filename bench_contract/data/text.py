"""The nlp benchmark's contract: the transformer's sizes, the tokenizer and vocabulary, the text reader and the
synthetic text, so that both frameworks get the same token ids and build the same network.

Real data is two files in --data-dir, `train.tsv` and `test.tsv`, UTF-8, one example per line:
`<label>\t<text>` (the label is everything before the first tab; empty lines are skipped). Labels are class
names; classes are the training file's labels in sorted order (numerically when every label is an integer).
The validation split is a fixed tenth of train.tsv; the vocabulary is built from the rest.

Token ids: 0 is padding, 1 an unknown word, 2 the class token that starts every sequence (it keeps every row
of the attention mask and the mean pooling non-empty). Words are lower-cased runs of letters and
digits; the vocabulary keeps the VOCAB_SIZE - 3 most frequent words of the training split (ties in
alphabetical order). A text becomes the class token, then its first SEQ_LEN - 1 known-or-unknown words, then
padding up to SEQ_LEN; padding is masked out of attention in both frameworks.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bench_contract.data.datasets import SPLIT_SEED, DataError, Dataset, _split

PAD_ID, UNK_ID, CLS_ID = 0, 1, 2
SPECIAL_TOKENS = 3
# Data-level sizes, the same for every model variant (the reader does not know the variant).
VOCAB_SIZE = 8192
SEQ_LEN = 128
LAYER_NORM_EPS = 1e-5  # PyTorch's nn.LayerNorm default
TRAIN_FILE, TEST_FILE = "train.tsv", "test.tsv"
WORD = re.compile(r"[^\W_]+")  # letters and digits, any script


@dataclass(frozen=True)
class TransformerConfig:
    d_model: int
    heads: int
    layers: int
    mlp_dim: int


# A pre-norm encoder (LayerNorm before attention and before the MLP, one after the last layer), exact GELU,
# no dropout, the mean over the non-padding positions to a linear classifier. (Pooling the class token alone
# learned far more slowly with plain SGD.)
TRANSFORMER = {
    "full": TransformerConfig(d_model=256, heads=4, layers=4, mlp_dim=1024),
    "tiny": TransformerConfig(d_model=32, heads=2, layers=1, mlp_dim=64),
}


def words(text: str) -> list[str]:
    return WORD.findall(text.lower())


def build_vocabulary(texts: list[str], size: int = VOCAB_SIZE) -> dict[str, int]:
    """word -> id for the size - 3 most frequent words (ties alphabetical), ids after the special tokens."""
    counts = Counter(w for text in texts for w in words(text))
    ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))[: size - SPECIAL_TOKENS]
    return {word: SPECIAL_TOKENS + i for i, (word, _) in enumerate(ranked)}


def encode(texts: list[str], vocabulary: dict[str, int], seq_len: int = SEQ_LEN) -> np.ndarray:
    """(len(texts), seq_len) int32 ids: class token, truncated words, padding."""
    ids = np.full((len(texts), seq_len), PAD_ID, dtype=np.int32)
    for row, text in enumerate(texts):
        tokens = [CLS_ID] + [vocabulary.get(w, UNK_ID) for w in words(text)][: seq_len - 1]
        ids[row, : len(tokens)] = tokens
    return ids


def read_labelled_lines(path: Path) -> tuple[list[str], list[str]]:
    """(labels, texts) of a `<label>\\t<text>` file."""
    labels, texts = [], []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, start=1):
            line = line.rstrip("\r\n")
            if not line.strip():
                continue
            label, tab, text = line.partition("\t")
            if not tab or not label.strip():
                raise DataError(f"{path} line {number} is not `<label>\\t<text>`")
            labels.append(label.strip())
            texts.append(text)
    if not labels:
        raise DataError(f"{path} holds no labelled lines")
    return labels, texts


def class_names(labels: list[str]) -> list[str]:
    unique = set(labels)
    if all(re.fullmatch(r"-?\d+", label) for label in unique):
        return sorted(unique, key=int)
    return sorted(unique)


def load_text(data_dir: str | None):
    if not data_dir:
        raise DataError(f"nlp needs --data-dir pointing at a folder with {TRAIN_FILE} and {TEST_FILE} "
                        "(`<label>\\t<text>` per line)")
    root = Path(data_dir)
    missing = [name for name in (TRAIN_FILE, TEST_FILE) if not (root / name).is_file()]
    if missing:
        raise DataError(f"data directory {root} lacks {', '.join(missing)} (`<label>\\t<text>` per line)")
    train_labels, train_texts = read_labelled_lines(root / TRAIN_FILE)
    test_labels, test_texts = read_labelled_lines(root / TEST_FILE)
    classes = class_names(train_labels)
    index = {name: i for i, name in enumerate(classes)}
    unknown = sorted(set(test_labels) - set(index))
    if unknown:
        raise DataError(f"{root / TEST_FILE} has labels that {TRAIN_FILE} lacks: {', '.join(unknown[:5])}")
    if len(train_texts) < 2:
        raise DataError(f"{root / TRAIN_FILE} needs at least two lines (training and validation)")
    order = np.random.default_rng(SPLIT_SEED).permutation(len(train_texts))
    val_count = max(1, len(order) // 10)
    val_idx, train_idx = order[:val_count], order[val_count:]
    vocabulary = build_vocabulary([train_texts[i] for i in train_idx])
    x_all = encode(train_texts, vocabulary)
    y_all = np.array([index[label] for label in train_labels], dtype=np.int32)
    x_test = encode(test_texts, vocabulary)
    y_test = np.array([index[label] for label in test_labels], dtype=np.int32)
    return Dataset("nlp", "real", x_all[train_idx], y_all[train_idx], x_all[val_idx], y_all[val_idx],
                   x_test, y_test, len(classes))


SYNTHETIC_CLASSES = 4
TOPIC_WORDS = 4  # per class


def synthetic_text(samples: int):
    """Random token sequences of random length, labelled by a fixed rule: the class whose topic words occur
    most often (ties to the lower class). Each sequence is drawn around one class, so the classes are balanced
    and learnable, but noise words and other classes' topic words make the rule the only exact answer."""
    rng = np.random.default_rng(SPLIT_SEED)
    topics = SPECIAL_TOKENS + np.arange(SYNTHETIC_CLASSES * TOPIC_WORDS).reshape(SYNTHETIC_CLASSES, TOPIC_WORDS)
    x = np.full((samples, SEQ_LEN), PAD_ID, dtype=np.int32)
    for row in range(samples):
        length = int(rng.integers(SEQ_LEN // 4, SEQ_LEN))
        tokens = rng.integers(topics.max() + 1, VOCAB_SIZE, size=length)  # noise words
        chosen = int(rng.integers(SYNTHETIC_CLASSES))
        positions = rng.choice(length, size=length // 4, replace=False)
        # Most topic words come from the chosen class, some from any class.
        classes = np.where(rng.random(len(positions)) < 0.6, chosen, rng.integers(SYNTHETIC_CLASSES, size=len(positions)))
        tokens[positions] = topics[classes, rng.integers(TOPIC_WORDS, size=len(positions))]
        x[row, 0] = CLS_ID
        x[row, 1:length] = tokens[: length - 1]
    counts = np.stack([np.isin(x, topics[c]).sum(axis=1) for c in range(SYNTHETIC_CLASSES)], axis=1)
    y = np.argmax(counts, axis=1).astype(np.int32)
    tenth = max(1, samples // 10)
    return _split("nlp", x, y, val=tenth, test=tenth, num_classes=SYNTHETIC_CLASSES, source="synthetic")
