"""`make mutation`: how many mutants of the comparability core the unit tests kill, per module.

mutmut (pinned in the Makefile) copies the modules `[tool.mutmut] only_mutate` names in pyproject.toml into
`mutants/`, makes small changes to them one at a time (an operator, a constant, a string, a call's argument),
and runs the unit tests that reach the changed function on each. A mutant is killed when a test fails on it; a
test suite that lets one survive does not notice that change of the code. This script runs mutmut, reads the
status of every mutant from mutmut's `.meta` files, prints one line per module and the survivors, and exits 1
when a module's share killed is below KILLED_TARGET.

A mutant that makes the tests run past mutmut's time limit (a loop that no longer ends) counts as killed, as
mutation testers count it: the suite noticed. One with no test reaching it counts as survived.

    python scripts/mutation.py           run mutmut (it resumes where an earlier run stopped), then report
    python scripts/mutation.py --report  report on the mutants of the last run only
    python scripts/mutation.py orchestrator/results/verdict.py ...
                                         run and report these modules only (of only_mutate; every mutant of
                                         theirs is run again, as mutmut does for mutants it is named)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tomllib
from collections import Counter
from pathlib import Path

from mutmut.stats import status_by_exit_code  # mutmut's status of a mutant's test run, by its exit code

ROOT = Path(__file__).resolve().parents[1]
KILLED_TARGET = 0.85  # issue 29: at least 85% of each module's mutants killed
DETECTED = {"killed", "timeout", "caught by type check", "segfault"}


def mutated_modules() -> list[str]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mutmut"]["only_mutate"]


def mutant_names(module: str) -> str:
    """mutmut's pattern for every mutant of `module` (orchestrator/results/verdict.py: orchestrator.results.verdict.*)."""
    return module.removesuffix(".py").replace("/", ".") + ".*"


def statuses(module: str) -> dict[str, str]:
    """Every mutant of `module` and its status, from mutmut's meta file of the last run."""
    meta = ROOT / "mutants" / f"{module}.meta"
    if not meta.exists():
        raise SystemExit(f"error: no mutation results for {module} ({meta} is missing): run `make mutation`")
    codes = json.loads(meta.read_text())["exit_code_by_key"]
    return {name: status_by_exit_code[code] for name, code in codes.items()}


def report(modules: list[str]) -> bool:
    """One line per module: its mutants by status and the share detected; then the survivors by name."""
    below, survivors = [], []
    print(f"{'module':45} {'mutants':>7} {'killed':>7} {'share':>6}  other")
    for module in modules:
        status = statuses(module)
        counts = Counter(status.values())
        detected = sum(counts[s] for s in DETECTED)
        share = detected / len(status) if status else 1.0
        other = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()) if s != "killed")
        print(f"{module:45} {len(status):7d} {detected:7d} {share:6.1%}  {other}")
        if share < KILLED_TARGET:
            below.append(module)
        survivors += [name for name, s in status.items() if s not in DETECTED]
    if survivors:
        print("\nnot killed (`mutmut show NAME` prints the change):")
        print("\n".join(f"  {name}" for name in sorted(survivors)))
    if below:
        print(f"\nbelow the target of {KILLED_TARGET:.0%} killed: {', '.join(below)}")
    return not below


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--report", action="store_true", help="report on the last run without running mutmut")
    parser.add_argument("modules", nargs="*", help="only these of pyproject.toml's only_mutate (default: all)")
    args = parser.parse_args()
    unknown = [m for m in args.modules if m not in mutated_modules()]
    if unknown:
        print(f"error: {', '.join(unknown)} is not among pyproject.toml's [tool.mutmut] only_mutate "
              f"({', '.join(mutated_modules())})", file=sys.stderr)
        return 2
    if not args.report:
        names = [mutant_names(m) for m in args.modules]
        # This environment does not install the project: the tests' child processes that import it find it,
        # mutated, in mutmut's copy. The folder is made first: a path that does not exist when Python starts is
        # cached as holding nothing, and mutmut's own process runs the tests of its stats with it (`rm -rf
        # mutants`, then a run: "No module named 'bench_contract'").
        (ROOT / "mutants").mkdir(exist_ok=True)
        env = {**os.environ, "PYTHONPATH": str(ROOT / "mutants")}
        run = subprocess.run([sys.executable, "-m", "mutmut", "run", *names], cwd=ROOT, env=env)
        if run.returncode != 0:
            print(f"error: mutmut run failed (exit {run.returncode})", file=sys.stderr)
            return 1
    return 0 if report(args.modules or mutated_modules()) else 1


if __name__ == "__main__":
    sys.exit(main())
