"""The precision census as the real backends take it (bench_contract.run.census; issue 29): the dtype each class of
operation computed in during one training step, read from the traced jaxpr in JAX and from the dispatched ATen
operations in PyTorch, and the certificate that compares the two in collect."""

import json

import pandas as pd
import pytest
from helpers import run_cli
from test_backends import make_spec, run_backend

from bench_contract.results import read_task_table

# (benchmark, model): the MLP has matmuls only; the text transformer has layer norm and attention's softmax.
CASES = {"mlp": ("digits", "mlp"), "transformer": ("nlp", "transformer")}


@pytest.fixture(scope="module")
def bf16_runs(tmp_path_factory):
    """Both frameworks' tiny bf16 training cells of each case, written as a campaign's rows (collect reads them)."""
    root = tmp_path_factory.mktemp("census")
    frames = {}
    for name, (benchmark, model) in CASES.items():
        for framework in ("jax", "torch"):
            spec = make_spec(framework, root, campaign="c", cell_id=f"{framework}-{name}", pair_key=name,
                             benchmark=benchmark, model=model, model_variant="tiny", precision="bf16",
                             data_source="synthetic", synthetic_samples=64, batch_size=8, epochs=1, warmup_steps=1,
                             init_weights_path=str(root / f"init-{name}.npz"),
                             results_path=str(root / "c" / "rows" / framework / f"{name}.parquet"))
            proc = run_backend(framework, spec, root)
            assert proc.returncode == 0, proc.stderr[-3000:]
            frames[name, framework] = read_task_table(spec.results_path).to_pandas()
    return root, frames


def census_of(frames, name, framework) -> dict:
    return json.loads(frames[name, framework].precision_census.iloc[0])


def test_the_mlps_bf16_step_computes_alike_in_both(bf16_runs):
    _, frames = bf16_runs
    expected = {"matmul": ["bfloat16"], "loss": ["float32"], "optimizer update": ["float32"]}
    assert census_of(frames, "mlp", "jax") == census_of(frames, "mlp", "torch") == expected


def test_the_census_finds_the_transformers_layer_norm_in_bfloat16_in_jax_and_float32_in_pytorch(bf16_runs):
    """Defect 2 of issue 29, found at run time: JAX's mixed policy casts every parameter to bf16 and runs LayerNorm
    in it; PyTorch's autocast leaves LayerNorm (and the residual stream it reads) in float32. Matmuls, attention's
    softmax, the loss and the update agree."""
    root, frames = bf16_runs
    jax, torch = census_of(frames, "transformer", "jax"), census_of(frames, "transformer", "torch")
    assert jax["normalisation"] == ["bfloat16"] and torch["normalisation"] == ["float32"]
    assert {k: v for k, v in jax.items() if k != "normalisation"} == \
        {k: v for k, v in torch.items() if k != "normalisation"}
    assert jax["softmax"] == jax["matmul"] == ["bfloat16"]
    proc = run_cli("collect", "--results-dir", str(root))
    assert proc.returncode == 0, proc.stderr
    assert "normalisation bfloat16 in JAX, float32 in PyTorch" in proc.stdout
    merged = pd.read_parquet(root / "merged.parquet")
    assert set(merged.precision_census) == {json.dumps(c, sort_keys=True) for c in (jax, torch,
                                            census_of(frames, "mlp", "jax"))}
