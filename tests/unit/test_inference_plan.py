"""The inference use case and model variants at plan time, and the parity comparison: no framework needed."""

import json

import numpy as np
import pytest
from helpers import run_cli, settings

from bench_contract.models import weights
from bench_contract.run import parity
from bench_contract.run.inference import sample_shape, synthetic_inputs
from bench_contract.spec import JobSpec, SpecError
from orchestrator.errors import UsageError
from orchestrator.plan import catalog, matrix, rules
from orchestrator.plan.campaign import job_spec


def test_inference_defaults_to_batch_sizes_1_8_32_128():
    cells = matrix.expand("imagenet", catalog.INFERENCE, [], [], [], [], settings())
    assert sorted({c.batch_size for c in cells}) == [1, 8, 32, 128]
    assert {c.model for c in cells} == set(catalog.BENCHMARKS["imagenet"].default_models)


def test_inference_batch_sizes_are_not_limited_by_a_training_split():
    # A training use case refuses a batch larger than the synthetic training split; inference reads no split.
    cells = matrix.expand("mnist", catalog.INFERENCE, [], ["cnn"], [4096], [],
                          settings(synthetic_samples=100))
    assert {c.batch_size for c in cells} == {4096}


def test_the_tiny_variant_is_its_own_cell_and_its_own_weights_file(tmp_path):
    full = matrix.expand("imagenet", 5, ["jax"], ["resnet50"], [8], [], settings())[0]
    tiny = matrix.expand("imagenet", 5, ["jax"], ["resnet50"], [8], [],
                         settings(model_variant="tiny"))[0]
    assert "resnet50.tiny" in tiny.pair_key and "tiny" not in full.pair_key
    full_spec, tiny_spec = (job_spec(c, "camp", tmp_path, "abc") for c in (full, tiny))
    assert tiny_spec.model_variant == "tiny" and full_spec.model_variant == "full"
    assert full_spec.init_weights_path != tiny_spec.init_weights_path


def test_unknown_variant_and_bad_timed_steps_are_refused():
    with pytest.raises(UsageError, match="unknown --variant 'huge'; choose from: full, tiny"):
        settings(model_variant="huge")
    with pytest.raises(UsageError, match="--min-iterations \\(--timed-steps\\) must be at least 1"):
        settings(timed_steps=0)
    with pytest.raises(SpecError, match="unknown --variant 'huge'"):
        JobSpec(campaign="c", cell_id="x", pair_key="p", framework="jax", benchmark="imagenet", use_case=5,
                model="resnet50", batch_size=1, precision="fp32", model_variant="huge")


def test_inference_on_real_data_checks_the_folder_before_anything_is_written(tmp_path):
    with pytest.raises(UsageError, match="has no class subfolders"):
        rules.check_data("imagenet", settings(data_source="real", data_dir=str(tmp_path)))
    rules.check_data("imagenet", settings())  # synthetic data needs no folder


def test_every_model_that_infers_has_an_input_shape():
    inferring = [(bench.name, model) for bench in catalog.BENCHMARKS.values() for model in bench.models
                 if catalog.MODELS[model].infers]
    assert {model for _, model in inferring} == set(catalog.inference_models()) and len(inferring) >= 7
    for bench, model in inferring:
        for variant in catalog.MODEL_VARIANTS:
            shape = sample_shape(bench, variant)
            assert all(isinstance(n, int) and n > 0 for n in shape), (bench, model, variant)


def test_imagenet_inference_dry_run_renders_both_scripts(tmp_path):
    scripts = tmp_path / "slurm_scripts"
    proc = run_cli("--benchmark", "imagenet", "--use-case", "5", "--dry-run",
                   "--results-dir", str(tmp_path / "results"), "--scripts-dir", str(scripts))
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in scripts.iterdir()) == ["jax_imagenet_5.sh", "torch_imagenet_5.sh"]
    for script in scripts.iterdir():
        text = script.read_text()
        assert "use case 5 (inference" in text and "#SBATCH --array=0-3" in text  # batch sizes 1, 8, 32, 128
    manifest = json.loads(next((tmp_path / "results").glob("*/manifest.json")).read_text())
    assert sorted({c["batch_size"] for c in manifest["cells"]}) == [1, 8, 32, 128]


