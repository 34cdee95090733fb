"""ImageNet-style image folders (class subfolders of JPEG files, such as ImageNet-100), read the same way by
both backends, so that they see identical pixels.

Decoding is Pillow's (the same pinned version in both environments) and the preprocessing is written here
in numpy: torchvision's evaluation transform, Resize(size * 256/224) on the shorter side with bilinear
filtering, CenterCrop(size), scaling to [0, 1] and normalising with the ImageNet mean and standard deviation.
Images are returned channel-first (N, C, H, W), as every reader in the contract.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bench_contract.data.datasets import SPLIT_SEED, DataError, Dataset, held_out_split

IMAGE_SUFFIXES = (".jpeg", ".jpg", ".png")
MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32)
STD = np.array([0.229, 0.224, 0.225], dtype=np.float32)
IMAGE_FOLDER_VALIDATION_SIZE = 5000


def split_folder(data_dir: str | os.PathLike[str], split: str) -> Path:
    """`data_dir/<split>` when the data set has split folders (train/, val/), else data_dir itself."""
    root = Path(data_dir)
    return root / split if (root / split).is_dir() else root


def flat_folder_advice(root: Path) -> str:
    """How to arrange a folder of images without class subfolders: ImageNet's validation archive unpacks so, its
    labels in a separate file."""
    flat = sum(1 for p in root.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
    if not flat:
        return ""
    return (f"; it holds {flat} images side by side: move each into a subfolder named for its class, as in train/ "
            "(ImageNet's validation archive unpacks flat; its labels file, LOC_val_solution.csv in the Kaggle "
            "release or the devkit's ILSVRC2012_validation_ground_truth.txt, gives each image's class)")


@dataclass(frozen=True)
class ImageFolder:
    root: Path
    classes: tuple[str, ...]  # sorted subfolder names; a label is an index into this
    samples: tuple[tuple[Path, int], ...]  # sorted by class, then file name

    @classmethod
    def scan(cls, root: str | os.PathLike[str]) -> "ImageFolder":
        root = Path(root)
        if not root.is_dir():
            raise DataError(f"image folder {root} does not exist")
        classes = tuple(sorted(p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")))
        if not classes:
            raise DataError(f"image folder {root} has no class subfolders (expected <class>/<image>.JPEG)"
                            + flat_folder_advice(root))
        samples = tuple(
            (path, label)
            for label, name in enumerate(classes)
            for path in sorted((root / name).iterdir())
            if path.suffix.lower() in IMAGE_SUFFIXES and path.is_file()
        )
        if not samples:
            raise DataError(f"image folder {root} has class subfolders but no {', '.join(IMAGE_SUFFIXES)} files")
        return cls(root, classes, samples)

    def __len__(self) -> int:
        return len(self.samples)

    @property
    def labels(self) -> np.ndarray:
        return np.array([label for _, label in self.samples], dtype=np.int32)

    def batch(self, indices, size: int) -> tuple[np.ndarray, np.ndarray]:
        """Images (len(indices), 3, size, size) float32, preprocessed, and their labels."""
        chosen = [self.samples[i] for i in indices]
        x = np.stack([decode(path, size) for path, _ in chosen])
        return x, np.array([label for _, label in chosen], dtype=np.int32)


class LazyImages:
    """Some of a folder's images as an array (n, 3, size, size) that decodes only what is indexed: a training
    split of ImageNet does not fit in memory. Indexing with an index array or a slice returns a float32
    numpy batch, as the in-memory readers' arrays do, so the training loop reads both alike (decoding
    happens when the loop takes a batch, outside the timed step)."""

    def __init__(self, folder: ImageFolder, indices: np.ndarray, size: int) -> None:
        self.folder, self.indices, self.size = folder, np.asarray(indices), size

    @property
    def shape(self) -> tuple[int, ...]:
        return (len(self.indices), 3, self.size, self.size)

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, key) -> np.ndarray:
        chosen = self.indices[key]
        if np.ndim(chosen) == 0:
            return decode(self.folder.samples[int(chosen)][0], self.size)
        if len(chosen) == 0:
            return np.zeros((0, 3, self.size, self.size), np.float32)
        return self.folder.batch(chosen, self.size)[0]


def decode(path: Path, size: int) -> np.ndarray:
    """One image, preprocessed as torchvision's evaluation transform does, channel-first."""
    from PIL import Image  # in both framework environments; the orchestrator never decodes images

    try:
        with Image.open(path) as image:
            image = image.convert("RGB")
    except OSError as exc:
        raise DataError(f"{path} is not an image Pillow can read: {exc}") from None
    width, height = image.size
    short = round(size * 256 / 224)
    if width <= height:
        new = (short, max(short, int(short * height / width)))
    else:
        new = (max(short, int(short * width / height)), short)
    image = image.resize(new, Image.BILINEAR)
    left = int(round((new[0] - size) / 2.0))
    top = int(round((new[1] - size) / 2.0))
    image = image.crop((left, top, left + size, top + size))
    pixels = np.asarray(image, dtype=np.float32) / 255.0
    return np.transpose((pixels - MEAN) / STD, (2, 0, 1)).astype(np.float32)


def folder_problem(data_dir: str | os.PathLike[str], split: str) -> str | None:
    """Why data_dir cannot serve as an image folder (checked without decoding anything), or None."""
    folder = split_folder(data_dir, split)
    try:
        ImageFolder.scan(folder)
    except DataError as exc:
        return str(exc)
    return None


def load_image_folders(data_dir: str | None, size: int) -> Dataset:
    """ImageNet-style folders for training: train/<class>/<image> is split into training and validation
    (5,000 images, or a tenth of a smaller folder, chosen with the split seed), val/<class>/<image> is the
    test split (ImageNet's own validation set is the customary test set). Images are decoded lazily, batch
    by batch, with the evaluation transform at `size` (`decode` above): the same pixels in both frameworks,
    and no random augmentation, which would draw from an RNG."""
    if not data_dir:
        raise DataError("image folders need --data-dir pointing at a folder with train/<class>/ and val/<class>/")
    root = Path(data_dir)
    for split in ("train", "val"):
        if not (root / split).is_dir():
            raise DataError(f"training on image folders needs {root / split}/<class>/<image>; it does not exist")
    train, test = ImageFolder.scan(root / "train"), ImageFolder.scan(root / "val")
    if train.classes != test.classes:
        raise DataError(f"{root}/train and {root}/val have different class folders "
                        f"({len(train.classes)} and {len(test.classes)}); they must be the same")
    _, v = held_out_split(len(train), IMAGE_FOLDER_VALIDATION_SIZE)
    order = np.random.default_rng(SPLIT_SEED).permutation(len(train))
    val_idx, train_idx = np.sort(order[:v]), np.sort(order[v:])
    everything = np.arange(len(test))
    return Dataset("imagenet", "real", LazyImages(train, train_idx, size), train.labels[train_idx],
                   LazyImages(train, val_idx, size), train.labels[val_idx], LazyImages(test, everything, size),
                   test.labels, len(train.classes))
