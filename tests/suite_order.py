"""The order in which pytest-xdist hands out the suite's files (tests/conftest.py; the Makefile turns xdist's own
order off), and the tests it leaves out unless asked."""

from __future__ import annotations

from pathlib import Path

# The integration files wait on the local cluster much of their time: run alone, three workers of them left the
# two cores idle 15% of the first 20 minutes (a fresh-clone run sampled every 0.5 s), while the backend files after
# them kept both busy. So
# the two are handed out interleaved, each in proportion to its number of files, for a worker's wait to be another's
# computing; the many short unit tests come last (they even out the workers' ends).
INTERLEAVED = ("tests/integration", "tests/backends")
LAST = "tests/unit"


def directory_of(nodeid: str) -> str:
    return "/".join(Path(nodeid.split("::")[0]).parts[:2])


def interleaved(groups: list[list[str]]) -> list[str]:
    """The groups' members merged so that each group is used up at an even pace: the next member comes from the
    group with the smallest share of it taken so far (the first such group on a tie)."""
    taken, merged = [0] * len(groups), []
    while any(taken[i] < len(group) for i, group in enumerate(groups)):
        left = [i for i, group in enumerate(groups) if taken[i] < len(group)]
        i = min(left, key=lambda i: taken[i] / len(groups[i]))
        merged.append(groups[i][taken[i]])
        taken[i] += 1
    return merged


def file_order(nodeids: list[str]) -> dict[str, int]:
    """The rank of each test file: integration and backend files interleaved, then the unit files, then others."""
    files = list(dict.fromkeys(nodeid.split("::")[0] for nodeid in nodeids))
    of = {directory: [f for f in files if directory_of(f) == directory] for directory in (*INTERLEAVED, LAST)}
    ordered = interleaved([of[d] for d in INTERLEAVED]) + of[LAST]
    placed = set(ordered)
    ordered += [f for f in files if f not in placed]
    return {f: rank for rank, f in enumerate(ordered)}


def leave_out_heavy_unless_asked(config, items: list) -> None:
    """Deselect the tests marked heavy (a full-size model, many minutes) unless the -m expression names them
    (`make test-heavy`): a plain `pytest` or `make test` does not start a quarter-hour run by surprise."""
    if "heavy" in (config.option.markexpr or ""):
        return
    heavy = [item for item in items if item.get_closest_marker("heavy")]
    if heavy:
        config.hook.pytest_deselected(items=heavy)
        items[:] = [item for item in items if item not in heavy]
