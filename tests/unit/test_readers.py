"""Dataset readers on small files written here in the real formats."""

import pickle

import numpy as np
import pytest
from helpers import settings, write_cifar10_folder, write_image_folder

from bench_contract.data import datasets as data
from bench_contract.data import loading
from orchestrator.errors import UsageError
from orchestrator.plan import rules


def test_cifar10_python_batches_are_read_channel_first_and_standardised_per_channel(tmp_path):
    root = write_cifar10_folder(tmp_path / "cifar", per_batch=40)
    ds = loading.load_dataset("cifar10", "real", str(root))
    assert ds.name == "cifar10" and ds.source == "real" and ds.num_classes == 10
    assert ds.sample_shape == (3, 32, 32) and ds.x_train.dtype == np.float32
    assert len(ds.x_train) + len(ds.x_val) == 5 * 40 and len(ds.x_test) == 40
    np.testing.assert_allclose(ds.x_train.mean(axis=(0, 2, 3)), 0, atol=1e-4)
    np.testing.assert_allclose(ds.x_train.std(axis=(0, 2, 3)), 1, atol=1e-3)
    # the pixels are the file's: row 0 of test_batch, channel 0, is its first 1024 bytes, in order
    with open(root / "cifar-10-batches-py" / "test_batch", "rb") as f:
        raw = pickle.load(f, encoding="bytes")
    x, y = data.read_cifar_batch(root / "cifar-10-batches-py" / "test_batch")
    np.testing.assert_array_equal(x[0, 0].ravel(), raw[b"data"][0, :1024])
    np.testing.assert_array_equal(y, raw[b"labels"])
    np.testing.assert_array_equal(ds.y_test, raw[b"labels"])


def test_cifar10_folder_may_be_the_batches_folder_itself(tmp_path):
    root = write_cifar10_folder(tmp_path / "flat", per_batch=20, nested=False)
    assert len(data.load_cifar10(str(root)).x_test) == 20


def test_cifar10_missing_or_foreign_files_are_clear_errors(tmp_path):
    root = write_cifar10_folder(tmp_path / "cifar", per_batch=10)
    (root / "cifar-10-batches-py" / "data_batch_3").unlink()
    with pytest.raises(data.DataError, match="lacks the CIFAR-10 files data_batch_3"):
        data.load_cifar10(str(root))
    with pytest.raises(UsageError, match="lacks the CIFAR-10 python batches data_batch_3"):
        rules.check_data("cifar10", settings(data_source="real", data_dir=str(root)))
    bad = tmp_path / "bad"
    bad.write_bytes(pickle.dumps({b"data": np.zeros((2, 100), np.uint8), b"labels": [0, 1]}, protocol=2))
    with pytest.raises(data.DataError, match="3072 bytes"):
        data.read_cifar_batch(bad)


def test_a_cifar10_batch_that_would_run_code_is_refused(tmp_path):
    evil = tmp_path / "test_batch"
    evil.write_bytes(pickle.dumps({b"data": print, b"labels": []}, protocol=2))
    with pytest.raises(data.DataError, match=r"not (__builtin__|builtins)\.print"):
        data.read_cifar_batch(evil)


def test_an_image_folder_is_scanned_in_a_stable_order_and_preprocessed_like_torchvision_eval(tmp_path):
    from bench_contract.data.images import MEAN, STD, ImageFolder, split_folder

    root = write_image_folder(tmp_path / "imagenet", classes=3, per_class=2)
    folder = ImageFolder.scan(split_folder(root, "val"))
    assert folder.classes == ("n00000000", "n00000001", "n00000002")
    assert [label for _, label in folder.samples] == [0, 0, 1, 1, 2, 2]
    x, y = folder.batch(range(len(folder)), 64)
    assert x.shape == (6, 3, 64, 64) and x.dtype == np.float32 and list(y) == [0, 0, 1, 1, 2, 2]
    # A uniform image stays uniform through resize and crop: every pixel is exactly its normalised colour.
    from PIL import Image

    solid = tmp_path / "solid" / "a"
    solid.mkdir(parents=True)
    Image.new("RGB", (90, 50), (200, 100, 0)).save(solid / "x.png")
    x, _ = ImageFolder.scan(tmp_path / "solid").batch([0], 32)
    expected = (np.array([200, 100, 0], np.float32) / 255 - MEAN) / STD
    np.testing.assert_allclose(x[0], np.broadcast_to(expected[:, None, None], (3, 32, 32)), rtol=1e-6)


def test_a_flat_folder_of_images_is_refused_with_how_to_arrange_it(tmp_path):
    """ImageNet's validation archive unpacks as 50,000 images side by side: the refusal says to sort them into
    class folders and where their labels are."""
    from PIL import Image

    from bench_contract.data.images import ImageFolder

    for name in ("ILSVRC2012_val_00000001.JPEG", "ILSVRC2012_val_00000002.JPEG"):
        Image.new("RGB", (8, 8)).save(tmp_path / name, format="JPEG")
    with pytest.raises(data.DataError, match=r"holds 2 images side by side: move each into a subfolder named for "
                                             r"its class.*LOC_val_solution.csv"):
        ImageFolder.scan(tmp_path)


def test_an_image_folder_that_cannot_be_read_is_a_clear_error(tmp_path):
    from bench_contract.data.images import ImageFolder

    with pytest.raises(data.DataError, match="has no class subfolders"):
        ImageFolder.scan(tmp_path)
    (tmp_path / "cls").mkdir()
    (tmp_path / "cls" / "notes.txt").write_text("not an image")
    with pytest.raises(data.DataError, match="but no .jpeg, .jpg, .png files"):
        ImageFolder.scan(tmp_path)
    (tmp_path / "cls" / "broken.JPEG").write_bytes(b"\xff\xd8 truncated")
    with pytest.raises(data.DataError, match="broken.JPEG is not an image Pillow can read"):
        ImageFolder.scan(tmp_path).batch([0], 32)
