"""The search spaces of --tune (bench_contract.tuning): each knob declared once with why it keeps the results, the
K configurations each framework draws, and the settings --tune refuses beside it."""

import math

import pytest
from helpers import run_cli, spec

from bench_contract.config import ConfigError
from bench_contract.spec import SpecError
from bench_contract.tuning import KNOBS, TUNED_USE_CASES, TuningError, configurations, space

FRAMEWORKS = ("jax", "torch")


def spaces(device: str, use_case: int, convolutional: bool = False):
    return {fw: space(fw, device, use_case, convolutional, constant_rate=True) for fw in FRAMEWORKS}


def space_size(knobs, device: str) -> int:
    """How many configurations the grid of `knobs` holds on `device`."""
    return math.prod(len(knob.values_on(device)) for knob in knobs)


@pytest.mark.parametrize("knob", KNOBS, ids=lambda knob: knob.name)
def test_each_knob_says_why_it_keeps_the_results_and_has_somewhere_to_move(knob):
    assert knob.framework in FRAMEWORKS and len(knob.why) > 40
    assert len(set(knob.values_on("gpu"))) == len(knob.values_on("gpu")) >= 2
    assert set(knob.devices) <= {"cpu", "gpu"} and set(knob.use_cases) <= set(TUNED_USE_CASES)


@pytest.mark.parametrize("device", ["cpu", "gpu"])
@pytest.mark.parametrize("use_case", TUNED_USE_CASES)
def test_both_frameworks_get_the_same_budget_out_of_the_box_first_and_no_repeats(device, use_case):
    both = spaces(device, use_case)
    k = min(8, *(space_size(knobs, device) for knobs in both.values()))  # the plan refuses a budget above either
    assert k >= 4
    drawn = {fw: configurations(knobs, device, k, seed=3) for fw, knobs in both.items()}
    assert {fw: len(configs) for fw, configs in drawn.items()} == {fw: k for fw in FRAMEWORKS}
    for fw, configs in drawn.items():
        assert configs[0] == {}, fw  # out of the box is always tried
        assert all(configs[1:]), fw  # and only once
        assert len({tuple(sorted(c.items())) for c in configs}) == k, fw


def test_the_draw_is_reproducible_and_follows_the_seed():
    knobs = spaces("cpu", 1)["torch"]
    assert configurations(knobs, "cpu", 6, seed=0) == configurations(knobs, "cpu", 6, seed=0)
    assert any(configurations(knobs, "cpu", 6, seed=s) != configurations(knobs, "cpu", 6, seed=0) for s in (1, 2, 3))


def test_a_budget_above_the_space_is_refused():
    knobs = spaces("cpu", 5)["jax"]
    size = space_size(knobs, "cpu")
    assert len(configurations(knobs, "cpu", size, seed=0)) == size  # the whole space is a budget
    with pytest.raises(TuningError, match=f"^--tune {size + 1} asks for more configurations than the {size} "):
        configurations(knobs, "cpu", size + 1, seed=0)


def test_gpu_only_knobs_stay_off_a_cpu_and_convolution_knobs_off_an_mlp():
    cpu = {k.name for knobs in spaces("cpu", 5).values() for k in knobs}
    gpu_conv = {k.name for knobs in spaces("gpu", 5, convolutional=True).values() for k in knobs}
    assert not cpu & {"cudnn_benchmark", "xla_gpu_autotune_level", "channels_last"}
    assert {"cudnn_benchmark", "xla_gpu_autotune_level", "channels_last"} <= gpu_conv


def test_a_spec_refuses_a_knob_of_the_other_framework_and_tuned_settings_out_of_the_box():
    with pytest.raises(SpecError, match="^tuned setting 'torch_mode' is not one of jax's knobs"):
        spec("jax", tuning="tuned", tuned={"torch_mode": "default"})
    with pytest.raises(SpecError, match="^an out-of-the-box run takes no tuned settings"):
        spec("torch", tuned={"torch_mode": "default"})
    assert spec("torch", tuning="tuned", tuned={"torch_mode": "default"}).compile_mode() == "default"


@pytest.mark.parametrize("args, said", [
    (["--tune", "1"], "--tune 1 would try out of the box alone"),
    (["--tune", "2", "--torch-compile"], "--torch-compile cannot be given with it"),
    (["--tune", "2", "--device", "auto"], "give --device cpu or --device gpu"),
    (["--tune", "99"], "--tune must be at most 64"),
    (["--tune", "9", "--use-case", "5"], "--tune 9 asks for more configurations than the 8 of this search space "
                                         "(JAX's for mlp in use case 5 on the cpu); give a smaller --tune"),
    (["--tune", "2", "--use-case", "3"], "--tune runs use cases 1 and 5 (one process on one device), not use case 3"),
])
def test_tune_refuses_what_it_cannot_run_in_one_sentence(tmp_path, args, said):
    use_case = [] if "--use-case" in args else ["--use-case", "1"]
    proc = run_cli("--benchmark", "digits", *use_case, "--device", "cpu", *args, "--dry-run",
                   "--results-dir", str(tmp_path / "r"), "--scripts-dir", str(tmp_path / "s"))
    assert proc.returncode == 2 and said in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert not (tmp_path / "r").exists()


def test_the_config_rule_holds_without_the_command_line():
    from bench_contract.config import CellConfig

    with pytest.raises(ConfigError, match="needs --paired$"):
        CellConfig(tune=4, device="cpu")
