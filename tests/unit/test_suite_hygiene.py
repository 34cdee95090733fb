"""The test suite itself: its files say what they test, never which issue asked for it, and each helper and
fixture is defined once, in tests/helpers.py or a conftest.py when more than one file needs it. Read from the
files alone, in this process."""

import ast
import re
from collections import defaultdict
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]

# An issue named by its number: "issue" or "Issues" and the number (with or without "#"), "#" and the number in
# parentheses, or "#" and two digits or more. An HTML entity ("&#" and digits) is not one.
ISSUE = re.compile(r"[Ii]ssues? ?#?[0-9]+|\(#[0-9]+\)|(?<![&\w])#[0-9]{2,}\b")

# Each of these runs as a program of its own, in a framework's interpreter (tests/backends/*_probe.py and the
# reference they import): its functions are its own, and `main` is every program's entry point.
PROGRAMS = re.compile(r"_probe\.py$|^per_sample_reference\.py$")

# Names that every file may define, each for a reason the file cannot choose:
# - test_*: the tests themselves; pytest collects each file's on their own, and a name says what the test shows.
# - pytest_*: hooks; pytest calls each conftest.py's by this name, for the folder it sits in.
DEFINED_IN_EVERY_FILE = re.compile(r"^(test_|pytest_)")


def python_files() -> list[Path]:
    return sorted(path for path in TESTS.rglob("*.py") if "__pycache__" not in path.parts)


def test_no_test_file_names_an_issue():
    named = [f"{path.relative_to(TESTS)}:{number}: {line.strip()}"
             for path in python_files()
             for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
             if ISSUE.search(line)]
    assert not named, ("say what is tested, not the issue that asked for it (CONTRIBUTING.md, Adding a test):\n"
                       + "\n".join(named))


def test_no_test_file_is_named_for_an_issue_or_a_round():
    named = [str(path.relative_to(TESTS)) for path in python_files()
             if re.search(r"issue|round_?[0-9]|_r[0-9]+\b", path.name)]
    assert not named, f"name these for the module or behaviour they test: {named}"


def definitions(path: Path) -> list[str]:
    """The module-level functions of a file, fixtures included."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    return [node.name for node in tree.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))]


def test_each_helper_and_fixture_is_defined_once():
    where = defaultdict(list)
    for path in python_files():
        if PROGRAMS.search(path.name):
            continue
        for name in definitions(path):
            if not DEFINED_IN_EVERY_FILE.match(name):
                where[name].append(str(path.relative_to(TESTS)))
    twice = {name: paths for name, paths in sorted(where.items()) if len(paths) > 1}
    assert not twice, ("one definition for each helper and fixture: move one that several files need to "
                       "tests/helpers.py (or a conftest.py), and name one that differs for what it does:\n"
                       + "\n".join(f"{name}: {', '.join(paths)}" for name, paths in twice.items()))
