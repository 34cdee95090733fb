"""Training the vision models: what plans, what is refused at plan time and why, and the imagenet training data
(synthetic at the variant's input size, and image folders with train/ and val/)."""

import numpy as np
import pytest
from helpers import settings, write_image_folder

from bench_contract.data import datasets as data
from bench_contract.data import loading
from bench_contract.models.vision import INPUT_SHAPES, NUM_CLASSES
from orchestrator.errors import UsageError
from orchestrator.plan import catalog, matrix, rules

VISION = [("cifar10", "resnet18"), ("imagenet", "resnet50"), ("imagenet", "mobilenet_v3_small"),
          ("imagenet", "efficientnet_b0"), ("imagenet", "vit_b_16")]


@pytest.mark.parametrize("variant", ["full", "tiny"])
@pytest.mark.parametrize("benchmark, model", VISION)
def test_every_vision_model_plans_use_case_1_at_both_sizes(benchmark, model, variant):
    cells = matrix.expand(benchmark, 1, [], [model], [16], [], settings(model_variant=variant))
    assert {(c.framework, c.model) for c in cells} == {("jax", model), ("torch", model)}


@pytest.mark.parametrize("use_case", [2, 3, 4])
def test_vit_plans_the_per_sample_and_data_parallel_use_cases(use_case):
    workers = dict(nodes=2) if catalog.USE_CASES[use_case].data_parallel else {}
    cells = matrix.expand("imagenet", use_case, [], ["vit_b_16"], [16], [],
                          settings(model_variant="tiny", **workers))
    assert len(cells) == 2


@pytest.mark.parametrize("model", [name for name, model in catalog.MODELS.items() if model.batch_norm])
@pytest.mark.parametrize("use_case, reason", [
    (3, "batch norm mixes the examples of a batch, so per-sample gradients are undefined for it"),
    (4, "per-sample gradients run for mlp, cnn, resnet18_gn, resnet50_gn, vit_b_16, transformer, gcn"),
    (2, "SyncBatchNorm, which would align them, runs on GPUs only"),
])
def test_batch_norm_models_are_refused_per_sample_and_data_parallel_training_with_the_reason(model, use_case, reason):
    benchmark = catalog.home_benchmark(model).name
    workers = dict(nodes=2) if catalog.USE_CASES[use_case].data_parallel else {}
    with pytest.raises(UsageError) as info:
        matrix.expand(benchmark, use_case, [], [model], [16], [], settings(**workers))
    assert f"is refused for {model}: " in str(info.value) and reason in str(info.value)


@pytest.mark.parametrize("variant", ["full", "tiny"])
def test_synthetic_imagenet_takes_the_variants_input_size_and_class_count(variant):
    ds = loading.load_dataset("imagenet", "synthetic", synthetic_samples=40, variant=variant)
    assert ds.sample_shape == INPUT_SHAPES[("imagenet", variant)] and ds.num_classes == NUM_CLASSES["imagenet"]
    assert ds.x_train.dtype == np.float32 and len(ds.x_train) + len(ds.x_val) + len(ds.x_test) == 40
    assert ds.y_train.max() < ds.num_classes and len(np.unique(ds.y_train)) > 1
    # the same bytes every time: both frameworks call this
    again = loading.load_dataset("imagenet", "synthetic", synthetic_samples=40, variant=variant)
    np.testing.assert_array_equal(ds.x_train, again.x_train)


def test_image_folders_train_on_train_and_test_on_val_decoding_lazily(tmp_path):
    from bench_contract.data.images import ImageFolder

    root = write_image_folder(tmp_path / "imagenet", classes=3, per_class=10, split="train")
    write_image_folder(root, classes=3, per_class=2, split="val")
    ds = loading.load_dataset("imagenet", "real", str(root), variant="tiny")
    assert ds.num_classes == 3 and ds.sample_shape == (3, 64, 64)
    assert len(ds.x_train) + len(ds.x_val) == 30 and len(ds.x_val) == 3 and len(ds.x_test) == 6
    assert len(ds.y_train) == len(ds.x_train) and list(ds.y_test) == [0, 0, 1, 1, 2, 2]
    # indexing decodes exactly those images, as the reader shared with inference does
    train = ImageFolder.scan(root / "train")
    picked = np.array([4, 0, 7])
    x = ds.x_train[picked]
    expected, labels = train.batch(ds.x_train.indices[picked], 64)
    np.testing.assert_array_equal(x, expected)
    np.testing.assert_array_equal(ds.y_train[picked], labels)
    assert ds.x_test[0:4].shape == (4, 3, 64, 64) and ds.x_test[6:].shape == (0, 3, 64, 64)
    full = loading.load_dataset("imagenet", "real", str(root), variant="full")
    assert full.x_train[:1].shape == (1, 3, 224, 224)


def test_training_on_image_folders_needs_train_and_val(tmp_path):
    root = write_image_folder(tmp_path / "imagenet", classes=2, per_class=2, split="val")
    with pytest.raises(data.DataError, match="needs .*train/<class>/<image>; it does not exist"):
        loading.load_dataset("imagenet", "real", str(root))
    folder = settings(data_source="real", data_dir=str(root))
    with pytest.raises(UsageError, match="training on image folders needs"):
        rules.check_data("imagenet", folder, use_case=1)
    rules.check_data("imagenet", folder, use_case=catalog.INFERENCE)  # val/ is enough
    write_image_folder(root, classes=3, per_class=2, split="train")
    with pytest.raises(data.DataError, match="different class folders"):
        loading.load_dataset("imagenet", "real", str(root))
