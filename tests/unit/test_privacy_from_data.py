"""The privacy budget is planned for the training split the user's folder holds, counted at plan time from MNIST's
IDX header or CIFAR-10's pickled label lists (bench_contract.data.datasets.counted_train_split), not for the
benchmark's usual split: the backends then find the same N, and the rows carry epsilon."""

import json
import pickle

import numpy as np
import pytest
from helpers import run_cli, write_cifar10_folder, write_mnist_folder

from bench_contract.data.datasets import count_pickled_labels, counted_train_split, load_cifar10, load_mnist
from orchestrator.plan import privacy

# 1,000 CIFAR-10 images hold out a tenth (100); MNIST's training file holds out its last 5,000 whatever its size.
FOLDERS = {"cifar10": lambda root: write_cifar10_folder(root, per_batch=200),
           "mnist": lambda root: write_mnist_folder(root, train=5900, test=10)}
LOADERS = {"cifar10": load_cifar10, "mnist": load_mnist}


@pytest.mark.parametrize("benchmark", FOLDERS)
def test_a_folder_of_900_training_images_plans_its_budget_for_900(tmp_path, benchmark):
    root = FOLDERS[benchmark](tmp_path / "data")
    proc = run_cli("--benchmark", benchmark, "--use-case", "3", "--data-dir", str(root), "--batch-sizes", "32",
                   "--epochs", "1", "--noise-multiplier", "1.1", "--frameworks", "jax", "--dry-run",
                   "--results-dir", str(tmp_path / "r"), "--scripts-dir", str(tmp_path / "s"))
    assert proc.returncode == 0, proc.stderr
    (spec_file,) = (tmp_path / "r").glob("*/specs/*.jsonl")
    budget = json.loads(spec_file.read_text().splitlines()[0])["privacy"]
    steps = 900 // 32
    assert (budget["train_samples"], budget["steps"], budget["delta"]) == (900, steps, 1e-3)
    assert budget["sampling_rate"] == 32 / 900
    assert budget["epsilon"] == pytest.approx(privacy.epsilon(32 / 900, 1.1, steps, 1e-3))
    assert len(LOADERS[benchmark](str(root)).x_train) == 900  # the loader makes the split the plan counted


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
@pytest.mark.parametrize("data_first", [False, True])
def test_labels_are_counted_in_every_pickle_protocol_and_key_order(tmp_path, protocol, data_first):
    # 1,001 labels: a full batch of 1,000 (MARK ... APPENDS), then one item alone (APPEND) from protocol 1 on.
    labels = [int(v) for v in np.random.default_rng(0).integers(0, 10, 1001)]
    entries = [(b"labels", labels), (b"data", np.zeros((1001, 3072), np.uint8))]
    path = tmp_path / "batch"
    path.write_bytes(pickle.dumps(dict(entries[::-1] if data_first else entries), protocol=protocol))
    assert count_pickled_labels(path) == 1001


@pytest.mark.parametrize("labels", [np.arange(10, dtype=np.int64), [np.int64(v) for v in range(10)]],
                         ids=["array", "numpy scalars"])
def test_labels_that_are_not_a_list_of_ints_are_not_counted_and_the_plan_keeps_the_usual_split(tmp_path, labels):
    root = write_cifar10_folder(tmp_path / "data", per_batch=10)
    batch = root / "cifar-10-batches-py" / "data_batch_1"
    batch.write_bytes(pickle.dumps({b"labels": labels, b"data": np.zeros((10, 3072), np.uint8)}, protocol=2))
    assert count_pickled_labels(batch) is None
    assert counted_train_split("cifar10", root) is None  # matrix.train_split_size then takes the catalog's 45,000
