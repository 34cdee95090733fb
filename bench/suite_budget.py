"""The test suite's budget: `make test` from a fresh clone, setup included, within its minutes on this project's
2-core machines: 30 on the Intel Xeon ones, 45 on the AMD EPYC ones, whose cores took 1.5 times as long on the same
suite (CI stops a run at 90 minutes, and every stop proves itself with one).

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

BUDGET_MIN = {"AMD": 45.0, "Intel": 30.0}  # by the CPU's vendor, as its model name starts
DEFAULT_BUDGET_MIN = min(BUDGET_MIN.values())  # any other CPU: the tighter one


def budget_min(cpu: str) -> float:
    """The minutes `make test` may take on a machine with this CPU model."""
    return next((minutes for vendor, minutes in BUDGET_MIN.items() if cpu.startswith(vendor)), DEFAULT_BUDGET_MIN)

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
    if not RECORD.is_file():
        target = f"<= {budget_min(cpu_model()):g} min"
        return [Result(step, "not measured", target, "no `make test` on record here: run it, then `make bench`")]
    entry = json.loads(RECORD.read_text())
    minutes, budget = float(entry["minutes"]), budget_min(entry["cpu"])  # the machine that ran it
    outcome = "passed" if entry["exit_code"] == 0 else f"failed (exit {entry['exit_code']})"
    return [Result(step, f"{minutes:.1f} min", f"<= {budget:g} min", at_most(minutes, budget),
                   f"the last run, {entry['finished_at']} on {entry['cpu']}: {outcome}")]


def recorded_line(entry: dict) -> str:
    """What `make test` prints of its record at its end."""
    return (f"make test: {entry['minutes']:.1f} min, setup included (budget {budget_min(entry['cpu']):g} min on "
            f"{entry['cpu']}; `make bench` checks it)")


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[1] != "record":
        sys.exit("usage: python -m bench.suite_budget record STARTED_EPOCH_SECONDS EXIT_CODE")
    print(recorded_line(record(float(sys.argv[2]), int(sys.argv[3]))))
