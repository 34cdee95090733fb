"""The Makefile's user-facing targets set up what they run on: `make bench` from a fresh clone once stopped at its
overhead rows, "no jax environment", because it built the orchestrator's environment and not the frameworks'."""

import shutil
import subprocess

import pytest
from helpers import REPO_ROOT

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="no make on this machine")


@pytest.mark.parametrize("target, command", [("bench", "-m bench"), ("demo", "main.py --benchmark digits")])
def test_the_target_builds_the_framework_environments_before_its_command(target, command):
    # -n prints the recipes make would run, in order, and runs none (no recursive $(MAKE) line is involved here).
    lines = subprocess.run(["make", "-n", target], cwd=REPO_ROOT, capture_output=True, text=True,
                           check=True).stdout.splitlines()
    envs = next(i for i, line in enumerate(lines) if line.endswith("main.py envs"))
    assert envs < next(i for i, line in enumerate(lines) if command in line)
