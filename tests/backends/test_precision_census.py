"""The precision census as the real backends take it (bench_contract.run.census): the dtype each class of
operation computed in during one training step, read from the traced jaxpr in JAX and from the dispatched ATen
operations in PyTorch, and the certificate that compares the two in collect."""

import json
import shutil
from pathlib import Path

import pytest
from helpers import run_cli, run_in_env
from test_backends import make_spec, run_backend

from bench_contract.results import read_task_table

# (benchmark, model): the MLP has matmuls only; the text transformer has layer norm and attention's softmax; the
# language model attention through each framework's fused kernel, and tied output logits.
CASES = {"mlp": ("digits", "mlp"), "transformer": ("nlp", "transformer"), "gpt": ("nlp", "gpt"),
         "vit": ("imagenet", "vit_b_16")}


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


def test_the_transformers_bf16_steps_compute_alike_in_both(bf16_runs):
    """JAX's mixed policy once cast every parameter to bf16 and ran LayerNorm and the residual
    stream in it; PyTorch's autocast leaves them in float32. JAX now runs autocast's policy (jax_backend.autocast)."""
    _, frames = bf16_runs
    jax, torch = census_of(frames, "transformer", "jax"), census_of(frames, "transformer", "torch")
    assert jax == torch
    assert jax["normalisation"] == ["float32"] and jax["softmax"] == jax["matmul"] == ["bfloat16"]
    # The stream between the layers: float32 embeddings plus bfloat16 branches, promoted to float32 in both.
    assert jax["residual stream"] == ["float32"]


def test_the_language_models_bf16_steps_compute_alike_in_both(bf16_runs):
    """The language model: the same bf16 policy in both, through the fused attention kernels (SDPA;
    jax.nn.dot_product_attention) and the logits through the tied embedding (autocast's linear;
    autocast.tied_logits)."""
    _, frames = bf16_runs
    jax, torch = census_of(frames, "gpt", "jax"), census_of(frames, "gpt", "torch")
    assert jax == torch
    assert jax["normalisation"] == jax["residual stream"] == ["float32"] and jax["matmul"] == ["bfloat16"]


def test_the_vits_bf16_steps_run_the_fused_attentions_float32_softmax_in_both(bf16_runs):
    """torchvision's attention trains through SDPA's fused kernel, whose softmax is float32 under bf16 (its
    accumulation type); the census once labelled it bfloat16, and JAX's ViT ran a bfloat16 softmax: an unlike
    comparison the certificate passed. JAX's ViT now trains with the fused kernels' arithmetic (jax_backend.attention),
    and exact GELU's derivative (an exp) is not counted as a softmax."""
    _, frames = bf16_runs
    jax, torch = census_of(frames, "vit", "jax"), census_of(frames, "vit", "torch")
    assert jax == torch
    assert jax["softmax"] == ["float32"] and jax["matmul"] == ["bfloat16"]


def test_the_certificate_catches_a_jax_policy_that_casts_everything(bf16_runs):
    """The policy before autocast's, swapped back in (cast_everything_probe.py): collect and the report say the row
    is not comparable and why, and show no speed-up for it."""
    root, frames = bf16_runs
    benchmark, model = CASES["transformer"]
    results = root / "broken-results"  # a campaign of its own: the census test's PyTorch row and this JAX row
    spec = make_spec("jax", root, campaign="broken", cell_id="jax-transformer", pair_key="transformer",
                     benchmark=benchmark, model=model, model_variant="tiny", precision="bf16", data_source="synthetic",
                     synthetic_samples=64, batch_size=8, epochs=1, warmup_steps=1,
                     init_weights_path=str(root / "init-transformer.npz"),
                     results_path=str(results / "broken" / "rows" / "jax" / "transformer.parquet"))
    path = root / "broken.json"
    path.write_text(spec.to_json())
    proc = run_in_env("jax", str(Path(__file__).with_name("cast_everything_probe.py")), str(path), cwd=Path.cwd())
    assert proc.returncode == 0, proc.stderr[-3000:]
    (results / "broken" / "rows" / "torch").mkdir(parents=True)
    shutil.copy(root / "c" / "rows" / "torch" / "transformer.parquet", results / "broken" / "rows" / "torch")
    broken = json.loads(read_task_table(spec.results_path).to_pandas().precision_census.iloc[0])
    assert broken["normalisation"] == broken["residual stream"] == ["bfloat16"]
    reason = "normalisation bfloat16 in JAX, float32 in PyTorch"
    collected = run_cli("collect", "--results-dir", str(results))
    assert collected.returncode == 0, collected.stderr
    assert f"not comparable, nlp transformer (tiny) batch 8: {reason}" in collected.stdout, collected.stdout
    assert "residual stream bfloat16 in JAX, float32 in PyTorch" in collected.stdout, collected.stdout
    report = run_cli("report", "--results-dir", str(results))
    assert report.returncode == 0, report.stderr
    markdown = next(results.rglob("report.md")).read_text()
    assert reason in markdown and "not comparable" in markdown


# Inference (use case 5, image models): the forward pass's census, in eval mode. bf16 casts every parameter and
# buffer in both (module.to(dtype), and JAX's variables alike), so every class computes in bfloat16: the ViT's layer
# norm and attention's softmax, the GroupNorm ResNet's convolutions and group norm.
INFERENCE_CASES = {"vit_b_16": ("imagenet", "vit_b_16"), "resnet18_gn": ("cifar10", "resnet18_gn")}


@pytest.mark.parametrize("name", INFERENCE_CASES)
def test_the_inference_forward_passes_take_a_census_that_agrees(tmp_path, name):
    benchmark, model = INFERENCE_CASES[name]
    censuses = {}
    for framework in ("jax", "torch"):
        spec = make_spec(framework, tmp_path, benchmark=benchmark, model=model, model_variant="tiny", use_case=5,
                         precision="bf16", data_source="synthetic", synthetic_samples=64, batch_size=8,
                         warmup_steps=1)
        proc = run_backend(framework, spec, tmp_path)
        assert proc.returncode == 0, proc.stderr[-3000:]
        censuses[framework] = json.loads(read_task_table(spec.results_path).to_pandas().precision_census.iloc[0])
    assert censuses["jax"] == censuses["torch"]
    assert censuses["jax"]["matmul"] == censuses["jax"]["normalisation"] == ["bfloat16"]
    assert censuses["jax"]["residual stream"] == ["bfloat16"]
    assert "loss" not in censuses["jax"] and "optimizer update" not in censuses["jax"]  # a forward pass only
