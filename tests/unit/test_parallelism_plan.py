"""`--parallelism ddp,fsdp`: use case 2's state replicated or sharded, each layout a cell in both
frameworks, JAX replicated compared with DDP and JAX sharded with FSDP2; refused where it means nothing, in one
sentence, before anything is written; without it, the default layout's cells."""

import json

import pandas as pd
import pytest
from helpers import run_cli, settings, spec, write_spec_run

from bench_contract.spec import SpecError
from orchestrator.errors import UsageError
from orchestrator.plan import matrix
from orchestrator.plan.campaign import job_spec
from orchestrator.results.compare import comparison_frame


def test_each_layout_is_a_cell_in_both_frameworks_and_its_own_pair(tmp_path):
    cells = matrix.expand("nlp", 2, [], ["gpt"], [32], [], settings(nodes=2), parallelisms=["ddp", "fsdp"])
    assert sorted((c.framework, c.settings.parallelism) for c in cells) == [
        ("jax", "ddp"), ("jax", "fsdp"), ("torch", "ddp"), ("torch", "fsdp")]
    keys = {layout: {c.pair_key for c in cells if c.settings.parallelism == layout} for layout in ("ddp", "fsdp")}
    assert len(keys["ddp"]) == len(keys["fsdp"]) == 1 and keys["ddp"] != keys["fsdp"]
    assert "-fsdp-" in next(iter(keys["fsdp"])) and "-fsdp-" not in next(iter(keys["ddp"]))
    specs = {(c.framework, c.settings.parallelism): job_spec(c, "camp", tmp_path, "abc") for c in cells}
    assert specs["torch", "fsdp"].parallelism == "fsdp" and specs["jax", "ddp"].parallelism == "ddp"


def test_cells_planned_without_the_option_are_the_default_layouts():
    """No --parallelism plans the same cells as --parallelism ddp, the same campaign; sharded cells are others."""
    without = matrix.expand("nlp", 2, [], ["gpt"], [32], [], settings(nodes=2))
    default = matrix.expand("nlp", 2, [], ["gpt"], [32], [], settings(nodes=2), parallelisms=["ddp"])
    assert [c.cell_id for c in without] == [c.cell_id for c in default]
    sharded = matrix.expand("nlp", 2, [], ["gpt"], [32], [], settings(nodes=2), parallelisms=["fsdp"])
    assert {c.cell_id for c in sharded}.isdisjoint(c.cell_id for c in without)


@pytest.mark.parametrize("use_case, model, kwargs, message", [
    (2, "gpt", {"parallelisms": ["zero3"]}, "unknown --parallelism 'zero3'; choose from: ddp, fsdp"),
    (2, "transformer", {"parallelisms": ["fsdp"]}, "sharded state is implemented for gpt, not transformer"),
    (1, "gpt", {"parallelisms": ["fsdp"]}, "sharded state is for data-parallel training (use case 2), not use case 1"),
])
def test_layouts_are_refused_where_they_mean_nothing(use_case, model, kwargs, message):
    run = settings(nodes=2 if use_case == 2 else 1)
    with pytest.raises(UsageError, match=message.replace("(", r"\(").replace(")", r"\)")):
        matrix.expand("nlp", use_case, [], [model], [32], [], run, **kwargs)


def test_the_cli_refuses_a_bad_layout_with_nothing_written(tmp_path):
    proc = run_cli("--benchmark", "nlp", "--models", "transformer", "--use-case", "2", "--parallelism", "fsdp",
                   "--synthetic", "--dry-run", "--results-dir", str(tmp_path / "r"), "--scripts-dir", str(tmp_path / "s"))
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1] == ("error: --parallelism fsdp: sharded state is implemented for gpt, "
                                                    "not transformer")
    assert not (tmp_path / "r").exists() and not (tmp_path / "s").exists()


def gpt_spec(framework, **overrides):
    """A cell of the tiny language model in use case 2, on two nodes."""
    return spec(framework, **({"benchmark": "nlp", "use_case": 2, "model": "gpt", "nodes": 2, "model_variant": "tiny"}
                              | overrides))


@pytest.mark.parametrize("overrides, message", [
    ({"parallelism": "zero3"}, "unknown --parallelism 'zero3'; choose from: ddp, fsdp"),
    ({"parallelism": "fsdp", "use_case": 4}, "not use case 4"),
    ({"parallelism": "fsdp", "model": "mlp", "benchmark": "digits"}, "implemented for gpt, not mlp"),
])
def test_a_hand_written_spec_with_a_layout_it_cannot_run_is_refused(overrides, message):
    with pytest.raises(SpecError, match=message):
        gpt_spec("torch", **dict(overrides))


def write_layout_run(root, framework, throughput, parallelism):
    """One task's result rows (write_spec_run) of a cell in the state layout `parallelism`."""
    return write_spec_run(root, gpt_spec(framework, cell_id=f"{framework}-{parallelism}", parallelism=parallelism),
                          throughput)


def test_the_comparison_pairs_each_layout_with_itself(tmp_path):
    runs = pd.concat([write_layout_run(tmp_path, "jax", 400, "ddp"), write_layout_run(tmp_path, "torch", 200, "ddp"),
                      write_layout_run(tmp_path, "jax", 300, "fsdp"), write_layout_run(tmp_path, "torch", 100, "fsdp")],
                     ignore_index=True)
    assert {json.loads(s)["parallelism"] for s in runs.settings} == {"ddp", "fsdp"}
    frame = comparison_frame(runs)
    assert sorted(frame["speedup"]) == [2.0, 3.0]  # 400/200 replicated, 300/100 sharded: never across layouts
