"""Which JobSpec fields a comparison pools over: every field is classified, and the rows carry the measured ones."""

import dataclasses
import json

from helpers import spec

from bench_contract.spec import BOOKKEEPING, COMPARISON_KEY, FRAMEWORK_TUNING, MEASURED_SETTINGS, JobSpec


def test_every_spec_field_is_classified_once():
    """A new JobSpec field fails here until it is placed: does it change what is measured, is it one framework's
    own tuning, or is it bookkeeping?"""
    fields = [f.name for f in dataclasses.fields(JobSpec)]
    classes = [*COMPARISON_KEY, *MEASURED_SETTINGS, *FRAMEWORK_TUNING, *BOOKKEEPING]
    assert sorted(classes) == sorted(fields)
    assert len(classes) == len(set(classes))


def test_the_settings_differ_exactly_when_a_measured_setting_does():
    base = spec("torch")
    bookkeeping = spec("torch", trial=3, trials=5, campaign="other", cell_id="y", results_path="/elsewhere")
    assert bookkeeping.measured_settings() == base.measured_settings()
    for name, value in [("torch_compile", True), ("data_source", "synthetic"), ("learning_rate", 0.1),
                        ("model_variant", "tiny"), ("noise_multiplier", 0.0), ("epochs", 3)]:
        changed = spec("torch", **{name: value}).measured_settings()
        assert changed != base.measured_settings()
        assert json.loads(changed)[name] == value
    two_nodes = spec("torch", use_case=2, nodes=2).measured_settings()
    assert two_nodes != spec("torch", use_case=2).measured_settings() and json.loads(two_nodes)["nodes"] == 2
