"""Both frameworks count the same FLOPs for one training step of every model of the catalog, in fp32 and bf16:
the count behind MFU is the model's work, never an implementation's. JAX's hand-written attention
backward (jax_backend.attention) recomputes q k^T, as the fused kernels do, and that recomputation was counted: GPT's
step counted one matmul per layer more in JAX than in PyTorch (230,686,720 FLOPs against 226,492,416), and so did the
ViT's bf16 step; the equality test checked the MNIST MLP only. The models come from the catalog, so a new model is
checked here as soon as both backends train it.

Each framework's step is built as its cells build it and counted by its own flops_per_step (training_flops_probe.py),
all cells of a framework in one process. Tiny variants, batch 2: the test costs the two processes, not the models.
"""

import json

import pytest
from helpers import run_in_env
from test_backends import make_spec

from orchestrator.plan.catalog import USE_CASES, built_models, home_benchmark, skip_reason

PRECISIONS = ("fp32", "bf16")
BATCH = 2
TRAINING = USE_CASES[1]
# Every model both backends train (use case 1), at each precision the catalog runs it in.
CELLS = [(model, precision) for model in built_models() for precision in PRECISIONS
         if skip_reason(home_benchmark(model), TRAINING, model, precision) is None]


def cell_id(model: str, precision: str) -> str:
    return f"{model}-{precision}"


@pytest.fixture(scope="module")
def counts(tmp_path_factory):
    """{framework: {cell id: FLOPs per step}}. JAX runs first and writes each model's shared initial weights; PyTorch
    loads them, so its parameter list is checked against JAX's as in a campaign."""
    root = tmp_path_factory.mktemp("flops")
    found = {}
    for framework in ("jax", "torch"):
        specs = [make_spec(framework, root, benchmark=home_benchmark(model).name, model=model, model_variant="tiny",
                           precision=precision, batch_size=BATCH, data_source="synthetic", synthetic_samples=8 * BATCH,
                           cell_id=cell_id(model, precision), init_weights_path=str(root / f"init-{model}.npz"))
                 for model, precision in CELLS]
        path = root / f"{framework}-specs.json"
        path.write_text(json.dumps([spec.to_json() for spec in specs]))
        proc = run_in_env(framework, "tests/backends/training_flops_probe.py", str(path))
        assert proc.returncode == 0, proc.stderr[-3000:]
        found[framework] = json.loads(proc.stdout.splitlines()[-1])
    return found


def test_the_catalog_has_cells_of_both_precisions():
    assert {precision for _, precision in CELLS} == set(PRECISIONS) and len(CELLS) >= 2 * len(PRECISIONS)


@pytest.mark.parametrize("model, precision", CELLS, ids=[cell_id(*cell) for cell in CELLS])
def test_both_frameworks_count_the_same_training_step_flops(counts, model, precision):
    """Exactly equal: both counts are sums of integer products of the same shapes (2 FLOPs per multiply-add of
    every matmul and convolution), below 2^53 here, so the float64 each is recorded in holds it without rounding."""
    jax, torch = (counts[framework][cell_id(model, precision)] for framework in ("jax", "torch"))
    assert jax is not None and jax > 0, f"JAX counted nothing for {model} {precision}"
    assert jax == torch, f"{model} {precision}: JAX {jax:,.0f} FLOPs a step, PyTorch {torch:,.0f}"
