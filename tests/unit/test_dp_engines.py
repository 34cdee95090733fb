"""PyTorch's DP-SGD engines (--dp-engine torchfunc,opacus): an axis of PyTorch's cells in use cases 3 and
4 with JAX planned once, refused with a reason where it means nothing, named on every row, and compared as JAX
against each engine."""

import pandas as pd
import pytest
from helpers import run_cli, settings, spec, write_spec_run

from bench_contract.run.runner import base_context
from bench_contract.model_registry import MODELS
from bench_contract.spec import SpecError
from orchestrator.errors import UsageError
from orchestrator.plan import matrix
from orchestrator.plan.campaign import job_spec
from orchestrator.results.compare import comparison_frame
from orchestrator.results.views import use_case_frame, view_tables


def test_each_pytorch_cell_runs_once_per_engine_and_jax_once_with_one_pair_key(tmp_path):
    cells = matrix.expand("cifar10", 3, [], ["cnn", "resnet18_gn"], [32], [], settings(),
                          dp_engines=["torchfunc", "opacus"])
    jax = [c for c in cells if c.framework == "jax"]
    torch = [c for c in cells if c.framework == "torch"]
    assert len(jax) == 2 and {c.settings.dp_engine for c in jax} == {""}
    assert sorted((c.model, c.settings.dp_engine) for c in torch) == [
        ("cnn", "opacus"), ("cnn", "torchfunc"), ("resnet18_gn", "opacus"), ("resnet18_gn", "torchfunc")]
    for model in ("cnn", "resnet18_gn"):
        keys = {c.pair_key for c in cells if c.model == model}
        assert len(keys) == 1  # the JAX cell and both engines' cells are one comparison
    assert len({c.cell_id for c in cells}) == len(cells)
    assert {c.cell_id.rsplit("-", 1)[1] for c in torch} == {"torchfunc", "opacus"}
    specs = {(c.framework, c.settings.dp_engine): job_spec(c, "camp", tmp_path, "abc") for c in cells if c.model == "cnn"}
    assert specs["torch", "opacus"].dp_engine == "opacus" and specs["jax", ""].dp_engine == ""


def test_pytorch_dp_sgd_defaults_to_torch_func_and_other_use_cases_have_no_engine():
    private = matrix.expand("digits", 3, [], ["mlp"], [32], [], settings())
    assert {(c.framework, c.settings.dp_engine) for c in private} == {("jax", ""), ("torch", "torchfunc")}
    plain = matrix.expand("digits", 1, [], ["mlp"], [32], [], settings())
    assert {c.settings.dp_engine for c in plain} == {""}
    assert all(c.cell_id == f"{c.framework}-{c.pair_key}" for c in plain)


