"""`python -m bench [--repeats N] [--only SUITE,...] [--quick]`: measure the suites of SUITES (all by default), print
one table. Exit 1 when a suite crashed or could not measure what it should have (a row marked failed), else 0."""

from __future__ import annotations

import argparse
import os
import platform
import sys
import traceback

from bench import (collecting, harness_overhead, packing, planning, soak, startup, submission, suite_budget,
                   vectorization)
from bench.timing import Result
from bench_contract.measure.device import cpu_model

SUITES = {"startup": startup, "planning": planning, "submission": submission, "collecting": collecting,
          "overhead": harness_overhead, "vectorization": vectorization, "suite": suite_budget, "soak": soak,
          "packing": packing}


def machine() -> str:
    model = cpu_model()  # the same reading the result rows carry
    load = ", load average %.1f %.1f %.1f" % os.getloadavg() if hasattr(os, "getloadavg") else ""
    return f"{os.cpu_count()} CPUs (nproc {len(os.sched_getaffinity(0))}), {model}, Python {platform.python_version()}{load}"


def run_suite(name: str, repeats: int, quick: bool) -> list[Result]:
    """The suite's rows; a suite that raises gives one failed row with its error (the traceback on stderr), so
    that the others still run and the table still prints."""
    try:
        return SUITES[name].measure(repeats, quick=quick)
    except Exception as error:  # noqa: BLE001  any crash of a suite is reported as its row, and fails the run
        traceback.print_exc()
        return [Result(f"{name} suite", "crashed", "", f"{type(error).__name__}: {error}"[:500], failed=True)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--repeats", type=int, default=5, help="runs per measurement; the table shows medians")
    parser.add_argument("--only", default=",".join(SUITES), help="comma-separated: " + ", ".join(SUITES))
    parser.add_argument("--quick", action="store_true",
                        help="each suite at its smallest sizes, to check that it runs; its targets do not apply")
    args = parser.parse_args(argv)
    chosen = [name.strip() for name in args.only.split(",") if name.strip()]
    unknown = [name for name in chosen if name not in SUITES]
    if unknown or args.repeats < 1:
        parser.error(f"unknown suite {', '.join(unknown)}" if unknown else "--repeats must be at least 1")
    print(f"machine: {machine()}", flush=True)
    results = []
    for name in chosen:
        print(f"running {name} ...", file=sys.stderr, flush=True)
        results += run_suite(name, args.repeats, args.quick)
    from orchestrator.tables import format_table

    size = "a quick run at the smallest sizes, whose figures no target applies to; " if args.quick else ""
    print(f"{size}medians of {args.repeats} runs (the one-sbatch-per-cell row: one run)")
    print(format_table(["step", "measured", "target", "verdict", "note"],
                       [[r.step, r.measured, r.target, r.verdict, r.note] for r in results]))
    failed = [r.step for r in results if r.failed]
    if failed:
        print(f"{len(failed)} row(s) failed: {'; '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
