"""The Dataset type, the split rules, the batch order both frameworks follow, and the readers of array data
(digits, MNIST, CIFAR-10, synthetic images).

Both backends call the same loader (bench_contract.data.loading) and the same `epoch_batches`, so they see
identical samples in an identical order. Images are kept channel-first (N, C, H, W), PyTorch's convention; a
backend that wants channel-last transposes them itself. The other readers (images, text, graph) import this
module; it imports none of them.
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import os
import pickle
import pickletools
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bench_contract.models import vision

# The split is part of the benchmark's definition, not of a run: it never follows the run's seed.
SPLIT_SEED = 20240601
# Inputs of each split that Dataset.fingerprint hashes (besides every label): enough to tell data sets apart, few
# enough to cost nothing beside loading them.
FINGERPRINT_EXAMPLES = 64
# Real data that ships with a package (scikit-learn's digits): read without a data directory.
PACKAGED_BENCHMARKS = ("digits",)

MNIST_FILES = {
    "train_images": "train-images-idx3-ubyte",
    "train_labels": "train-labels-idx1-ubyte",
    "test_images": "t10k-images-idx3-ubyte",
    "test_labels": "t10k-labels-idx1-ubyte",
}
MNIST_VALIDATION_SIZE = 5000


class DataError(ValueError):
    """Data that is missing or malformed."""


@dataclass(frozen=True)
class Dataset:
    name: str
    source: str  # "real" or "synthetic"
    x_train: np.ndarray
    y_train: np.ndarray
    x_val: np.ndarray
    y_val: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    num_classes: int
    # gnn: the bench_contract.data.graph.Graph the model holds (x are its node ids); None for every other benchmark.
    graph: Any = None

    @property
    def sample_shape(self) -> tuple[int, ...]:
        return tuple(self.x_train.shape[1:])

    def fingerprint(self) -> str:
        """Which data a run saw, in words and a digest: the three splits' sizes and the sha256 of every split's
        shape, dtype and labels, up to FINGERPRINT_EXAMPLES inputs of each spread over it, and the graph's arrays.
        Two runs given another data set, or the same one at another size (a second --data-dir, another
        --synthetic-samples), differ; its cost is fixed, whatever the data set's size. The certificate compares it
        between the two sides of a row (orchestrator.results.certificate)."""
        digest = hashlib.sha256()
        for x, y in ((self.x_train, self.y_train), (self.x_val, self.y_val), (self.x_test, self.y_test)):
            picked = x[np.linspace(0, len(x) - 1, min(len(x), FINGERPRINT_EXAMPLES)).astype(int)] if len(x) else x
            for array in (picked, np.asarray(y)):
                digest.update(f"{array.shape}{array.dtype}".encode())
                digest.update(np.ascontiguousarray(array).tobytes())
        for array in vars(self.graph).values() if self.graph is not None else ():
            digest.update(np.ascontiguousarray(np.asarray(array)).tobytes())
        sizes = "/".join(f"{len(y):,}" for y in (self.y_train, self.y_val, self.y_test))
        return f"{sizes} train/val/test examples, sha256 {digest.hexdigest()[:16]}"


def epoch_batches(num_samples: int, batch_size: int, seed: int, epoch: int) -> list[np.ndarray]:
    """Index arrays of the training batches of one epoch; the last partial batch is dropped.

    Dropping it keeps every timed step the same shape, so no framework recompiles mid-epoch.
    """
    if batch_size > num_samples:
        raise DataError(f"batch size {batch_size} is larger than the {num_samples} training samples")
    order = np.random.default_rng([seed, epoch]).permutation(num_samples)
    full = num_samples // batch_size
    return [order[i * batch_size : (i + 1) * batch_size] for i in range(full)]


def _split(name: str, x: np.ndarray, y: np.ndarray, val: int, test: int, num_classes: int, source: str) -> Dataset:
    order = np.random.default_rng(SPLIT_SEED).permutation(len(x))
    test_idx, val_idx, train_idx = order[:test], order[test : test + val], order[test + val :]
    return Dataset(name, source, x[train_idx], y[train_idx], x[val_idx], y[val_idx], x[test_idx], y[test_idx], num_classes)


def standardized(data: Dataset, axis: int | tuple[int, ...] | None) -> Dataset:
    """Centre and scale every split with statistics of the training split only (per feature if axis=0,
    per channel if axis=(0, 2, 3), over everything if None)."""
    mean = data.x_train.mean(axis=axis, keepdims=axis is not None)
    std = data.x_train.std(axis=axis, keepdims=axis is not None)
    std = np.where(std > 0, std, 1.0)  # a feature that never varies (digits' corner pixels) stays 0

    def scale(x: np.ndarray) -> np.ndarray:
        return ((x - mean) / std).astype(np.float32)

    return dataclasses.replace(data, x_train=scale(data.x_train), x_val=scale(data.x_val), x_test=scale(data.x_test))


def load_digits() -> Dataset:
    """scikit-learn's 8x8 digits: 1,797 real images that ship with the package, standardised per pixel."""
    x, y = read_digits_file(digits_file())
    return standardized(_split("digits", x.astype(np.float32), y.astype(np.int32), val=180, test=360,
                               num_classes=10, source="real"), axis=0)


