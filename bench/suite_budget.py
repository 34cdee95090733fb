"""The test suite's budget: `make test` from a fresh clone, setup included, within SUITE_BUDGET_MIN on this
project's 2-core machine (CI stops a run at 90 minutes, and every stop proves itself with one).

`make test` records its own wall time and exit code when it ends (`python -m bench.suite_budget record START RC`);
`make bench` reads the newest record instead of running the suite again, and says when it grew past the budget.
"""

from __future__ import annotations

import json
import sys
import time
from datetime import datetime, timezone

from bench.timing import REPO_ROOT, Result, at_most
from bench_contract.measure.device import cpu_model

SUITE_BUDGET_MIN = 30.0
RECORD = REPO_ROOT / "results" / "test-suite-time.json"


def record(started_epoch_s: float, exit_code: int) -> dict:
    """Write the record of the `make test` that started at started_epoch_s and ended now with exit_code."""
    entry = {"minutes": round((time.time() - started_epoch_s) / 60, 2), "exit_code": exit_code,
             "finished_at": datetime.now(timezone.utc).isoformat(timespec="seconds"), "cpu": cpu_model()}
    RECORD.parent.mkdir(parents=True, exist_ok=True)
    RECORD.write_text(json.dumps(entry, indent=1) + "\n")
    return entry


def measure(repeats: int, quick: bool = False) -> list[Result]:
    step = "`make test`, setup included"
    target = f"<= {SUITE_BUDGET_MIN:g} min"
    if not RECORD.is_file():
        return [Result(step, "not measured", target, "no `make test` on record here: run it, then `make bench`")]
    entry = json.loads(RECORD.read_text())
    minutes = float(entry["minutes"])
    outcome = "passed" if entry["exit_code"] == 0 else f"failed (exit {entry['exit_code']})"
    return [Result(step, f"{minutes:.1f} min", target, at_most(minutes, SUITE_BUDGET_MIN),
                   f"the last run, {entry['finished_at']} on {entry['cpu']}: {outcome}")]


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[1] != "record":
        sys.exit("usage: python -m bench.suite_budget record STARTED_EPOCH_SECONDS EXIT_CODE")
    written = record(float(sys.argv[2]), int(sys.argv[3]))
    print(f"make test: {written['minutes']:.1f} min, setup included (budget {SUITE_BUDGET_MIN:g} min; "
          f"`make bench` checks it)")
