"""The DP-trainable ResNets: the GroupNorm variants' table, and what the catalog plans for them.
Their networks in both frameworks: tests/backends/test_group_norm_resnets.py and test_vision.py."""

import pytest
from helpers import settings

from bench_contract.models import vision
from orchestrator.errors import UsageError
from orchestrator.plan import catalog, matrix


def test_each_group_norm_variant_has_its_batch_norm_networks_blocks_and_a_home_benchmark():
    assert vision.GROUP_NORM_VARIANTS == {"resnet18_gn": "resnet18", "resnet50_gn": "resnet50"}
    for model, base in vision.GROUP_NORM_VARIANTS.items():
        for variant in ("full", "tiny"):
            assert vision.resnet_blocks(model, variant) == vision.RESNET_BLOCKS[(base, variant)]
        assert catalog.home_benchmark(model) == catalog.home_benchmark(base)
        assert not catalog.MODELS[model].batch_norm and catalog.MODELS[model].convolutional


@pytest.mark.parametrize("channels, groups", [(64, 32), (2048, 32), (32, 32), (16, 16), (3, 3)])
def test_group_norm_takes_min_32_c_groups(channels, groups):
    assert vision.group_norm_groups(channels) == groups


def test_a_channel_count_that_32_groups_do_not_divide_is_refused_in_one_sentence():
    with pytest.raises(ValueError, match=r"^GroupNorm over 48 channels needs a group count that divides it, and "
                                         r"min\(32, 48\) = 32 does not$"):
        vision.group_norm_groups(48)


@pytest.mark.parametrize("use_case", [1, 2, 3, 4, catalog.INFERENCE])
@pytest.mark.parametrize("model", sorted(vision.GROUP_NORM_VARIANTS))
def test_the_group_norm_variants_plan_every_use_case(model, use_case):
    benchmark = catalog.home_benchmark(model).name
    workers = {"nodes": 2} if catalog.USE_CASES[use_case].data_parallel else {}
    cells = matrix.expand(benchmark, use_case, [], [model], [16], [],
                          settings(model_variant="tiny", **workers))
    assert {(c.framework, c.model) for c in cells} == {("jax", model), ("torch", model)}


def test_the_batch_norm_resnet18s_refusal_names_its_group_norm_variant():
    with pytest.raises(UsageError) as info:
        matrix.expand("cifar10", 3, [], ["resnet18"], [16], [], settings())
    message = str(info.value)
    assert "is refused for resnet18: batch norm mixes the examples of a batch" in message
    assert "resnet18_gn" in message.split("per-sample gradients run for ", 1)[1]