def digits_file() -> Path:
    """The digits file inside the installed scikit-learn, found without importing scikit-learn: its import (scipy
    beneath it) took 3 s in every digits cell here, longer than the cell's own training, and the suite starts
    hundreds of them."""
    import importlib.util

    spec = importlib.util.find_spec("sklearn")  # finds the package; runs none of its code
    path = Path(spec.submodule_search_locations[0]) / "datasets" / "data" / "digits.csv.gz" if spec else None
    if path is None or not path.is_file():
        raise DataError("the digits benchmark reads scikit-learn's copy of the data set (datasets/data/digits.csv.gz), "
                        "and this environment's scikit-learn has none: install scikit-learn in it")
    return path


def read_digits_file(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """(images as 64 pixel values, labels) of the file, read as sklearn.datasets.load_digits reads it (each line 64
    pixel values and the label, comma-separated, gzipped): tests/unit/test_digits_file.py checks the two agree."""
    with gzip.open(path, mode="rt", encoding="utf-8") as text:
        data = np.loadtxt(text, delimiter=",")
    return data[:, :-1], data[:, -1].astype(int)


def mnist_file(data_dir: Path, stem: str) -> Path:
    """The MNIST file `stem` in data_dir, as shipped (gzipped) or unpacked."""
    for candidate in (data_dir / stem, data_dir / f"{stem}.gz"):
        if candidate.is_file():
            return candidate
    raise DataError(f"MNIST file {stem}[.gz] not found in {data_dir}")


def missing_mnist_files(data_dir: str | os.PathLike[str]) -> list[str]:
    """The standard MNIST files that are absent from data_dir (each may also be gzipped)."""
    data_dir = Path(data_dir)
    return [
        stem for stem in MNIST_FILES.values()
        if not (data_dir / stem).is_file() and not (data_dir / f"{stem}.gz").is_file()
    ]


def open_idx(path: Path):
    """An IDX file opened for reading, gzipped or not."""
    return gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")


def read_idx_shape(f, path: Path) -> tuple[int, ...]:
    """The shape in the header at the start of the open IDX file f; f is left at the first value."""
    magic = f.read(4)
    if len(magic) < 4:
        raise DataError(f"{path} is too short to be an IDX file")
    zero, dtype_code, ndim = struct.unpack(">HBB", magic)
    if zero != 0 or dtype_code != 0x08:
        raise DataError(f"{path} is not an unsigned-byte IDX file")
    dims = f.read(4 * ndim)
    if len(dims) < 4 * ndim:
        raise DataError(f"{path} ends inside its header")
    return struct.unpack(f">{ndim}I", dims)


def read_idx(path: Path) -> np.ndarray:
    """Read one IDX file (the format MNIST ships in), gzipped or not."""
    with open_idx(path) as f:
        shape = read_idx_shape(f, path)
        body = np.frombuffer(f.read(), dtype=np.uint8)
    if body.size != int(np.prod(shape)):
        raise DataError(f"{path} holds {body.size} values, its header promises {int(np.prod(shape))}")
    return body.reshape(shape)


def mnist_split_sizes(num_images: int) -> tuple[int, int]:
    """(training, validation) sizes load_mnist makes of MNIST's training file: its last 5,000 images validate,
    whatever the file holds (a file of 5,000 or fewer leaves no training split)."""
    validation = min(num_images, MNIST_VALIDATION_SIZE)
    return num_images - validation, validation


def held_out_split(num_images: int, usual: int) -> tuple[int, int]:
    """(training, validation) sizes of a training set whose loader holds out `usual` images for validation, or a
    tenth (at least one) of a set of 2 * usual or fewer, so that a small folder still trains (CIFAR-10, image
    folders)."""
    validation = usual if num_images > 2 * usual else max(1, num_images // 10)
    validation = min(validation, num_images)
    return num_images - validation, validation


def load_mnist(data_dir: str | None) -> Dataset:
    """MNIST from its standard IDX files, standardised; the last 5,000 training images are the validation split."""
    if not data_dir:
        raise DataError("MNIST needs --data-dir pointing at the folder with train-images-idx3-ubyte[.gz] and its siblings")
    root = Path(data_dir)
    if not root.is_dir():
        raise DataError(f"data directory {root} does not exist")
    arrays = {key: read_idx(mnist_file(root, stem)) for key, stem in MNIST_FILES.items()}
    x_train = arrays["train_images"].astype(np.float32)[:, None, :, :]
    x_test = arrays["test_images"].astype(np.float32)[:, None, :, :]
    y_train = arrays["train_labels"].astype(np.int32)
    y_test = arrays["test_labels"].astype(np.int32)
    if len(x_train) != len(y_train) or len(x_test) != len(y_test):
        raise DataError(f"MNIST images and labels in {root} have different counts")
    t, _ = mnist_split_sizes(len(x_train))
    data = Dataset("mnist", "real", x_train[:t], y_train[:t], x_train[t:], y_train[t:], x_test, y_test, 10)
    return standardized(data, axis=None)


CIFAR10_TRAIN_BATCHES = tuple(f"data_batch_{i}" for i in range(1, 6))
CIFAR10_TEST_BATCH = "test_batch"
CIFAR10_VALIDATION_SIZE = 5000


class _ArraysOnly(pickle.Unpickler):
    """Unpickles CIFAR-10's batches (dicts of bytes, lists and numpy arrays) and nothing else: a pickle can
    name any callable, and a data folder is not code the user meant to run."""

    ALLOWED = frozenset({
        ("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
        ("numpy.core.multiarray", "scalar"), ("numpy._core.multiarray", "scalar"),
        ("numpy.core.numeric", "_frombuffer"), ("numpy._core.numeric", "_frombuffer"),
        ("numpy", "ndarray"), ("numpy", "dtype"),
        ("_codecs", "encode"),  # how Python 3 writes bytes at protocol 2, for batches re-saved from Python 3
    })

    def find_class(self, module: str, name: str):
        if (module, name) not in self.ALLOWED:
            raise DataError(f"a CIFAR-10 batch may hold only arrays, lists and bytes, not {module}.{name}")
        return super().find_class(module, name)


def cifar10_folder(data_dir: str | os.PathLike[str]) -> Path:
    """The folder holding the batches: data_dir itself, or the cifar-10-batches-py folder the archive unpacks to."""
    root = Path(data_dir)
    nested = root / "cifar-10-batches-py"
    return nested if nested.is_dir() and not (root / CIFAR10_TEST_BATCH).is_file() else root


def missing_cifar10_files(data_dir: str | os.PathLike[str]) -> list[str]:
    folder = cifar10_folder(data_dir)
    return [name for name in (*CIFAR10_TRAIN_BATCHES, CIFAR10_TEST_BATCH) if not (folder / name).is_file()]


def read_cifar_batch(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """One CIFAR-10 python batch: images (N, 3, 32, 32) uint8, channel-first as stored, and labels."""
    try:
        with open(path, "rb") as f:
            batch = _ArraysOnly(f, encoding="bytes").load()
    except (pickle.UnpicklingError, EOFError, ValueError) as exc:
        raise DataError(f"{path} is not a CIFAR-10 python batch: {exc}") from None
    if not isinstance(batch, dict) or b"data" not in batch or b"labels" not in batch:
        raise DataError(f"{path} is not a CIFAR-10 python batch (no data and labels entries)")
    data = np.asarray(batch[b"data"], dtype=np.uint8)
    labels = np.asarray(batch[b"labels"], dtype=np.int32)
    if data.ndim != 2 or data.shape[1] != 3 * 32 * 32 or len(data) != len(labels):
        raise DataError(f"{path} holds data of shape {data.shape} and {len(labels)} labels; "
                        "CIFAR-10 rows are 3072 bytes (3x32x32), one label each")
    return data.reshape(-1, 3, 32, 32), labels


def load_cifar10(data_dir: str | None) -> Dataset:
    """CIFAR-10 from its standard python batches, standardised per channel with training statistics; the
    last 5,000 training images (a tenth of a small folder) are the validation split."""
    if not data_dir:
        raise DataError("CIFAR-10 needs --data-dir pointing at the folder with data_batch_1..5 and test_batch")
    if not Path(data_dir).is_dir():
        raise DataError(f"data directory {data_dir} does not exist")
    missing = missing_cifar10_files(data_dir)
    if missing:
        raise DataError(f"data directory {data_dir} lacks the CIFAR-10 files {', '.join(missing)}")
    folder = cifar10_folder(data_dir)
    parts = [read_cifar_batch(folder / name) for name in CIFAR10_TRAIN_BATCHES]
    x_train = np.concatenate([x for x, _ in parts]).astype(np.float32) / 255.0
    y_train = np.concatenate([y for _, y in parts])
    x_test, y_test = read_cifar_batch(folder / CIFAR10_TEST_BATCH)
    t, _ = held_out_split(len(x_train), CIFAR10_VALIDATION_SIZE)
    data = Dataset("cifar10", "real", x_train[:t], y_train[:t], x_train[t:], y_train[t:],
                   x_test.astype(np.float32) / 255.0, y_test, 10)
    return standardized(data, axis=(0, 2, 3))


# The opcodes that build a plain list of ints in every pickle protocol: the list, its items in batches (MARK ...
# APPENDS, or one item and APPEND), memo entries, and protocol 4's frames.
_PICKLED_INTS = {"INT", "BININT", "BININT1", "BININT2", "LONG", "LONG1", "LONG4"}
_PICKLED_INT_LIST = _PICKLED_INTS | {"MARK", "APPEND", "APPENDS", "PUT", "BINPUT", "LONG_BINPUT", "MEMOIZE", "FRAME"}
# Opcodes allowed from a dict key to the start of its list: Python 3 writes bytes at protocols 0 to 2 as
# _codecs.encode("labels", "latin1"), which takes the encoding's string, a tuple, a reduce and their memo entries
# (9 opcodes, the list's own included, at protocol 0).
_KEY_TO_VALUE_OPCODES = 10


def count_pickled_labels(path: Path) -> int | None:
    """How many labels a CIFAR-10 python batch holds, read from its pickle's opcodes up to the end of the labels
    list, building nothing: CIFAR-10's own batches pickle the labels before the 30 MB of pixels, so only their
    first kilobytes are read. None if the labels are not a plain list of ints (a batch re-saved with an array)."""
    with open(path, "rb") as f:
        opcodes = pickletools.genops(f)
        for _, arg, _ in opcodes:
            if arg == "labels" or arg == b"labels":
                return _length_of_int_list(opcodes)
    return None


def _length_of_int_list(opcodes) -> int | None:
    """The length of the list of ints the next opcodes build, or None if they build something else."""
    for _, (opcode, _, _) in zip(range(_KEY_TO_VALUE_OPCODES), opcodes):
        if opcode.name in ("EMPTY_LIST", "LIST"):
            break
    else:
        return None
    length, last = 0, opcode.name
    for opcode, _, _ in opcodes:
        if opcode.name not in _PICKLED_INT_LIST:
            # A list of ints ends after its last batch; anything else (a numpy scalar) is not one.
            return length if last in ("APPEND", "APPENDS") else None
        length += opcode.name in _PICKLED_INTS
        last = opcode.name
    return None


def mnist_train_images(data_dir: Path) -> int | None:
    """The images in MNIST's training file, from its 16-byte header."""
    path = mnist_file(data_dir, MNIST_FILES["train_images"])
    with open_idx(path) as f:
        shape = read_idx_shape(f, path)
    return shape[0] if len(shape) == 3 else None


def cifar10_train_images(data_dir: Path) -> int | None:
    """The images in CIFAR-10's five training batches, from their label lists."""
    folder = cifar10_folder(data_dir)
    counts = [count_pickled_labels(folder / name) for name in CIFAR10_TRAIN_BATCHES]
    return None if None in counts else sum(counts)


def counted_train_split(benchmark: str, data_dir: str | os.PathLike[str] | None) -> int | None:
    """The size of the training split the loader will make of data_dir's files, counted without reading an image,
    so that the plan can compute the privacy budget for it on a login node. None where counting is not cheap
    (image folders, text, graphs) or the files cannot be read (the loader then says what is wrong)."""
    counters = {"mnist": (mnist_train_images, mnist_split_sizes),
                "cifar10": (cifar10_train_images, lambda n: held_out_split(n, CIFAR10_VALIDATION_SIZE))}
    if benchmark not in counters or not data_dir:
        return None
    count, split = counters[benchmark]
    try:
        total = count(Path(data_dir))
    except (OSError, EOFError, ValueError, zlib.error):  # DataError is a ValueError; a broken gzip raises the others
        return None
    return None if total is None else split(total)[0]


SYNTHETIC_SHAPES = {"digits": (64,), "mnist": (1, 28, 28), "cifar10": (3, 32, 32)}
# Benchmarks whose synthetic images take the model variant's input size (bench_contract.models.vision.INPUT_SHAPES).
SYNTHETIC_VARIANT_SIZED = ("imagenet",)
# ImageNet's teacher sees the image averaged over an 8x8 grid of blocks: a teacher on every pixel of a 224x224
# image would be a 150,528 x 1,000 matrix (600 MB).
TEACHER_GRID = 8


def synthetic_images(benchmark: str, samples: int, variant: str = "full") -> Dataset:
    """Random inputs labelled by a fixed random linear teacher: learnable, so accuracy still means something.
    Text and graphs have their own generators (bench_contract.data.text, bench_contract.data.graph);
    bench_contract.data.loading.synthetic_dataset picks one of the three."""
    if benchmark in SYNTHETIC_VARIANT_SIZED:
        shape, classes = vision.input_shape(benchmark, variant), vision.NUM_CLASSES[benchmark]
    elif benchmark in SYNTHETIC_SHAPES:
        shape, classes = SYNTHETIC_SHAPES[benchmark], 10
    else:
        known = ", ".join((*SYNTHETIC_SHAPES, *SYNTHETIC_VARIANT_SIZED))
        raise DataError(f"no synthetic data shape for benchmark {benchmark!r}; known: {known}")
    rng = np.random.default_rng(SPLIT_SEED)
    x = rng.standard_normal((samples, *shape), dtype=np.float32)
    features = x.reshape(samples, -1)
    if benchmark in SYNTHETIC_VARIANT_SIZED:
        c, h, w = shape
        g = TEACHER_GRID
        features = x.reshape(samples, c, g, h // g, g, w // g).mean(axis=(3, 5)).reshape(samples, -1)
    teacher = rng.standard_normal((features.shape[1], classes), dtype=np.float32)
    y = np.argmax(features @ teacher, axis=1).astype(np.int32)
    tenth = max(1, samples // 10)
    return _split(benchmark, x, y, val=tenth, test=tenth, num_classes=classes, source="synthetic")
