"""The vision models: the same network in both frameworks, checked on logits, parameter lists and counts.

Parametrized over the catalog's built models, so a newly registered model is covered without a new test.
The suite runs the tiny variants' forward passes; the full networks are compared on their parameter lists
(names, shapes, init rules) without computing anything. `python main.py validate --model M` runs the full
forward pass (README).
"""

import dataclasses
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from helpers import metric, run_cli, run_in_env, write_image_folder

from bench_contract.models.mlp import param_specs
from bench_contract.models.vision import GROUP_NORM_VARIANTS
from bench_contract.results import read_task_table
from bench_contract.run.inference import num_classes, sample_shape, synthetic_inputs
from bench_contract.run.parity import ParitySpec
from bench_contract.spec import JobSpec
from orchestrator.plan import catalog
from orchestrator.run.validate import read_result

MODELS = catalog.inference_models()  # what `validate` compares; the training-only models have their own tests
FRAMEWORKS = ("torch", "jax")  # PyTorch first, as `validate` does; either order makes the same weights file


PRECISIONS = [name for name, p in catalog.PRECISIONS.items() if p.implemented_for(catalog.USE_CASES[catalog.INFERENCE])]


@pytest.fixture(scope="module")
def tiny_parity(tmp_path_factory):
    """Every built model's tiny variant at every inference precision through both backends: one process per
    framework for all of them."""
    work = tmp_path_factory.mktemp("parity")
    specs = {}
    for model in MODELS:
        bench = catalog.home_benchmark(model).name
        for precision in PRECISIONS:
            folder = work / f"{model}-{precision}"
            folder.mkdir()
            spec = ParitySpec(model=model, variant="tiny", benchmark=bench, sample_shape=sample_shape(bench, "tiny"),
                              num_classes=num_classes(bench), batch_size=3, precision=precision, seed=7,
                              device="cpu", weights_path=str(folder / "weights.npz"),
                              input_path=str(folder / "input.npy"), output_dir=str(folder))
            np.save(spec.input_path, synthetic_inputs(spec.batch_size, spec.sample_shape, spec.seed))
            (folder / "spec.json").write_text(spec.to_json())
            specs[(model, precision)] = spec
    for framework in FRAMEWORKS:
        proc = run_in_env(framework, "-m", f"{framework}_backend.parity",
                      *[str(Path(spec.output_dir) / "spec.json") for spec in specs.values()])
        assert proc.returncode == 0, proc.stderr[-3000:]
    return specs


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("model", MODELS)
def test_tiny_variant_gives_the_same_logits_in_both_frameworks(tiny_parity, model, precision):
    spec = tiny_parity[(model, precision)]
    result = read_result(spec)
    assert result.same_parameter_list
    assert result.parameter_counts["jax"] == result.parameter_counts["torch"] > 0
    assert result.logits_shape == (3, spec.num_classes)
    assert result.comparison.passed, result.comparison
    reports = [json.loads(spec.report_path(fw).read_text()) for fw in FRAMEWORKS]
    assert reports[0]["precision_policy"] == reports[1]["precision_policy"]
    assert reports[0]["precision_policy"].startswith(f"{precision}:")


DUMP_SPECS = """
import dataclasses, json, sys
from {fw}_backend.run import {cls}
backend, out = {cls}(), {{}}
for model, shape, classes in json.loads(sys.argv[1]):
    specs = backend.param_specs(model, tuple(shape), classes, "full")
    out[model] = [dataclasses.asdict(s) for s in sorted(specs, key=lambda s: s.name)]
print(json.dumps(out))
"""

TORCHVISION_COUNTS = """
import json, sys, torchvision.models as tvm
print(json.dumps({m: sum(p.numel() for p in getattr(tvm, m)(weights=None).parameters()) for m in sys.argv[1:]}))
"""


