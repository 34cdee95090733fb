import pytest
from helpers import settings

from bench_contract.config import PLACEMENT
from bench_contract.data.datasets import load_digits
from orchestrator.errors import UsageError
from orchestrator.plan import catalog, matrix, rules
from orchestrator.plan.settings import parse_batch_sizes, parse_list


def test_defaults_come_from_the_registry():
    cells = matrix.expand("digits", 1, [], [], [], [], settings())
    bench = catalog.BENCHMARKS["digits"]
    assert {c.framework for c in cells} == set(catalog.FRAMEWORKS)
    assert sorted({c.batch_size for c in cells}) == sorted(bench.default_batch_sizes)
    assert len(cells) == len(catalog.FRAMEWORKS) * len(bench.default_models) * len(bench.default_batch_sizes)


def test_lists_accept_commas_and_repeats_and_drop_duplicates():
    assert parse_list(["jax,torch", "jax", " torch "]) == ["jax", "torch"]
    assert parse_batch_sizes(["16,32", "64"]) == [16, 32, 64]


@pytest.mark.parametrize("value", ["0", "-4", "abc", "3.5"])
def test_bad_batch_sizes_are_refused(value):
    with pytest.raises(UsageError, match="batch size"):
        parse_batch_sizes([value])


@pytest.mark.parametrize("values", [["32,,64"], ["32,"], [",32"], ["32", ""]])
def test_an_empty_item_in_a_list_is_refused_not_skipped(values):
    with pytest.raises(UsageError, match="empty item between its commas; remove the extra comma"):
        parse_batch_sizes(values)
    with pytest.raises(UsageError, match="empty item"):
        parse_list(["jax,,torch"])


@pytest.mark.parametrize("use_case, single", [(2, 1), (4, 3)])
def test_a_data_parallel_use_case_with_one_process_is_warned_of(use_case, single):
    warning = rules.one_process_warning(use_case, 1, 1)
    assert f"use case {use_case} is data parallel" in warning and "measures one device" in warning
    assert f"or use case {single} for one device" in warning
    assert rules.one_process_warning(use_case, 2, 1) is None and rules.one_process_warning(use_case, 1, 2) is None
    assert rules.one_process_warning(single, 1, 1) is None


@pytest.mark.parametrize("flags, verb", [({"channels_last": True}, "--channels-last is implemented"),
                                         ({"torch_compile": True, "channels_last": True},
                                          "--channels-last is implemented")])
def test_torch_options_outside_inference_are_refused_in_a_sentence_that_agrees(flags, verb):
    with pytest.raises(UsageError, match=verb):
        matrix.expand("mnist", 1, ["torch"], ["cnn"], [32], [], settings(**flags))


def test_pair_key_is_shared_and_cell_ids_differ_by_framework():
    cells = matrix.expand("digits", 1, [], [], [32], [], settings())
    jax, torch = (c for c in cells if c.batch_size == 32)
    assert jax.pair_key == torch.pair_key
    assert jax.cell_id != torch.cell_id and jax.cell_id.startswith("jax-")


def test_cell_id_is_stable_and_follows_every_setting():
    a = matrix.expand("digits", 1, ["jax"], [], [32], [], settings())[0]
    b = matrix.expand("digits", 1, ["jax"], [], [32], [], settings())[0]
    c = matrix.expand("digits", 1, ["jax"], [], [32], [], settings(learning_rate=0.02))[0]
    assert a.cell_id == b.cell_id
    assert a.cell_id != c.cell_id



def test_cell_ids_hash_every_field_but_the_framework_defaults_included():
    import hashlib
    import json
    from dataclasses import asdict, replace

    cell = matrix.expand("digits", 1, ["torch"], [], [16], [], settings(seed=7))[0]
    fields = asdict(cell)
    fields.pop("framework")  # the framework is in the readable part of the id; the hash is the pair's
    # So is a tuned cell's configuration (--tune): one framework's own, named after the pair key (a short hash of it),
    # so that a tuned JAX cell and a tuned PyTorch cell keep one pair.
    assert fields.pop("tuned") == ""
    # Every setting at its default is hashed too (no setting is left out to keep ids of an earlier version), but
    # those that only place the cell (--pack): a packed cell is the same cell as in an array of its own.
    assert fields["settings"]["parallelism"] == "ddp"
    for name in PLACEMENT:
        fields["settings"].pop(name)
    digest = hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:8]
    assert cell.pair_key == f"digits-uc1-mlp-bs16-fp32-{digest}" and cell.cell_id == f"torch-{cell.pair_key}"
    tuned = replace(cell, tuned='{"torch_mode": "default"}')
    configuration = hashlib.sha256(tuned.tuned.encode()).hexdigest()[:8]
    assert tuned.pair_key == cell.pair_key and tuned.cell_id == f"torch-{cell.pair_key}-t{configuration}"

