"""`python -m bench [--repeats N] [--only SUITE,...]`: measure the suites of SUITES (all by default), print one table."""

from __future__ import annotations

import argparse
import os
import platform
import sys

from bench import collecting, harness_overhead, planning, soak, startup, submission, suite_budget, vectorization
from bench_contract.measure.device import cpu_model

SUITES = {"startup": startup, "planning": planning, "submission": submission, "collecting": collecting,
          "overhead": harness_overhead, "vectorization": vectorization, "suite": suite_budget, "soak": soak}


def machine() -> str:
    model = cpu_model()  # the same reading the result rows carry
    load = ", load average %.1f %.1f %.1f" % os.getloadavg() if hasattr(os, "getloadavg") else ""
    return f"{os.cpu_count()} CPUs (nproc {len(os.sched_getaffinity(0))}), {model}, Python {platform.python_version()}{load}"


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--repeats", type=int, default=5, help="runs per measurement; the table shows medians")
    parser.add_argument("--only", default=",".join(SUITES), help="comma-separated: " + ", ".join(SUITES))
    args = parser.parse_args()
    chosen = [name.strip() for name in args.only.split(",") if name.strip()]
    unknown = [name for name in chosen if name not in SUITES]
    if unknown or args.repeats < 1:
        parser.error(f"unknown suite {', '.join(unknown)}" if unknown else "--repeats must be at least 1")
    print(f"machine: {machine()}", flush=True)
    results = []
    for name in chosen:
        print(f"running {name} ...", file=sys.stderr, flush=True)
        results += SUITES[name].measure(args.repeats)
    from orchestrator.tables import format_table

    print(f"medians of {args.repeats} runs (the one-sbatch-per-cell row: one run)")
    print(format_table(["step", "measured", "target", "verdict", "note"],
                       [[r.step, r.measured, r.target, r.verdict, r.note] for r in results]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