def test_full_networks_have_the_same_parameter_lists_and_torchvisions_parameter_count():
    cases = []
    for model in MODELS:
        bench = catalog.home_benchmark(model).name
        cases.append([model, list(sample_shape(bench, "full")), num_classes(bench)])
    lists = {}
    for framework, cls in (("torch", "TorchBackend"), ("jax", "JaxBackend")):
        proc = run_in_env(framework, "-c", DUMP_SPECS.format(fw=framework, cls=cls), json.dumps(cases))
        assert proc.returncode == 0, proc.stderr[-3000:]
        lists[framework] = json.loads(proc.stdout)
    assert lists["jax"] == lists["torch"]
    # The MLP's list as the contract states it (other code makes weights from it) is the one both derive.
    contract_mlp = param_specs("mlp", sample_shape(catalog.home_benchmark("mlp").name, "full"), 10)
    assert lists["torch"]["mlp"] == [dataclasses.asdict(s) | {"shape": list(s.shape)}
                                     for s in sorted(contract_mlp, key=lambda s: s.name)]
    # A GroupNorm variant learns what its batch-norm network learns (a weight and a bias per channel): its count.
    imagenet = {model: GROUP_NORM_VARIANTS.get(model, model) for model in catalog.BENCHMARKS["imagenet"].models}
    proc = run_in_env("torch", "-c", TORCHVISION_COUNTS, *set(imagenet.values()))
    assert proc.returncode == 0, proc.stderr
    counts = json.loads(proc.stdout)
    for model, torchvision_model in imagenet.items():
        learned = [s for s in lists["jax"][model] if not s["name"].endswith(("running_mean", "running_var"))]
        assert sum(int(np.prod(s["shape"])) for s in learned) == counts[torchvision_model], model


