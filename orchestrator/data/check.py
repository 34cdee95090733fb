"""`main.py data check`: the readers' checks on a data directory, one line per problem, without running anything.

Each check reads the files with the contract's own readers (bench_contract.data), so what passes here is what the
backends will read; the images of an image folder are opened with Pillow (its `verify`, not a full decode).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from bench_contract.data.datasets import (
    CIFAR10_TEST_BATCH,
    CIFAR10_TRAIN_BATCHES,
    MNIST_FILES,
    PACKAGED_BENCHMARKS,
    DataError,
    cifar10_folder,
    mnist_file,
    read_cifar_batch,
    read_idx,
)
from bench_contract.data.graph import GRAPH_FILE, load_graph
from bench_contract.data.images import ImageFolder, split_folder
from bench_contract.data.text import TEST_FILE, TRAIN_FILE, read_labelled_lines
from orchestrator.data.fetch import fetch_hint
from orchestrator.errors import UsageError

MAX_LISTED = 20  # unreadable images named one by one; the rest are counted


@dataclass
class Findings:
    problems: list[str] = field(default_factory=list)
    facts: list[str] = field(default_factory=list)  # what was found, for the summary


def check(benchmark: str, data_dir: str | Path) -> Findings:
    if benchmark in PACKAGED_BENCHMARKS:
        return Findings(facts=[f"{benchmark} ships with scikit-learn: no data directory to check"])
    if benchmark not in CHECKS:
        raise UsageError(f"no data check for {benchmark!r}: there are checks for {', '.join(CHECKS)}")
    root = Path(data_dir)
    if not root.is_dir():
        return Findings(problems=[f"data directory {root} does not exist{fetch_hint(benchmark, root)}"])
    found = Findings()
    CHECKS[benchmark](root, found)
    return found


def check_mnist(root: Path, found: Findings) -> None:
    arrays = {}
    for key, stem in MNIST_FILES.items():
        try:
            arrays[key] = read_idx(mnist_file(root, stem))
        except (DataError, OSError, EOFError) as exc:  # EOFError: a truncated .gz
            found.problems.append(str(exc) if isinstance(exc, DataError) else f"{stem}: unreadable ({exc})")
    for split in ("train", "test"):
        images, labels = arrays.get(f"{split}_images"), arrays.get(f"{split}_labels")
        if images is None or labels is None:
            continue
        if images.ndim != 3 or images.shape[1:] != (28, 28):
            found.problems.append(f"MNIST {split} images have shape {images.shape}, expected (N, 28, 28)")
        if len(images) != len(labels):
            found.problems.append(f"MNIST {split} split: {len(images)} images but {len(labels)} labels")
        found.facts.append(f"{split}: {len(images)} images")


def check_cifar10(root: Path, found: Findings) -> None:
    folder = cifar10_folder(root)
    for name in (*CIFAR10_TRAIN_BATCHES, CIFAR10_TEST_BATCH):
        path = folder / name
        if not path.is_file():
            found.problems.append(f"{path} is missing")
            continue
        try:
            images, _ = read_cifar_batch(path)
            found.facts.append(f"{name}: {len(images)} images")
        except (DataError, OSError) as exc:
            found.problems.append(str(exc))


def check_image_folders(root: Path, found: Findings) -> None:
    """val/ (or the folder itself) for inference, and train/ for training: classes, images per class, and every
    image readable; the two splits must name the same classes."""
    folders = {}
    for split in ("val", "train"):
        path = split_folder(root, split)
        if split == "train" and path == root:
            found.facts.append(f"no train/ folder in {root}: inference (use case 5) only")
            continue
        try:
            folders[split] = ImageFolder.scan(path)
        except DataError as exc:
            found.problems.append(str(exc))
    for split, folder in folders.items():
        counts = [sum(1 for _, label in folder.samples if label == i) for i in range(len(folder.classes))]
        found.problems += [f"{folder.root / name}: no images" for name, n in zip(folder.classes, counts) if n == 0]
        found.facts.append(f"{split}: {len(folder.classes)} classes, {len(folder)} images "
                           f"({min(counts)} to {max(counts)} per class)")
        found.problems += unreadable_images(folder)
    if len(folders) == 2 and folders["train"].classes != folders["val"].classes:
        only = sorted(set(folders["train"].classes) ^ set(folders["val"].classes))
        found.problems.append(f"train/ and val/ name different classes ({len(only)} in one only, e.g. "
                              f"{', '.join(only[:3])}): labels would not mean the same in both")


def unreadable_images(folder: ImageFolder) -> list[str]:
    try:
        from PIL import Image
    except ImportError:
        return ["Pillow is not installed in this environment, so the images were not opened"]
    bad = []
    for path, _ in folder.samples:
        try:
            with Image.open(path) as image:
                image.verify()
        except Exception as exc:  # noqa: BLE001 -- Pillow raises many types for a broken file; each is one problem line
            bad.append(f"{path}: unreadable image ({type(exc).__name__}: {exc})")
    if len(bad) > MAX_LISTED:
        bad = bad[:MAX_LISTED] + [f"... and {len(bad) - MAX_LISTED} more unreadable images in {folder.root}"]
    return bad


def check_text(root: Path, found: Findings) -> None:
    labels = {}
    for name in (TRAIN_FILE, TEST_FILE):
        path = root / name
        if not path.is_file():
            found.problems.append(f"{path} is missing (`<label>\\t<text>` per line)")
            continue
        try:
            labels[name], _ = read_labelled_lines(path)
            found.facts.append(f"{name}: {len(labels[name])} lines, {len(set(labels[name]))} labels")
        except (DataError, OSError, UnicodeDecodeError) as exc:
            found.problems.append(f"{path}: {exc}" if not isinstance(exc, DataError) else str(exc))
    if len(labels) == 2:
        unknown = sorted(set(labels[TEST_FILE]) - set(labels[TRAIN_FILE]))
        if unknown:
            found.problems.append(f"{root / TEST_FILE} has labels that {TRAIN_FILE} lacks: {', '.join(unknown[:5])}")


def check_graph(root: Path, found: Findings) -> None:
    try:
        data = load_graph(str(root))
        found.facts.append(f"{GRAPH_FILE}: {data.graph.num_nodes} nodes, {data.num_classes} classes")
    except (DataError, OSError, ValueError) as exc:  # ValueError: not an npz at all
        found.problems.append(str(exc) if isinstance(exc, DataError) else f"{root / GRAPH_FILE}: unreadable ({exc})")


CHECKS: dict[str, Callable[[Path, Findings], None]] = {
    "mnist": check_mnist, "cifar10": check_cifar10, "imagenet": check_image_folders, "nlp": check_text,
    "gnn": check_graph,
}