@pytest.mark.parametrize("benchmark, use_case, kwargs, message", [
    ("digits", 3, {"dp_engines": ["functorch"]}, "unknown --dp-engine 'functorch'; choose from: torchfunc, opacus"),
    # An unknown name is refused as such before the use case is looked at.
    ("digits", 1, {"dp_engines": ["functorch"]}, "unknown --dp-engine 'functorch'; choose from: torchfunc, opacus"),
    ("digits", 1, {"dp_engines": ["opacus"]}, "--dp-engine chooses how PyTorch computes DP-SGD's per-sample gradients"),
    ("digits", 3, {"dp_engines": ["opacus"], "frameworks": ["jax"]}, "which use case 3 with jax does not compute"),
    ("digits", 3, {"dp_engines": ["opacus"], "torch_modes": ["eager", "compiled"]}, "--dp-engine opacus runs eagerly"),
    ("nlp", 3, {"dp_engines": ["torchfunc", "opacus"], "models": ["transformer"]},
     "--dp-engine opacus: transformer runs in neither of its modes (hooks, expanded weights): Opacus runs mlp, "
     "cnn, resnet18_gn, resnet50_gn, vit_b_16; plan transformer with --dp-engine torchfunc"),
    ("digits", 3, {"dp_engines": ["torchfunc", "opacus"], "paired": True}, "give one --dp-engine per paired campaign"),
    # Under autocast Opacus's expanded weights fail and a ResNet's in-place operations break its hooks.
    ("cifar10", 3, {"dp_engines": ["opacus"], "models": ["cnn", "resnet18_gn"], "precisions": ["fp32", "bf16"]},
     "--dp-engine opacus with --precision bf16: Opacus runs bf16 on mlp, cnn, vit_b_16 only (resnet18_gn's in-place "
     "operations break its hooks, and its expanded weights fail under autocast); plan resnet18_gn in bf16 with "
     "--dp-engine torchfunc"),
])
def test_engines_are_refused_where_they_mean_nothing_in_one_sentence(benchmark, use_case, kwargs, message):
    kwargs = dict(kwargs)  # a copy: the parameters are shared by every run of the test in this process (mutmut's)
    run = settings(paired=kwargs.pop("paired", False))
    frameworks, models = kwargs.pop("frameworks", []), kwargs.pop("models", [])
    with pytest.raises(UsageError) as error:
        matrix.expand(benchmark, use_case, frameworks, models, [32], kwargs.pop("precisions", []), run, **kwargs)
    assert message in str(error.value) and "\n" not in str(error.value)


def test_the_cli_plans_the_engines_and_refuses_a_bad_one_with_nothing_written(tmp_path):
    common = ["--benchmark", "cifar10", "--use-case", "3", "--variant", "tiny", "--synthetic", "--dry-run",
              "--executor", "local", "--results-dir", str(tmp_path / "results"), "--scripts-dir", str(tmp_path / "s")]
    proc = run_cli(*common, "--models", "cnn", "--dp-engine", "torchfunc,opacus")
    assert proc.returncode == 0, proc.stderr
    assert "-torchfunc" in proc.stdout and "-opacus" in proc.stdout
    refused = tmp_path / "refused"
    proc = run_cli(*common[:-4], "--results-dir", str(refused), "--scripts-dir", str(refused / "s"),
                   "--models", "cnn", "--dp-engine", "opacus", "--torch-modes", "compiled")
    assert proc.returncode == 2 and "--dp-engine opacus runs eagerly" in proc.stderr
    assert not refused.exists()


def engine_spec(framework, **overrides):
    """A DP-SGD cell (use case 3) of CIFAR-10's GroupNorm ResNet-18."""
    return spec(framework, **({"benchmark": "cifar10", "use_case": 3, "model": "resnet18_gn"} | overrides))


def test_every_row_names_the_engine_and_how_it_ran():
    assert base_context(engine_spec("jax"))["dp_engine"] == "vmap"
    torchfunc = base_context(engine_spec("torch", dp_engine="torchfunc"))
    assert torchfunc["dp_engine"] == "torchfunc" and "torch.func" in torchfunc["dp_engine_mode"]
    opacus = base_context(engine_spec("torch", dp_engine="opacus"))
    assert (opacus["dp_engine"], opacus["dp_engine_mode"]) == (
        "opacus", f"GradSampleModule, grad_sample_mode={MODELS['resnet18_gn'].opacus}")
    # In bf16, Opacus runs hooks: its expanded weights fail under autocast.
    mixed = base_context(engine_spec("torch", dp_engine="opacus", model="cnn", precision="bf16"))
    assert mixed["dp_engine_mode"] == "GradSampleModule, grad_sample_mode=hooks"
    assert MODELS["cnn"].opacus == "ew"  # and in fp32 expanded weights
    plain = base_context(engine_spec("torch", use_case=1))
    assert (plain["dp_engine"], plain["dp_engine_mode"]) == ("", "")


