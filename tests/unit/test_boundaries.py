"""The layers' import rules: the orchestrator runs where neither framework is installed."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import REPO_ROOT


def imported_modules(package: str) -> set[str]:
    names = set()
    for path in (REPO_ROOT / package).rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize("package, forbidden", [
    ("orchestrator", {"jax", "jaxlib", "flax", "optax", "torch", "torchvision", "jax_backend", "torch_backend"}),
    ("bench_contract", {"jax", "torch", "typer", "jinja2", "orchestrator", "jax_backend", "torch_backend", "submitit"}),
    ("jax_backend", {"torch", "torchvision", "torch_backend", "orchestrator", "typer", "main"}),
    ("torch_backend", {"jax", "flax", "optax", "jax_backend", "orchestrator", "typer", "main"}),
])
def test_layers_import_only_what_they_may(package, forbidden):
    assert not imported_modules(package) & forbidden


def test_every_orchestrator_module_imports_without_any_framework(tmp_path):
    modules = [f"orchestrator.{p.stem}" for p in (REPO_ROOT / "orchestrator").glob("*.py") if p.stem != "__init__"]
    code = (
        "import sys\n"
        f"for m in {modules!r}: __import__(m)\n"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('jax', 'torch', 'flax')]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO_ROOT)


def test_main_stays_a_few_lines():
    lines = [l for l in (REPO_ROOT / "main.py").read_text().splitlines() if l.strip()]
    assert len(lines) <= 6


HEAVY_AT_STARTUP = ("pandas", "pyarrow", "jinja2", "submitit", "numpy")


@pytest.mark.parametrize("argv", [["--help"], ["list"], ["collect", "--help"], ["--benchmark", "digits", "--help"]])
def test_the_cli_starts_without_heavy_modules(argv):
    """Help and `list` run on busy login nodes: only the commands that need pandas, pyarrow, jinja2,
    submitit or numpy import them."""
    code = (
        "import sys\n"
        f"sys.argv = ['main.py', *{argv!r}]\n"
        "from orchestrator.cli import run\n"
        "try:\n    run()\nexcept SystemExit as exc:\n    assert exc.code in (0, None), exc.code\n"
        f"heavy = sorted({{m.split('.')[0] for m in sys.modules}} & set({HEAVY_AT_STARTUP!r}))\n"
        "assert not heavy, heavy\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_the_heavy_module_check_sees_an_import():
    """The check above can fail: a command that needs pyarrow does load it."""
    code = (
        "import sys, tempfile\n"
        "sys.argv = ['main.py', 'collect', '--results-dir', tempfile.mkdtemp()]\n"
        "from orchestrator.cli import run\n"
        "try:\n    run()\nexcept SystemExit:\n    pass\n"
        "assert 'pyarrow' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, check=True, capture_output=True)
