"""Use cases and models are objects (bench_contract.use_cases, bench_contract.model_registry), and each is tested
from its declaration: a use case or a model added to its registry is planned, refused and tabled here without a new
test. What a backend's network is, against its model's declaration: tests/backends/test_registered_models.py."""

from types import SimpleNamespace

import pytest
from helpers import settings, spec

from bench_contract.config import PRIVACY, SETTINGS, option_of
from bench_contract.model_registry import MODELS
from bench_contract.run.precision import PRECISION_POLICIES, TRAINING_POLICIES, precision_policy
from bench_contract.spec import JobSpec, SpecError
from bench_contract.use_cases import USE_CASES
from orchestrator.errors import UsageError
from orchestrator.plan import catalog, matrix
from orchestrator.plan.rules import check_settings_read
from orchestrator.results.views import VIEWS

CASES = [pytest.param(case, id=f"uc{number}") for number, case in USE_CASES.items()]
MODEL_CASES = [pytest.param(model, case, id=f"{model.name}-uc{case.number}")
               for model in MODELS.values() for case in USE_CASES.values()]


def cells_of(model, case, **overrides):
    """The cells of `model` in `case` on its benchmark, tiny and synthetic; on two processes where the case is data
    parallel."""
    options = {key: overrides.pop(key) for key in ("parallelisms", "dp_engines", "frameworks", "precisions")
               if key in overrides}
    workers = {"nodes": 2} if case.data_parallel else {}
    return matrix.expand(catalog.home_benchmark(model.name).name, case.number, options.pop("frameworks", []),
                         [model.name], [16], options.pop("precisions", []),
                         settings(model_variant="tiny", **workers, **overrides), **options)


# --- use cases ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("case", CASES)
def test_each_use_case_is_shown_by_exactly_the_tables_it_names(case):
    assert case.tables, f"use case {case.number} names no result table"
    assert {view.title for view in VIEWS if case.number in view.use_cases} == set(case.tables)


def test_every_table_shows_a_use_case():
    assert all(view.use_cases for view in VIEWS)


@pytest.mark.parametrize("case", CASES)
def test_a_data_parallel_or_dp_sgd_use_case_has_its_counterpart_registered(case):
    """Scaling compares a data-parallel cell with the one-process use case's, DP-SGD's cost with the plain step's."""
    for counterpart, flag, present in ((case.one_process, "data_parallel", case.data_parallel),
                                       (case.plain, "per_sample", case.per_sample)):
        assert (counterpart is not None) == present, (case.number, flag)
        if counterpart is not None:
            assert getattr(counterpart, flag) is False and counterpart.trains == case.trains
            assert counterpart.data_parallel == case.data_parallel or flag == "data_parallel"
            assert counterpart.per_sample == case.per_sample or flag == "per_sample"


@pytest.mark.parametrize("case", CASES)
def test_a_use_case_reads_dp_sgds_settings_exactly_where_it_computes_per_sample_gradients(case):
    dp_sgd = [name for name, declaration in SETTINGS.items() if declaration.panel == PRIVACY]
    assert dp_sgd and all(case.reads(SETTINGS[name]) == case.per_sample for name in dp_sgd)
    assert case.reads(SETTINGS["learning_rate"]) == case.trains  # declared for the training use cases


def another_value(name: str):
    """A value of the setting other than its default, as its declaration allows."""
    default, declaration = JobSpec.__dataclass_fields__[name].default, SETTINGS[name]
    if declaration.choices:
        return next(choice for choice in declaration.choices if choice not in (default, ""))
    if isinstance(default, bool):
        return not default
    if default is None:
        return 0.5
    return default + 1 if declaration.below is None else (default + declaration.below) / 2


@pytest.mark.parametrize("name", [name for name, declaration in SETTINGS.items()
                                  if declaration.use_cases and declaration.on_command_line])
def test_a_use_case_that_trains_nothing_refuses_each_setting_it_does_not_read(name):
    """From each setting's declaration (the use cases that read it), not from a list in the plan: a setting declared
    later is refused the same way."""
    inference = next(case for case in USE_CASES.values() if not case.trains)
    values = {field: getattr(settings(), field) for field in SETTINGS} | {name: another_value(name)}
    with pytest.raises(UsageError, match=f"^use case {inference.number} trains nothing .*, so "
                                         f"{option_of(name)} does not apply$"):
        check_settings_read(inference, SimpleNamespace(**values))
    check_settings_read(next(case for case in USE_CASES.values() if case.reads(SETTINGS[name])),
                        SimpleNamespace(**values))