@pytest.mark.parametrize("overrides, message", [
    ({"framework": "jax", "dp_engine": "opacus"}, "leave it empty for jax use case 3"),
    ({"use_case": 1, "dp_engine": "torchfunc"}, "leave it empty for torch use case 1"),
    ({"model": "gcn", "benchmark": "gnn", "dp_engine": "opacus"}, "gcn runs in neither of its modes"),
    ({"dp_engine": "opacus", "torch_compile": True}, "dp_engine opacus runs eagerly"),
    ({"dp_engine": "opacus", "precision": "bf16"}, "Opacus runs bf16 on mlp, cnn, vit_b_16 only"),
])
def test_a_hand_written_spec_with_an_engine_it_cannot_run_is_refused(overrides, message):
    overrides = dict(overrides)  # a copy: the parameters are shared by every run of the test in this process
    with pytest.raises(SpecError, match=message):
        engine_spec(overrides.pop("framework", "torch"), **overrides)


def write_engine_run(root, framework, throughput, speedup, dp_engine="", **overrides):
    """One DP-SGD task's result rows (write_spec_run), with its vectorisation speed-up."""
    run_spec = engine_spec(framework, cell_id=f"{framework}-cell-{dp_engine}-{len(overrides)}", dp_engine=dp_engine,
                       **overrides)
    return write_spec_run(root, run_spec, throughput, metrics={"vectorization_speedup": (speedup, "x")})


@pytest.fixture
def engines_runs(tmp_path):
    return pd.concat([write_engine_run(tmp_path, "jax", 2000, 30.0),
                      write_engine_run(tmp_path, "torch", 1000, 10.0, "torchfunc"),
                      write_engine_run(tmp_path, "torch", 500, 5.0, "opacus")], ignore_index=True)


def test_the_comparison_shows_jax_against_each_engine(engines_runs):
    frame = comparison_frame(engines_runs).set_index("differs_in")
    assert sorted(frame.index) == ["Opacus", "torch.func"]
    assert frame.loc["torch.func", "speedup"] == 2.0 and frame.loc["Opacus", "speedup"] == 4.0
    assert set(frame["runs_jax_torch"]) == {"1/1"}  # the one JAX run on each row, each engine's own run
    assert set(frame["jax_throughput"]) == {2000}
    (table,) = view_tables(use_case_frame(engines_runs))
    column = table.headers.index("settings")
    assert {row[column] for row in table.rows if row[column]} == {"Opacus", "torch.func"}


def test_each_jax_run_is_compared_with_the_engines_of_its_own_configuration(tmp_path):
    # Two noise multipliers, each with a JAX run and both engines: a JAX run must meet only the PyTorch runs equal
    # to it in all but the engine, never those of the other configuration.
    runs = []
    for sigma, jax_throughput in ((1.0, 2000), (2.0, 3000)):
        runs += [write_engine_run(tmp_path, "jax", jax_throughput, 30.0, noise_multiplier=sigma),
                 write_engine_run(tmp_path, "torch", 1000, 10.0, "torchfunc", noise_multiplier=sigma),
                 write_engine_run(tmp_path, "torch", 500, 5.0, "opacus", noise_multiplier=sigma)]
    frame = comparison_frame(pd.concat(runs, ignore_index=True))
    assert len(frame) == 4 and set(frame["runs_jax_torch"]) == {"1/1"}
    assert sorted(frame["speedup"]) == [2.0, 3.0, 4.0, 6.0]  # 2000 and 3000 against 1000 and 500, each once


def test_the_use_case_table_has_jax_s_vectorisation_beside_each_engine(engines_runs):
    frame = use_case_frame(engines_runs).set_index("differs_in")
    assert set(frame["jax_vectorization_speedup"]) == {30.0}
    assert frame.loc["Opacus", "torch_vectorization_speedup"] == 5.0


def test_collect_prints_a_row_per_engine(tmp_path, engines_runs):
    proc = run_cli("collect", "--results-dir", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    lines = [line for line in proc.stdout.splitlines() if line.lstrip().startswith("cifar10")]
    assert any("Opacus" in line and "4.00x" in line for line in lines)
    assert any("torch.func" in line and "2.00x" in line for line in lines)
