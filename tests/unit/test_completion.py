"""Shell completion: a shell completes a command by its name, so completion is the installed
`jaxtorch-bench` command's; `python main.py --install-completion` says so instead of installing a completion for
`main.py` that never fires."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import run_cli


@pytest.mark.parametrize("option", ["--install-completion", "--show-completion=bash"])
def test_python_main_py_points_to_the_installed_command_and_installs_nothing(tmp_path, option):
    proc = run_cli(option, env={**os.environ, "HOME": str(tmp_path), "SHELL": "/bin/bash"})
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip() == (f"error: shell completion works for the installed command, not for `python "
                                   f"main.py`: run `.venv/bin/jaxtorch-bench {option.split('=')[0]}` (make setup "
                                   "installs it; activate .venv to have it on PATH)")
    assert list(tmp_path.iterdir()) == []  # no ~/.bashrc line, no completion file


def test_the_installed_command_completes_under_its_own_name():
    command = Path(sys.executable).parent / "jaxtorch-bench"
    # The script --install-completion writes, asked for by the variable a shell's completion sets (not through
    # --show-completion, which names the shell it detects from its parent process: "sh" on CI, not supported).
    source = {**os.environ, "_JAXTORCH_BENCH_COMPLETE": "source_bash"}
    shown = subprocess.run([str(command)], capture_output=True, text=True, timeout=60, env=source)
    assert shown.returncode == 0, shown.stderr
    assert "_JAXTORCH_BENCH_COMPLETE=complete_bash" in shown.stdout and "jaxtorch-bench" in shown.stdout
    # And it completes: the names of the benchmarks after --benchmark.
    env = {**os.environ, "_JAXTORCH_BENCH_COMPLETE": "complete_bash", "COMP_WORDS": "jaxtorch-bench --benchmark ",
           "COMP_CWORD": "2"}
    completed = subprocess.run([str(command)], capture_output=True, text=True, timeout=60, env=env)
    assert {"digits", "cifar10", "imagenet"} <= set(completed.stdout.split())