@pytest.mark.parametrize("case", CASES)
def test_each_use_case_plans_its_default_batches_and_its_processes(case):
    bench = catalog.BENCHMARKS["digits"]
    workers = {"nodes": 2} if case.data_parallel else {}
    cells = matrix.expand("digits", case.number, [], [], [], [], settings(**workers))
    assert sorted({cell.batch_size for cell in cells}) == sorted(case.default_batch_sizes or bench.default_batch_sizes)
    if not case.data_parallel:
        with pytest.raises(UsageError, match=f"^use case {case.number} .* runs one process; --nodes"):
            matrix.expand("digits", case.number, [], [], [32], [], settings(nodes=2))


@pytest.mark.parametrize("case", CASES)
def test_a_spec_of_each_use_case_is_checked_and_run_by_what_the_use_case_says(case):
    def refused(**overrides):
        try:
            spec("torch", use_case=case.number, batch_size=4, **overrides)
        except SpecError:
            return True
        return False

    assert refused(sampling="poisson") != case.per_sample
    assert refused(dp_engine="torchfunc") != case.per_sample
    assert refused(nodes=2) != case.data_parallel
    assert (spec(use_case=case.number, batch_size=4).dp_engine_columns()[0] == "vmap") == case.per_sample
    policies = TRAINING_POLICIES if case.trains else PRECISION_POLICIES
    assert precision_policy("jax", "bf16", case.number) == policies["bf16"]


def test_a_spec_of_an_unknown_use_case_is_refused_in_one_sentence():
    for wrong in (7, True, "1"):
        with pytest.raises(SpecError, match=rf"^use_case must be one of 1, 2, 3, 4, 5, got {wrong!r}$"):
            JobSpec(campaign="c", cell_id="x", pair_key="x", framework="jax", benchmark="digits", use_case=wrong,
                    model="mlp", batch_size=4, precision="fp32")


# --- models ------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("model, case", MODEL_CASES)
def test_each_model_plans_the_use_cases_it_runs_and_is_refused_the_others_with_the_reason(model, case):
    if model.runs(case):
        assert {(cell.framework, cell.model) for cell in cells_of(model, case)} == {("jax", model.name),
                                                                               ("torch", model.name)}
        return
    with pytest.raises(UsageError) as info:
        cells_of(model, case)
    batch_norm = model.batch_norm and (case.per_sample or case.data_parallel)
    reason = f"is refused for {model.name}: " if batch_norm else "is declared but not implemented yet"
    assert reason in str(info.value) and ("batch" in str(info.value)) == batch_norm


@pytest.mark.parametrize("model", MODELS.values(), ids=list(MODELS))
def test_a_model_with_batch_norm_has_neither_per_sample_gradients_nor_a_sharded_state(model):
    if model.batch_norm:
        assert not (model.per_sample or model.shardable or model.opacus or model.opacus_mixed)
    assert not model.opacus_mixed or model.opacus, "Opacus runs a model in bf16 only where it runs it in fp32"


@pytest.mark.parametrize("model", [m for m in MODELS.values() if m.per_sample], ids=lambda m: m.name)
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_opacus_plans_the_models_and_precisions_declared_for_it(model, precision):
    case = USE_CASES[3]
    runs = model.opacus_mode(mixed=precision == "bf16") is not None
    if runs:
        assert cells_of(model, case, dp_engines=["opacus"], precisions=[precision])
        return
    with pytest.raises(UsageError, match="^--dp-engine opacus"):
        cells_of(model, case, dp_engines=["opacus"], precisions=[precision])


@pytest.mark.parametrize("model", [m for m in MODELS.values() if m.runs(USE_CASES[2])], ids=lambda m: m.name)
def test_a_sharded_state_plans_for_the_models_declared_shardable(model):
    if model.shardable:
        assert {cell.settings.parallelism for cell in cells_of(model, USE_CASES[2], parallelisms=["fsdp"])} == {"fsdp"}
        return
    with pytest.raises(UsageError, match=f"^--parallelism fsdp: sharded state is implemented for gpt, not {model.name}$"):
        cells_of(model, USE_CASES[2], parallelisms=["fsdp"])


@pytest.mark.parametrize("model", [m for m in MODELS.values() if m.infers], ids=lambda m: m.name)
def test_channels_last_plans_for_the_convolutional_models(model):
    inference = USE_CASES[catalog.INFERENCE]
    if model.convolutional:
        assert cells_of(model, inference, channels_last=True)
        return
    with pytest.raises(UsageError, match=f"^--channels-last is for convolutional networks; {model.name} is not one"):
        cells_of(model, inference, channels_last=True)
