"""The layers' import rules: the orchestrator runs where neither framework is installed."""

import ast
import subprocess
import sys

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
    modules = [".".join(p.relative_to(REPO_ROOT).with_suffix("").parts) for p in (REPO_ROOT / "orchestrator").rglob("*.py")]
    code = (
        "import sys\n"
        f"for m in {modules!r}: __import__(m)\n"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('jax', 'torch', 'flax')]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO_ROOT)


# The wings of each package, lowest first: a module may import its own wing, a lower one and the package's
# root modules, never a higher wing. "cli" sits above every wing of the orchestrator: it only calls them.
WINGS = {
    "bench_contract": ["models", "data", "measure", "run"],
    "orchestrator": ["data", "plan", "run", "results", "cli"],
}


def wing_of(package: str, module: str) -> str | None:
    """The wing a dotted module name (or a file's path parts) belongs to; None for the package's root modules."""
    parts = module.split(".")
    if parts[0] != package or len(parts) < 2:
        return None
    return parts[1] if parts[1] in WINGS[package] else None


def wing_imports(package: str) -> list[tuple[str, str, str]]:
    """(importing file, its wing, imported module) for every import of another module of the package."""
    found = []
    for path in (REPO_ROOT / package).rglob("*.py"):
        own = wing_of(package, ".".join(path.relative_to(REPO_ROOT).with_suffix("").parts))
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                # `from pkg.wing import module` names the wing in the module path; `from pkg import wing` in a name
                targets = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
            else:
                continue
            found += [(str(path.relative_to(REPO_ROOT)), own, t) for t in targets if t.split(".")[0] == package]
    return found


def wing_violations(package: str, imports: list[tuple[str, str | None, str]]) -> list[str]:
    order = WINGS[package]
    rank = {wing: i for i, wing in enumerate(order)}
    bad = []
    for path, own, target in imports:
        theirs = wing_of(package, target)
        if theirs is None:
            continue
        if own is None or rank[theirs] > rank[own]:
            bad.append(f"{path} ({own or 'root'}) imports {target} ({theirs})")
    return bad


@pytest.mark.parametrize("package", sorted(WINGS))
def test_wings_import_only_their_own_or_lower_wings(package):
    assert wing_violations(package, wing_imports(package)) == []


def test_every_module_sits_in_a_wing_or_the_root_on_purpose():
    """A new folder is a new wing: it must be placed in the order above before it can hold code."""
    for package, order in WINGS.items():
        folders = {p.parent.name for p in (REPO_ROOT / package).rglob("*.py") if p.parent != REPO_ROOT / package}
        assert folders <= set(order), f"{package} has folders outside its wing order: {folders - set(order)}"


def test_the_wing_check_sees_an_upward_import():
    """The check can fail: a measurement module importing the run wing, or a root module importing any wing."""
    upward = [("bench_contract/measure/timing.py", "measure", "bench_contract.run.runner"),
              ("bench_contract/spec.py", None, "bench_contract.models.vision"),
              ("orchestrator/plan/render.py", "plan", "orchestrator.run"),
              ("orchestrator/run/status.py", "run", "orchestrator.results.collect")]
    assert len(wing_violations("bench_contract", upward[:2])) == 2
    assert len(wing_violations("orchestrator", upward[2:])) == 2
    downward = [("bench_contract/run/runner.py", "run", "bench_contract.measure.timing"),
                ("orchestrator/results/collect.py", "results", "orchestrator.run.status")]
    assert wing_violations("bench_contract", downward[:1]) == wing_violations("orchestrator", downward[1:]) == []


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
