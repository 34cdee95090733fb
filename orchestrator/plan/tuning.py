"""The plan of `--tune K` (bench_contract.tuning declares the search spaces): the tries, then the campaign of the
winners.

A tuned request is run in two steps, both by the ordinary machinery (plan, render, submit, wait):
1. the tries: for every cell, its framework's K configurations (out of the box first), each a cell of its own at
   tuning level `try`, measured once with the cell's stopping rule (--min-iterations, --min-duration) under the
   campaign's one time limit, in a campaign of its own in the results folder's TRIES_FOLDER;
2. the campaign: every cell twice, out of the box and tuned with the configuration its framework's tries chose
   (orchestrator.run.tuning), paired JAX against PyTorch at each level, so that a comparison never sets a tuned
   side against an untuned one.
"""

from __future__ import annotations

import json
from dataclasses import replace

from bench_contract.model_registry import MODELS
from bench_contract.tuning import OUT_OF_THE_BOX, TRY, TUNED, TUNED_USE_CASES, TuningError, configurations, space
from orchestrator.errors import UsageError
from orchestrator.plan import catalog
from orchestrator.plan.matrix import Cell

# The tries' campaigns, in a hidden folder of the results folder: `collect` never merges them into the comparison
# (orchestrator.results.folders skips hidden folders); the choice they led to is recorded in the campaign's
# tuning.json.
TRIES_FOLDER = ".tuning"


def check_tuning(use_case: int, torch_modes: list[str] | None) -> None:
    """What --tune cannot run, in one sentence (the configuration's own rules: bench_contract.config)."""
    if use_case not in TUNED_USE_CASES:
        raise UsageError(f"--tune runs use cases {' and '.join(map(str, TUNED_USE_CASES))} (one process on one "
                         f"device), not use case {use_case}")
    if torch_modes:
        raise UsageError("--tune chooses PyTorch's execution from its search space (bench_contract.tuning); "
                         "--torch-modes cannot be given with it")


def knobs_of(cell: Cell):
    """The knobs of the cell's framework that exist for it (device, use case, model, learning-rate schedule)."""
    return space(cell.framework, cell.settings.device, cell.use_case, MODELS[cell.model].convolutional,
                 constant_rate=cell.settings.lr_schedule == "constant")


def as_text(configuration: dict) -> str:
    return json.dumps(configuration, sort_keys=True) if configuration else ""


def try_cells(cells: list[Cell]) -> list[tuple[Cell, Cell]]:
    """(the cell, one of its tries) for each cell and each of its framework's K configurations, in that order: the
    same K for both frameworks, drawn from the cell's seed."""
    tries = []
    for cell in cells:
        settings = cell.settings
        k = settings.tune
        try:
            drawn = configurations(knobs_of(cell), settings.device, k, settings.seed)
        except TuningError as exc:
            raise UsageError(f"{exc} ({catalog.FRAMEWORKS[cell.framework]}'s for {cell.model} in use case "
                             f"{cell.use_case} on the {settings.device}); give a smaller --tune") from None
        one = replace(settings, tuning=TRY, trials=1, paired=False, target_interval=0.0)
        tries += [(cell, replace(cell, settings=one, tuned=as_text(configuration))) for configuration in drawn]
    return tries


def campaign_cells(cells: list[Cell], chosen: dict[str, dict]) -> list[Cell]:
    """Every cell out of the box, then every cell tuned with its framework's chosen configuration (chosen: by
    cell id of the planned cell)."""
    out_of_the_box = [replace(cell, settings=replace(cell.settings, tuning=OUT_OF_THE_BOX)) for cell in cells]
    tuned = [replace(cell, settings=replace(cell.settings, tuning=TUNED), tuned=as_text(chosen[cell.cell_id]))
             for cell in cells]
    return out_of_the_box + tuned
