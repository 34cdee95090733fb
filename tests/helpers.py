"""Helpers shared by the test layers: run the real CLI in a subprocess, find the framework environments."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
ENVS = {fw: REPO_ROOT / ".envs" / fw for fw in ("jax", "torch")}


def run_cli(*args: str, env: dict | None = None, timeout: float = 600, cwd: Path | None = None):
    """`python main.py ARGS` with the orchestrator's interpreter, as a user would type it."""
    return subprocess.run(
        [sys.executable, str(REPO_ROOT / "main.py"), *args],
        capture_output=True, text=True, timeout=timeout, cwd=cwd or REPO_ROOT,
        env=env if env is not None else dict(os.environ), stdin=subprocess.DEVNULL,
    )


def env_python(framework: str) -> Path:
    return ENVS[framework] / "bin" / "python"


def missing_envs() -> list[str]:
    return [fw for fw in ENVS if not env_python(fw).exists()]
