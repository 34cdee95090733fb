"""DP-SGD's cost over plain SGD (issue 36): per framework, how many times fewer samples a second the DP-SGD step
trains than the same cell's SGD step, where the results hold both (`-u 1,3`, or `-u 2,4` on several processes).

Published comparisons quote it per engine (Opacus's DP-SGD at 2.6 to 8 times lower throughput than SGD, arXiv
2406.17298), and it is what a practitioner pays for privacy in each framework, whoever is faster.
"""

from __future__ import annotations

import json

import numpy as np

from bench_contract.spec import DP_SGD_SETTINGS
from bench_contract.use_cases import USE_CASES
from orchestrator.results.compare import FRAMEWORKS, ROW_KEY

# The use case whose plain step a DP-SGD use case is costed against: one process (3 against 1), or several (4
# against 2, on the same processes, which the settings hold).
PLAIN_USE_CASE = {case.number: case.plain.number for case in USE_CASES.values() if case.plain}
# What a DP-SGD row and its SGD row share: the row key but its use case, and the settings but DP-SGD's own.
MATCH = [column for column in ROW_KEY if column not in ("use_case", "settings")]


def plain_settings(settings: str) -> str:
    """A row's settings without the ones only DP-SGD reads: equal for a DP-SGD cell and its plain SGD cell."""
    parsed = json.loads(settings) if settings else {}
    return json.dumps({name: value for name, value in parsed.items() if name not in DP_SGD_SETTINGS}, sort_keys=True)


def with_sgd_cost(frame):
    """The comparison frame with <framework>_sgd_cost on its DP-SGD rows: the SGD row's throughput over the
    DP-SGD row's, per framework (PyTorch's per DP-SGD engine: each engine is a row). NaN on the other rows, and
    where the results hold no SGD row of the same cell (device, benchmark, model, batch, precision, settings but
    DP-SGD's)."""
    for framework in FRAMEWORKS:
        frame[f"{framework}_sgd_cost"] = np.nan
    plain = frame[frame["use_case"].isin(list(PLAIN_USE_CASE.values()))]
    throughputs = {(*(row[c] for c in MATCH), row["use_case"], plain_settings(row["settings"])):
                   {fw: row[f"{fw}_throughput"] for fw in FRAMEWORKS} for _, row in plain.iterrows()}
    for index, row in frame[frame["use_case"].isin(list(PLAIN_USE_CASE))].iterrows():
        key = (*(row[c] for c in MATCH), PLAIN_USE_CASE[row["use_case"]], plain_settings(row["settings"]))
        for framework, sgd in throughputs.get(key, {}).items():
            frame.at[index, f"{framework}_sgd_cost"] = sgd / row[f"{framework}_throughput"]
    return frame
