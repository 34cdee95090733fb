"""DP-SGD's cost over plain SGD (orchestrator.results.views.with_sgd_cost): which SGD row a DP-SGD row is
costed against, per framework and per PyTorch engine."""

import json
import math

import pandas as pd

from bench_contract.spec import DP_SGD_ONLY, MEASURED_SETTINGS
from orchestrator.results.views import plain_settings, with_sgd_cost

SETTINGS = {"epochs": 1, "torch_compile": False, "nodes": 1, "clip_norm": 1.0, "noise_multiplier": 1.0,
            "loop_batch_size": 0, "sampling": "shuffle", "dp_engine": ""}


def table_row(use_case, jax, torch, batch=32, **settings) -> dict:
    return {"device_kind": "gpu", "device_model": "NVIDIA H200", "benchmark": "cifar10", "use_case": use_case,
            "model": "cnn", "batch_size": batch, "precision": "fp32",
            "settings": json.dumps(SETTINGS | settings, sort_keys=True), "bound_cpus": "", "intra_op_threads": "",
            "jax_throughput": jax, "torch_throughput": torch}


def costs(*rows) -> list[tuple[float, float]]:
    frame = with_sgd_cost(pd.DataFrame(list(rows)))
    return [(round(a, 3), round(b, 3)) for a, b in zip(frame["jax_sgd_cost"], frame["torch_sgd_cost"])]


def test_each_engine_is_costed_against_the_same_sgd_step():
    # The DP-SGD rows differ from the SGD row in DP-SGD's own settings only: Poisson sampling, the engine.
    got = costs(table_row(1, 3000.0, 2400.0), table_row(3, 1000.0, 300.0, sampling="poisson", dp_engine="torchfunc"),
                table_row(3, 1000.0, 800.0, sampling="poisson", dp_engine="opacus"))
    assert all(math.isnan(v) for v in got[0])  # the SGD row has no cost
    assert got[1:] == [(3.0, 8.0), (3.0, 3.0)]


def test_a_dp_sgd_row_of_another_batch_or_mode_or_device_has_no_sgd_row():
    sgd = table_row(1, 3000.0, 2400.0)
    others = [table_row(3, 1000.0, 300.0, batch=64), table_row(3, 1000.0, 300.0, torch_compile=True),
              table_row(3, 1000.0, 300.0) | {"device_model": "NVIDIA H100"},
              table_row(3, 1000.0, 300.0) | {"precision": "bf16"}]
    for other in others:
        (_, (jax, torch)) = costs(sgd, other)
        assert math.isnan(jax) and math.isnan(torch), other


def test_use_case_4_is_costed_against_use_case_2_on_as_many_processes():
    got = costs(table_row(2, 6000.0, 5000.0, nodes=2), table_row(1, 3000.0, 2400.0),
                table_row(4, 2000.0, 1000.0, nodes=2))
    assert got[2] == (3.0, 5.0)
    (_, (jax, _)) = costs(table_row(2, 6000.0, 5000.0, nodes=2), table_row(4, 2000.0, 1000.0, nodes=1))
    assert math.isnan(jax)


def test_only_dp_sgd_settings_are_set_aside():
    assert set(DP_SGD_ONLY) <= set(MEASURED_SETTINGS)
    assert json.loads(plain_settings(json.dumps(SETTINGS))) == {"epochs": 1, "torch_compile": False, "nodes": 1}
    assert plain_settings("") == "{}"
