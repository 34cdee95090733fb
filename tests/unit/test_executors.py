"""The executors: one interface, found by name, and no branch on an executor's name outside the
executors' own modules."""

import ast
from pathlib import Path

from helpers import REPO_ROOT

from orchestrator.run.executors import EXECUTORS, Executor

EXECUTORS_DIR = REPO_ROOT / "orchestrator" / "run" / "executors"


def named_in(node: ast.expr, names: set[str]) -> bool:
    """Whether an operand of a comparison is one of the names, or a tuple, list or set holding one."""
    if isinstance(node, ast.Constant):
        return node.value in names
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return any(named_in(element, names) for element in node.elts)
    return False


def name_branches(package_dir: Path, names: set[str], outside: Path) -> list[str]:
    """'path:line' of every comparison (==, !=, in, not in) with one of the names, in the package's modules that
    are not under `outside`."""
    found = []
    for path in sorted(package_dir.rglob("*.py")):
        if path.is_relative_to(outside):
            continue
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Compare) and any(named_in(n, names) for n in (node.left, *node.comparators)):
                found.append(f"{path.relative_to(package_dir.parent)}:{node.lineno}")
    return found


def test_no_module_branches_on_an_executor_name_outside_the_executors():
    assert name_branches(REPO_ROOT / "orchestrator", set(EXECUTORS), EXECUTORS_DIR) == []


def test_the_branch_check_sees_a_comparison_with_an_executor_name(tmp_path):
    """The check can fail: each way the launch flow compared names before the executors were objects is found; a
    table keyed by name (validate's own two ways) and the executors' own modules are not."""
    package = tmp_path / "pkg"
    (package / "executors").mkdir(parents=True)
    (package / "launch.py").write_text(
        'def plan(req, manifest):\n'
        '    if req.executor == "slurm":\n        pass\n'
        '    if req.executor not in ("slurm", "submitit"):\n        pass\n'
        '    if "local" != manifest["executor"]:\n        pass\n'
        '    return {"local": 1, "slurm": 2}\n')
    (package / "executors" / "local.py").write_text('def is_mine(name):\n    return name == "local"\n')
    assert name_branches(package, set(EXECUTORS), package / "executors") == [
        "pkg/launch.py:2", "pkg/launch.py:4", "pkg/launch.py:6"]


def test_every_executor_is_registered_by_its_name_and_implements_the_interface():
    assert list(EXECUTORS) == ["slurm", "submitit", "local"]  # the order --help and the refusals list them in
    for name, executor in EXECUTORS.items():
        assert isinstance(executor, Executor) and executor.name == name
        assert Path(type(executor).__module__.replace(".", "/") + ".py") == Path(
            "orchestrator/run/executors") / f"{name}.py"  # each in its own module