def test_validate_prints_both_counts_the_errors_and_pass():
    proc = run_cli("validate", "--model", "mobilenet_v3_small", "--variant", "tiny", "--batch-size", "2",
                   "--device", "cpu", "--channels-last", timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("model mobilenet_v3_small (tiny), batch 2, fp32, seed 0, PyTorch eager, channels_last")
    counts = [int(n.replace(",", "")) for n in lines[1].split() if n.replace(",", "").isdigit()]
    assert len(counts) == 2 and counts[0] == counts[1] > 0
    assert "max abs error" in proc.stdout and "max relative error" in proc.stdout
    assert lines[-1] == "PASS"


@pytest.fixture(scope="module")
def inference_rows(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("inference")
    return run_inference_both(tmp_path, model="efficientnet_b0", batch_size=2, data_source="synthetic",
                              warmup_steps=1, timed_steps=4, min_duration_s=0.0)


def run_inference_both(tmp_path, **fields) -> dict[str, pd.DataFrame]:
    """One inference cell per framework (tiny variant, CPU) from one weights file; their result rows."""
    frames = {}
    for framework in FRAMEWORKS:
        spec = JobSpec(campaign="test", cell_id=f"{framework}-inf", pair_key="inf", framework=framework,
                       benchmark="imagenet", use_case=catalog.INFERENCE, precision="fp32", device="cpu",
                       model_variant="tiny", results_path=str(tmp_path / f"{framework}.parquet"),
                       init_weights_path=str(tmp_path / "init.npz"), **fields)
        path = tmp_path / f"{framework}.json"
        path.write_text(spec.to_json())
        proc = run_in_env(framework, "-m", f"{framework}_backend.run", str(path))
        assert proc.returncode == 0, proc.stderr[-3000:]
        frames[framework] = read_task_table(spec.results_path).to_pandas()
    return frames


def test_inference_records_latency_percentiles_throughput_and_memory(inference_rows):
    for df in inference_rows.values():
        assert metric(df, "timed_steps") == 4 and metric(df, "warmup_steps") == 1
        p50, p95, p99 = (metric(df, f"step_time_{p}") for p in ("p50", "p95", "p99"))  # latency per batch
        assert 0 < p50 <= p95 <= p99
        assert metric(df, "step_time_mean") > 0 and metric(df, "step_time_std") >= 0
        assert metric(df, "throughput") == pytest.approx(2 * 1e3 / metric(df, "step_time_mean"), rel=1e-6)
        assert metric(df, "peak_host_rss") > 50e6
        assert metric(df, "first_batch_time") > 0
        assert (df.model_variant == "tiny").all() and (df.use_case == catalog.INFERENCE).all()
    assert metric(inference_rows["jax"], "parameter_count") == metric(inference_rows["torch"], "parameter_count")
    assert inference_rows["jax"].init_weights_sha256.iloc[0] == inference_rows["torch"].init_weights_sha256.iloc[0]
    assert inference_rows["jax"].precision_policy.iloc[0] == inference_rows["torch"].precision_policy.iloc[0]


def test_jax_inference_compile_time_is_recorded_apart_and_pytorch_eager_claims_none(inference_rows):
    jax_rows, torch_rows = inference_rows["jax"], inference_rows["torch"]
    assert metric(jax_rows, "lowering_time") > 0 and metric(jax_rows, "xla_compile_time") > 0
    # Tracing and lowering are part of the compile time, as Dynamo's tracing is of PyTorch's.
    assert metric(jax_rows, "compile_time") == metric(jax_rows, "lowering_time") + metric(jax_rows, "xla_compile_time")
    assert "compile_time" not in set(torch_rows.metric)  # eager PyTorch compiles nothing ahead of time


def test_both_environments_read_an_image_folder_to_the_same_pixels_and_run_inference_on_it(tmp_path):
    root = write_image_folder(tmp_path / "imagenet", classes=2, per_class=2)
    decode = ("import sys, numpy as np; from bench_contract.data.images import ImageFolder, split_folder; "
              "x, y = ImageFolder.scan(split_folder(sys.argv[1], 'val')).batch(range(4), 64); np.save(sys.argv[2], x)")
    pixels = {}
    for framework in FRAMEWORKS:
        out = tmp_path / f"{framework}-pixels.npy"
        proc = run_in_env(framework, "-c", decode, str(root), str(out))
        assert proc.returncode == 0, proc.stderr[-2000:]
        pixels[framework] = np.load(out)
    assert pixels["jax"].shape == (4, 3, 64, 64)
    np.testing.assert_array_equal(pixels["jax"], pixels["torch"])  # the same bytes, not merely close
    frames = run_inference_both(tmp_path, model="mobilenet_v3_small", batch_size=4, data_source="real",
                                data_dir=str(root), warmup_steps=0, timed_steps=2, min_duration_s=0.0)
    for df in frames.values():
        assert (df.data_source == "real").all() and metric(df, "timed_steps") == 2
    # two class folders: the classifier has two outputs in both, so the same (smaller) parameter count
    assert metric(frames["jax"], "parameter_count") == metric(frames["torch"], "parameter_count")


def test_pytorch_options_torch_compile_and_channels_last_are_run_and_recorded(tmp_path):
    spec = JobSpec(campaign="test", cell_id="torch-compiled", pair_key="compiled", framework="torch",
                   benchmark="mnist", use_case=catalog.INFERENCE, model="cnn", batch_size=2, precision="fp32",
                   device="cpu", data_source="synthetic", model_variant="tiny", warmup_steps=1, timed_steps=3,
                   min_duration_s=0.0, torch_compile=True, channels_last=True, results_path=str(tmp_path / "rows.parquet"),
                   init_weights_path=str(tmp_path / "init.npz"))
    (tmp_path / "spec.json").write_text(spec.to_json())
    proc = run_in_env("torch", "-m", "torch_backend.run", str(tmp_path / "spec.json"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    df = read_task_table(spec.results_path).to_pandas()
    assert json.loads(df.framework_options.iloc[0]) == {"mode": "torch.compile", "memory_format": "channels_last"}
    # compilation happens inside torch.compile's first call; the steady call after it is subtracted
    assert metric(df, "compile_first_call_time") > metric(df, "compile_time") > 0
    assert metric(df, "step_time_p50") > 0 and metric(df, "timed_steps") == 3
    assert metric(df, "recompilations_timed") == 0  # compiled once, before the timed region, and never again


NO_TORCHVISION_UNTIL_NEEDED = """
import sys
from torch_backend import models, run, vision
for name in ("mlp", "cnn", "transformer"):
    vision.disable_random_regularisers(models.build(name, (1, 28, 28) if name != "transformer" else (16,), 10, "tiny"))
print(sorted(m for m in ("torchvision", "torch._dynamo", "torch.distributed.fsdp", "torch.distributed.tensor")
             if m in sys.modules))
"""


def test_the_torch_backend_imports_torchvision_only_for_its_models():
    """Importing torchvision imports TorchDynamo, about 1.2 s of CPU in each of the suite's hundreds of PyTorch
    processes: a backend that trains a model of its own (MLP, CNN, transformer) must import neither; and FSDP2 with
    DTensor, 0.6 s more, only where it shards one (torch_backend.sharding)."""
    proc = run_in_env("torch", "-c", NO_TORCHVISION_UNTIL_NEEDED)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split("\n")[-2] == "[]", proc.stdout
