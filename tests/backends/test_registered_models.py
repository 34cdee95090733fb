"""Each registered model's declaration against the networks both backends build (bench_contract.model_registry): a
network keeps batch norm's running statistics exactly where its model declares batch norm, the capability behind the
plan's refusals of per-sample gradients and data-parallel training. Every model of the registry, so a new one is
checked here as soon as it is registered. Tiny variants, shapes only: the test costs the two processes."""

import json

import pytest
from helpers import probe_json

from bench_contract.model_registry import MODELS
from orchestrator.plan.catalog import home_benchmark

BACKENDS = {"jax": "JaxBackend", "torch": "TorchBackend"}
# Each backend derives the shared parameter list from its own network, in PyTorch's names (bench_contract.models
# .weights.ParamSpec; JAX's batch_stats mean becomes running_mean, jax_backend.layout): the list the weights file is
# checked against, so a network with batch norm cannot leave it out.
PROBE = """
import importlib, json
from bench_contract.data.loading import load_dataset
backend = getattr(importlib.import_module("{framework}_backend.run"), "{backend}")()
found = {{}}
for model, benchmark in json.loads({models!r}).items():
    data = load_dataset(benchmark, "synthetic", synthetic_samples=40, variant="tiny", model=model)
    specs = backend.param_specs(model, data.sample_shape, data.num_classes, "tiny", graph=data.graph)
    found[model] = any(spec.name.endswith("running_mean") for spec in specs)
print(json.dumps(found))
"""


@pytest.fixture(scope="module")
def running_statistics():
    """{framework: {model: whether its network keeps batch norm's running statistics}}."""
    models = json.dumps({name: home_benchmark(name).name for name in MODELS})
    return {framework: probe_json(framework, PROBE.format(framework=framework, backend=backend, models=models))
            for framework, backend in BACKENDS.items()}


@pytest.mark.parametrize("framework", BACKENDS)
@pytest.mark.parametrize("model", MODELS.values(), ids=list(MODELS))
def test_a_network_has_batch_norm_exactly_where_its_model_declares_it(running_statistics, framework, model):
    assert running_statistics[framework][model.name] == model.batch_norm, (
        f"{framework}'s {model.name} {'has' if running_statistics[framework][model.name] else 'lacks'} batch norm's "
        f"running statistics, and its declaration says batch_norm={model.batch_norm}")
