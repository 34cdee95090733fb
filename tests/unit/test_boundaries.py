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
    """A new folder is a new wing: it must be placed in the order above before it can hold code. A folder inside a
    wing (orchestrator/run/executors/) belongs to that wing."""
    for package, order in WINGS.items():
        root = REPO_ROOT / package
        folders = {p.relative_to(root).parts[0] for p in root.rglob("*.py") if p.parent != root}
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


# Circles and long modules. Each check is a function of a package's folder, so that the tests below can run it on
# a small package written into tmp_path with the defect it names, as well as on the real packages.
#
# The graph has one node per module (a package's __init__ is the package's own name) and an edge for every import
# of another module of the same package written in the file, at module level or inside a function: a
# function-local import still makes one module need the other, and moving an import into a function hides a
# circle from Python's import machinery without breaking it (bench_contract.data's readers and datasets were such
# a circle). The packages a dotted import passes through are not edges of their own (`import a.b.c` is an edge
# to a.b.c only): a package's __init__ runs first, but an __init__ that imports nothing adds no circle.

def module_name(package_dir: Path, path: Path) -> str:
    parts = path.relative_to(package_dir.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(package_dir: Path) -> dict[str, set[str]]:
    """module -> the modules of the same package it imports (dotted names, resolved to a module file)."""
    files = {module_name(package_dir, path): path for path in sorted(package_dir.rglob("*.py"))}
    package = package_dir.name

    def resolve(name: str) -> str | None:
        """The module `name` names, or the closest module above it (`pkg.mod.function` -> `pkg.mod`)."""
        parts = name.split(".")
        while parts and ".".join(parts) not in files:
            parts.pop()
        return ".".join(parts) if parts else None

    graph = {}
    for module, path in files.items():
        is_package = path.name == "__init__.py"
        targets = set()
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative: from the module's own package, one level up per extra dot
                    anchor = module.split(".")[: len(module.split(".")) - node.level + is_package]
                    base = ".".join(anchor + ([base] if base else []))
                # `from pkg.wing import module` imports the submodule; `from pkg.module import name` the module
                names = [f"{base}.{alias.name}" for alias in node.names]
            else:
                continue
            targets.update(resolve(n) for n in names if n.split(".")[0] == package)
        graph[module] = targets - {None, module}
    return graph


def circular_components(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (each module reaches every other through
    imports), each sorted, found with Tarjan's depth-first search."""
    index, low, stack, on_stack, components = {}, {}, [], set(), []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for succ in sorted(graph.get(node, ())):
            if succ not in index:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(components)


def circle_through(graph: dict[str, set[str]], component: list[str]) -> list[str]:
    """A shortest circle from the component's first module back to itself, inside the component: [a, b, ..., a]."""
    start, component = min(component), set(component)
    paths, frontier = {start: [start]}, [start]
    while frontier:
        following = []
        for node in frontier:
            for succ in sorted(graph[node] & component):
                if succ == start:
                    return paths[node] + [start]
                if succ not in paths:
                    paths[succ] = paths[node] + [succ]
                    following.append(succ)
        frontier = following
    raise AssertionError(f"{sorted(component)} is not strongly connected")


def import_circles(package_dir: Path) -> list[str]:
    """One line per circle of the package: one circle through it, then every module that is part of it."""
    graph = import_graph(package_dir)
    return [f"{' -> '.join(circle_through(graph, c))} (in the circle: {', '.join(c)})"
            for c in circular_components(graph)]


@pytest.mark.parametrize("package", ["orchestrator", "bench_contract"])
def test_no_import_circle_among_a_packages_modules(package):
    circles = import_circles(REPO_ROOT / package)
    assert not circles, f"import circles in {package}:\n" + "\n".join(circles)


def write_package(root: Path, modules: dict[str, str]) -> Path:
    """A package `pkg` under root with the given modules ('sub/mod.py' -> source); every folder gets an __init__."""
    package = root / "pkg"
    for relative, source in {"__init__.py": "", **modules}.items():
        path = package / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        for folder in [p for p in path.parents if p.is_relative_to(package)]:
            (folder / "__init__.py").touch()
        path.write_text(source)
    return package


def test_the_circle_check_sees_a_circle_through_a_function_local_import(tmp_path):
    """bench_contract.data's circle as it was: datasets imports the readers inside its functions, the readers
    import datasets. Plus a circle of four (one edge a relative import) and modules off every circle: each circle
    is found and named, and the package-level check fails with them in its message."""
    package = write_package(tmp_path, {
        "data/datasets.py": "import numpy\n\ndef load():\n    from pkg.data.text import load_text\n"
                            "    from pkg.data import graph, images\n",
        "data/text.py": "import re\nfrom pkg.data.datasets import Dataset\n",
        "data/graph.py": "from pkg.data.datasets import SPLIT_SEED\n",
        "data/images.py": "from pkg.data.datasets import DataError\nfrom pkg import spec\n",
        "spec.py": "import json\n",
        "run/a.py": "from . import b\n", "run/b.py": "import pkg.run.c\n", "run/c.py": "from pkg.run.d import x\n",
        "run/d.py": "def f():\n    from pkg.run import a\n",
        "run/runner.py": "from pkg.data import datasets, graph\nimport pkg.spec\nfrom pkg.run import a\n",
    })
    graph = import_graph(package)
    assert graph["pkg.data.datasets"] == {"pkg.data.text", "pkg.data.graph", "pkg.data.images"}
    assert graph["pkg.data.images"] == {"pkg.data.datasets", "pkg.spec"}
    assert graph["pkg.run.a"] == {"pkg.run.b"} and graph["pkg.run.d"] == {"pkg.run.a"}
    assert graph["pkg.run.runner"] == {"pkg.data.datasets", "pkg.data.graph", "pkg.spec", "pkg.run.a"}
    assert circular_components(graph) == [
        ["pkg.data.datasets", "pkg.data.graph", "pkg.data.images", "pkg.data.text"],
        ["pkg.run.a", "pkg.run.b", "pkg.run.c", "pkg.run.d"]]
    assert import_circles(package) == [
        "pkg.data.datasets -> pkg.data.graph -> pkg.data.datasets "
        "(in the circle: pkg.data.datasets, pkg.data.graph, pkg.data.images, pkg.data.text)",
        "pkg.run.a -> pkg.run.b -> pkg.run.c -> pkg.run.d -> pkg.run.a "
        "(in the circle: pkg.run.a, pkg.run.b, pkg.run.c, pkg.run.d)"]
    # Broken as bench_contract.data's was, the dispatcher in a module of its own; and d's import dropped.
    (package / "data/datasets.py").write_text("import numpy\n")
    (package / "data/loading.py").write_text("from pkg.data import datasets, graph, images, text\n")
    (package / "run/d.py").write_text("x = 1\n")
    assert import_circles(package) == []


def test_the_circle_check_sees_two_modules_importing_each_other_and_a_package_init(tmp_path):
    package = write_package(tmp_path, {
        "__init__.py": "from pkg.a import A\n",
        "a.py": "from pkg import VERSION\nA = 1\n",
        "b.py": "import pkg.c\n",
        "c.py": "def f():\n    import pkg.b.thing\n",
    })
    assert circular_components(import_graph(package)) == [["pkg", "pkg.a"], ["pkg.b", "pkg.c"]]
    assert [line.split(" (")[0] for line in import_circles(package)] == ["pkg -> pkg.a -> pkg", "pkg.b -> pkg.c -> pkg.b"]
