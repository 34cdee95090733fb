"""Create each framework's own Python environment from its pinned requirements, and reuse it while they hold.

An environment records the sha256 of the requirements it was built from; when the file is unchanged,
the environment is reused as it is, so the command is cheap to run before every campaign.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

from orchestrator import PROJECT_ROOT
from orchestrator.errors import OrchestratorError
from orchestrator.plan import catalog
from orchestrator.plan.profile import ClusterProfile, load_profile

STAMP = ".requirements.sha256"


def requirements_file(framework: str, profile: ClusterProfile) -> Path:
    if framework == "jax":
        return PROJECT_ROOT / "jax_backend" / f"requirements-{profile.jax_recipe}.txt"
    return PROJECT_ROOT / "torch_backend" / "requirements.txt"


def fingerprint(requirements: Path) -> str:
    return hashlib.sha256(requirements.read_bytes()).hexdigest()


def is_current(env: Path, requirements: Path) -> bool:
    stamp = env / STAMP
    return stamp.is_file() and stamp.read_text().strip() == fingerprint(requirements)


def ensure_envs(frameworks: list[str], profile: Path | None, report: Callable[[str], None] = print) -> None:
    """The envs command: each framework's environment (default: every framework's) from the profile (a TOML
    path, or the built-in one); every name is checked before anything is built."""
    chosen = frameworks or list(catalog.FRAMEWORKS)
    for name in chosen:
        catalog.check_framework(name)
    loaded = load_profile(profile)
    for name in chosen:
        ensure_env(name, loaded, report=report)


def ensure_env(framework: str, profile: ClusterProfile, report: Callable[[str], None] = print) -> Path:
    env = profile.env_path(framework)
    requirements = requirements_file(framework, profile)
    if not requirements.is_file():
        raise OrchestratorError(f"requirements file {requirements} is missing")
    if is_current(env, requirements):
        report(f"{framework}: environment {env} is up to date with {requirements.name}")
        return env
    python = shutil.which(profile.python)
    if python is None:
        raise OrchestratorError(f"the profile's python {profile.python!r} is not on PATH")
    report(f"{framework}: building {env} from {requirements} (this takes a minute or more)")
    # The stamp is written last: a build that was interrupted never looks current, and is redone from scratch.
    shutil.rmtree(env, ignore_errors=True)
    _run([python, "-m", "venv", str(env)])
    _run([str(env / "bin" / "python"), "-m", "pip", "install", "--quiet", "-r", str(requirements)])
    (env / STAMP).write_text(fingerprint(requirements) + "\n")
    report(f"{framework}: environment ready at {env}")
    return env


def _run(command: list[str]) -> None:
    proc = subprocess.run(command, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-10:])
        raise OrchestratorError(f"{' '.join(command[:4])} ... failed (exit {proc.returncode}):\n{tail}")