@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"benchmark": "mnistt"}, "unknown benchmark 'mnistt'; choose from: digits, mnist"),
        ({"use_case": 7}, "unknown use case 7"),
        ({"frameworks": ["tensorflow"]}, "unknown framework 'tensorflow'; choose from: jax, torch"),
        ({"models": ["resnet9"]}, "unknown model 'resnet9'"),
        ({"models": ["resnet50"]}, "not part of benchmark 'digits'"),
        ({"precisions": ["fp8"]}, "unknown precision 'fp8'"),
        ({"batch_sizes": [5000]}, "larger than the 1257 training samples"),
        ({"use_case": 5, "batch_sizes": [64, 1024]}, "batch size 1024 is larger than the 360 test samples of digits"),
    ],
)
def test_invalid_requests_are_refused_with_the_choices(kwargs, message):
    args = {"benchmark": "digits", "use_case": 1, "frameworks": [], "models": [], "batch_sizes": [], "precisions": []}
    args.update(kwargs)
    with pytest.raises(UsageError) as info:
        matrix.expand(settings=settings(data_source="real"), **args)  # digits' packaged splits
    assert message in str(info.value)


def test_the_four_training_use_cases_and_inference_are_declared():
    assert sorted(catalog.USE_CASES) == [1, 2, 3, 4, 5]
    assert catalog.USE_CASES[catalog.INFERENCE].title.startswith("inference")


def test_mnist_data_dir_is_checked(tmp_path):
    with pytest.raises(UsageError, match="give --data-dir"):
        rules.check_data("mnist", settings(data_source="real"))
    with pytest.raises(UsageError, match="does not exist"):
        rules.check_data("mnist", settings(data_source="real", data_dir=str(tmp_path / "nope")))
    (tmp_path / "train-images-idx3-ubyte.gz").write_bytes(b"")
    with pytest.raises(UsageError, match="lacks the MNIST files train-labels-idx1-ubyte, t10k-images"):
        rules.check_data("mnist", settings(data_source="real", data_dir=str(tmp_path)))
    rules.check_data("mnist", settings())  # synthetic data needs no folder


def declared_but_not_implemented():
    """The first (benchmark, model, use case) the catalog declares but does not run yet."""
    for bench in catalog.BENCHMARKS.values():
        for model in bench.models:
            for number, case in catalog.USE_CASES.items():
                # Not a combination refused on purpose (batch norm and per-sample gradients), one not built yet.
                reason = catalog.skip_reason(bench, case, model, "fp32") or ""
                if "not implemented yet" in reason:
                    return bench.name, model, number
    pytest.skip("every declared combination is implemented")


def test_a_declared_combination_that_is_not_implemented_is_refused_at_plan_time():
    benchmark, model, number = declared_but_not_implemented()
    with pytest.raises(UsageError) as info:
        matrix.expand(benchmark, number, [], [model], [1], [], settings())
    assert f"use case {number} ({catalog.USE_CASES[number].title}) is declared but not implemented yet for " \
           f"{benchmark}/{model}" in str(info.value)


def test_every_benchmarks_model_is_registered_and_every_registered_model_has_a_benchmark():
    assert {model for bench in catalog.BENCHMARKS.values() for model in bench.models} == set(catalog.MODELS)


def test_inference_batches_are_held_to_the_packaged_test_split_on_both_sides_of_its_size():
    """Inference takes its batch from the test split: digits' 360 examples take a batch of 360, not 361; synthetic
    inputs are made to the batch's size, so any size plans."""
    inference = {"benchmark": "digits", "use_case": 5, "frameworks": [], "models": [], "precisions": []}
    packaged = settings(data_source="real")
    assert {cell.batch_size for cell in matrix.expand(batch_sizes=[360], settings=packaged, **inference)} == {360}
    with pytest.raises(UsageError, match="^batch size 361 is larger than the 360 test samples of digits$"):
        matrix.expand(batch_sizes=[361], settings=packaged, **inference)
    cells = matrix.expand(batch_sizes=[1024], settings=settings(), **inference)
    assert {cell.batch_size for cell in cells} == {1024}


def test_the_catalog_knows_the_packaged_digits_splits_the_loader_makes():
    data = load_digits()
    digits = catalog.BENCHMARKS["digits"]
    assert (digits.train_samples, digits.test_samples) == (len(data.x_train), len(data.x_test))