def test_a_real_inference_run_without_data_is_refused_and_writes_nothing(tmp_path):
    proc = run_cli("--benchmark", "imagenet", "--use-case", "5", "--executor", "local",
                   "--results-dir", str(tmp_path / "r"), "--scripts-dir", str(tmp_path / "s"))
    assert proc.returncode == 2
    assert "give --data-dir, or ask for --synthetic" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("args, message", [
    (["--model", "resnet5"], "unknown model 'resnet5'; choose from: mlp, cnn"),
    (["--model", "gcn"], "validate compares the inference forward pass, which model 'gcn' does not run"),
    (["--model", "cnn", "--variant", "huge"], "unknown model variant 'huge'"),
    (["--model", "cnn", "--batch-size", "0"], "--batch-size must be a positive integer"),
    (["--model", "cnn", "--executor", "submitit"], "unknown executor 'submitit' for validate"),
    (["--model", "cnn", "--precision", "tf32"], "the inference forward pass, which precision 'tf32' does not run"),
])
def test_validate_refuses_bad_input_in_one_sentence(args, message):
    proc = run_cli("validate", *args)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_parity_comparison_passes_rounding_and_fails_a_real_difference():
    rng = np.random.default_rng(0)
    reference = rng.standard_normal((4, 10)).astype(np.float32) * 5
    close = reference + np.float32(1e-6)
    assert parity.compare(close, reference, "fp32").passed
    wrong = reference.copy()
    wrong[2, 3] += 0.01  # one logit off by 0.2% of the scale: what a swapped layer would do, and less
    result = parity.compare(wrong, reference, "fp32")
    assert not result.passed
    assert result.max_abs_error == pytest.approx(0.01, rel=1e-3)
    assert result.max_relative_error == pytest.approx(0.01 / np.abs(reference).max(), rel=1e-3)
    nan = reference.copy()
    nan[0, 0] = np.nan
    assert not parity.compare(nan, reference, "fp32").passed
    with pytest.raises(ValueError, match="different shapes"):
        parity.compare(reference[:2], reference, "fp32")


def test_parity_weights_draw_every_constant_tensor_at_random():
    specs = [weights.ParamSpec("bn.weight", (8,), "ones"), weights.ParamSpec("bn.running_var", (8,), "ones"),
             weights.ParamSpec("bn.bias", (8,), "zeros"), weights.ParamSpec("bn.running_mean", (8,), "zeros"),
             weights.ParamSpec("conv.weight", (8, 3, 3, 3), "normal_fan_out", fan_out=72),
             weights.ParamSpec("pos", (1, 5, 8), "normal", std=0.02)]
    plain = weights.make_initial_weights(specs, seed=0)
    assert (plain["bn.weight"] == 1).all() and (plain["bn.running_mean"] == 0).all()
    randomized = weights.make_initial_weights(specs, seed=0, randomize_constants=True)
    for name in ("bn.weight", "bn.running_var", "bn.bias", "bn.running_mean"):
        assert np.unique(randomized[name]).size == 8, name
    assert (randomized["bn.running_var"] > 0).all()  # a variance stays a variance
    assert not np.array_equal(randomized["bn.weight"], randomized["bn.running_var"])  # a swap would show
    np.testing.assert_array_equal(plain["conv.weight"], randomized["conv.weight"])
    assert abs(plain["conv.weight"].std() - np.sqrt(2 / 72)) < 0.05
    assert abs(plain["pos"].std() - 0.02) < 0.01


def test_synthetic_inputs_are_the_same_bytes_for_the_same_seed():
    a, b = synthetic_inputs(4, (3, 8, 8), seed=1), synthetic_inputs(4, (3, 8, 8), seed=1)
    np.testing.assert_array_equal(a, b)
    assert a.dtype == np.float32 and a.shape == (4, 3, 8, 8)
    assert not np.array_equal(a, synthetic_inputs(4, (3, 8, 8), seed=2))


def test_pytorch_options_are_refused_where_they_are_not_implemented_or_mean_nothing():
    with pytest.raises(UsageError, match="--channels-last is implemented for the inference use case"):
        matrix.expand("digits", 1, [], [], [], [], settings(channels_last=True))
    with pytest.raises(UsageError, match="--channels-last is for convolutional networks; vit_b_16 is not one"):
        matrix.expand("imagenet", 5, [], ["vit_b_16"], [1], [], settings(channels_last=True))
    cells = matrix.expand("imagenet", 5, [], ["resnet50"], [1], [],
                          settings(channels_last=True, torch_compile=True))
    assert all(c.settings.torch_compile and c.settings.channels_last for c in cells)


def test_rows_record_how_each_framework_executed_the_model():
    from bench_contract.run.runner import framework_options

    base = dict(campaign="c", cell_id="x", pair_key="p", benchmark="imagenet", use_case=5, model="resnet50",
                batch_size=1, precision="fp32")
    torch_spec = JobSpec(framework="torch", torch_compile=True, **base)
    assert json.loads(framework_options(torch_spec)) == {"mode": "torch.compile", "memory_format": "contiguous"}
    assert json.loads(framework_options(JobSpec(framework="jax", **base)))["mode"] == "jit, compiled ahead of time"


def test_validate_has_help_and_list_shows_the_inference_defaults():
    proc = run_cli("validate", "-h")
    assert proc.returncode == 0 and "--model" in proc.stdout and "--executor" in proc.stdout
    listing = run_cli("list").stdout
    assert "5  inference (forward pass, eval mode) on one GPU  (default batch sizes 1 8 32 128)" in listing


def test_bf16_is_planned_for_inference_and_tf32_refused_there():
    cells = matrix.expand("imagenet", 5, [], ["resnet50"], [8], ["fp32", "bf16"], settings())
    assert {c.precision for c in cells} == {"fp32", "bf16"}
    with pytest.raises(UsageError, match="'tf32' is implemented for use case 1, 2, 3, 4 only, not for use case 5 "
                                         ".*: inference compares float32 against the narrower bf16 and fp16 instead"):
        matrix.expand("mnist", 5, [], ["mlp"], [8], ["tf32"], settings())
