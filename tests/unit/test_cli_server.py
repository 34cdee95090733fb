"""tests/helpers.run_cli forks each call from a server that imported the libraries once (tests/zygote.py): each
call must still be `python main.py ARGS` in a process of its own, with its own folder, environment, streams and exit
code, or every test of the command line would test something else. The same server runs the backends' calls
(tests/helpers.run_in_env; tests/backends/test_zygote.py)."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers import MAIN_PY, REPO_ROOT, Zygote, fake_sbatch, fake_slurm_site, run_cli
from zygote import OURS


def launch(site: tuple, *extra: str, **kwargs):
    env, _, profile = site
    return run_cli("--benchmark", "digits", "--use-case", "1", "--frameworks", "jax", "--profile", str(profile),
                   *extra, **kwargs)


def test_each_call_has_its_own_folder_environment_and_exit_code(tmp_path):
    # A relative results folder lands in the call's folder; the fake sbatch on the call's PATH numbers the job.
    site = fake_slurm_site(tmp_path, {})
    (tmp_path / "here").mkdir()
    proc = launch(site, "--results-dir", "res", "--scripts-dir", "scr", env=site[0], cwd=tmp_path / "here")
    assert proc.returncode == 0, proc.stderr
    assert "4001" in proc.stdout and list((tmp_path / "here" / "res").glob("*/manifest.json"))
    bad = run_cli("--benchmark", "digits")
    assert bad.returncode == 2 and bad.stdout == ""
    assert bad.stderr.startswith("error: ") and bad.stderr.count("\n") == 1


def test_a_call_sees_its_own_environment_as_a_fresh_interpreter_would(tmp_path, monkeypatch):
    # The server imported orchestrator.run.executors before any call (tests/zygote.py), which reads
    # ORCHESTRATOR_SBATCH_SLOW_S. A server started with the variable set must not pass it to a call whose
    # environment lacks it (as a module that read it at import would), and a call whose environment has it must
    # see it.
    site = fake_slurm_site(tmp_path, {"sbatch": fake_sbatch(tmp_path / "sbatch_calls.txt", "sleep 2\n")})
    args = ["--benchmark", "digits", "--use-case", "1", "--frameworks", "jax", "--profile", str(site[2])]
    monkeypatch.setenv("ORCHESTRATOR_SBATCH_SLOW_S", "0.5")
    server = Zygote("cli", Path(sys.executable))
    try:
        untold = server.run([str(MAIN_PY), *args, "--results-dir", "r1", "--scripts-dir", "s1"], site[0], tmp_path,
                            timeout=120)
        told = server.run([str(MAIN_PY), *args, "--results-dir", "r2", "--scripts-dir", "s2"],
                          {**site[0], "ORCHESTRATOR_SBATCH_SLOW_S": "0.5"}, tmp_path, timeout=120)
    finally:
        server.close()
    assert untold.returncode == 0 and "sbatch has not answered for" not in untold.stderr, untold.stderr
    assert told.returncode == 0 and "sbatch has not answered for" in told.stderr, told.stderr


def test_a_call_past_its_timeout_is_killed_and_the_next_call_runs(tmp_path):
    site = fake_slurm_site(tmp_path, {"sbatch": "sleep 60\n"})
    started = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired):
        launch(site, "--results-dir", str(tmp_path / "r"), "--scripts-dir", str(tmp_path / "s"), env=site[0],
               timeout=3)
    assert time.monotonic() - started < 30  # killed at its timeout, not waited for to the fake sbatch's 60 s
    assert run_cli("list").returncode == 0


SHOW = "import json, sys; print(json.dumps([__name__, sys.argv, sys.path[0]]))"


@pytest.mark.parametrize("form", ["-c", "script", "-m"])
def test_a_call_gets_the_arguments_path_and_name_the_interpreter_gives(tmp_path, form):
    (tmp_path / "shown.py").write_text(SHOW + "\n")
    argv = {"-c": ["-c", SHOW, "a", "b"], "script": [str(tmp_path / "shown.py"), "a", "b"],
            "-m": ["-m", "shown", "a", "b"]}[form]
    fresh = subprocess.run([sys.executable, *argv], capture_output=True, text=True, cwd=tmp_path, check=True)
    server = Zygote("cli", Path(sys.executable))
    try:
        forked = server.run(argv, {"PATH": "/usr/bin:/bin"}, tmp_path, timeout=60)
    finally:
        server.close()
    assert forked.returncode == 0, forked.stderr
    assert json.loads(forked.stdout) == json.loads(fresh.stdout)


# What a module must not read while it is imported, when the command-line server imports it ahead of the calls:
# the environment and the working folder, which are each call's own.
CALL_STATE = {"environ", "getenv", "getcwd", "cwd"}


def read_at_import(tree: ast.Module) -> list[int]:
    """The lines of a module's import-time code (its body, class bodies, decorators, default values) that name
    CALL_STATE; the bodies of functions run only when called, and are skipped."""
    lines, pending = [], list(tree.body)
    while pending:
        node = pending.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            arguments = node.args
            pending.extend([*arguments.defaults, *(d for d in arguments.kw_defaults if d is not None)])
            pending.extend(getattr(node, "decorator_list", []))
            continue
        name = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else None
        if name in CALL_STATE:
            lines.append(node.lineno)
        if isinstance(node, ast.ImportFrom) and node.module == "os":
            lines.extend(node.lineno for alias in node.names if alias.name in CALL_STATE)
        pending.extend(ast.iter_child_nodes(node))
    return sorted(lines)


PRELOADED_FILES = """
import json, sys
sys.path.insert(0, "tests")
import zygote
zygote.preload("cli")
print(json.dumps(sorted({getattr(m, "__file__", None) or "" for m in list(sys.modules.values())})))
"""


def test_no_module_the_server_imports_ahead_reads_the_environment_at_import():
    """Every module of ours that the command-line server has loaded before its first call: those of OURS and
    what they import (bench_contract's)."""
    loaded = subprocess.run([sys.executable, "-c", PRELOADED_FILES], cwd=REPO_ROOT, capture_output=True, text=True,
                            check=True).stdout
    files = [Path(f) for f in json.loads(loaded) if f]
    # Ours: in the repository, neither in a hidden folder (.venv, .envs: the libraries) nor the tests' own.
    ours = [f for f in files if f.is_relative_to(REPO_ROOT) and f.suffix == ".py"
            and not f.relative_to(REPO_ROOT).parts[0].startswith((".", "tests"))]
    assert {path.relative_to(REPO_ROOT).parts[0] for path in ours} >= set(OURS["cli"])
    found = {f"{path.relative_to(REPO_ROOT)}:{line}" for path in ours
             for line in read_at_import(ast.parse(path.read_text()))}
    assert not found, f"read at import, where a forked call would see the server's: {sorted(found)}"


def test_the_import_time_check_finds_a_read_and_skips_a_function_body():
    module = ast.parse("import os\nLIMIT = float(os.environ.get('X', '1'))\n"
                       "def later(x=os.getcwd()):\n    return os.environ['Y']\n")
    assert read_at_import(module) == [2, 3]
