"""Which JobSpec fields a comparison pools over: every field is classified, and the rows carry the measured ones."""

import dataclasses
import json

from helpers import spec

from bench_contract.config import MEASURED, SETTINGS
from bench_contract.spec import MEASURED_SETTINGS, JobSpec
from orchestrator.results.compare import KEY

# Every JobSpec field is in one of four classes. A comparison pools runs, as trials of one cell, only where the key
# (columns of their own) and the measured settings agree; bookkeeping differs between runs of the same thing.
# A framework's own tuning knobs: they belong to one side (only JAX reads XLA_FLAGS), so they never split a JAX
# run from its PyTorch pair. The rows record them as run (`xla_flags`), the tables show them beside the row, and a
# row that pools runs of one side made with different values is not comparable (orchestrator.results.certificate).
FRAMEWORK_TUNING = ("xla_flags", "tuned")
# What differs between runs of the same thing: which cell and side, which trial, where its files go; and the
# settings the configuration declares unmeasured (how many trials, where the data lies, the privacy claim asked for).
BOOKKEEPING = ("campaign", "cell_id", "pair_key", "framework", "trial", "search_try", "results_path",
               "init_weights_path", "git_commit", "schema_version", "extra",
               *(name for name in SETTINGS if name not in MEASURED))


def test_every_spec_field_is_classified_once():
    """A new JobSpec field fails here until it is placed: does it change what is measured, is it one framework's
    own tuning, or is it bookkeeping?"""
    fields = [f.name for f in dataclasses.fields(JobSpec)]
    classes = [*KEY, *MEASURED_SETTINGS, *FRAMEWORK_TUNING, *BOOKKEEPING]
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
