"""Create each framework's own Python environment from its pinned requirements, and reuse it while they hold.

An environment records the sha256 of the requirements it was built from; when the file is unchanged,
the environment is reused as it is, so the command is cheap to run before every campaign.

A build takes minutes (PyTorch and its CUDA libraries are gigabytes), so pip's output is read as it comes
and each package it collects is a progress line: a bar over the pinned requirements, the dependencies found so
far and the time taken; then one line when pip starts installing.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from bench_contract.run.progress import duration
from orchestrator import PROJECT_ROOT
from orchestrator.errors import OrchestratorError
from orchestrator.plan import catalog
from orchestrator.plan.profile import ClusterProfile, load_profile
from orchestrator.run.progress import text_bar

STAMP = ".requirements.sha256"
ERROR_LINES = 10  # the end of a failed command's output that its error shows


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
    pip_install(env / "bin" / "python", requirements, lambda line: report(f"{framework}: {line}"))
    (env / STAMP).write_text(fingerprint(requirements) + "\n")
    report(f"{framework}: environment ready at {env}")
    return env


def _run(command: list[str]) -> None:
    proc = subprocess.run(command, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-ERROR_LINES:])
        raise OrchestratorError(f"{' '.join(command[:4])} ... failed (exit {proc.returncode}):\n{tail}")


def pip_install(python: Path, requirements: Path, report: Callable[[str], None]) -> None:
    """`pip install -r requirements` in the environment of `python`, reporting its progress as it goes."""
    command = [str(python), "-m", "pip", "install", "--progress-bar", "off", "-r", str(requirements)]
    progress = PipProgress(pinned_names(requirements), report)
    tail: deque[str] = deque(maxlen=ERROR_LINES)
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace")
    for line in proc.stdout:
        tail.append(line.rstrip())
        progress.feed(line)
    if proc.wait() != 0:
        raise OrchestratorError(f"{' '.join(command[:4])} ... failed (exit {proc.returncode}):\n" + "\n".join(tail))


def package_name(name: str) -> str:
    """A distribution's name as pip compares them (PEP 503): Scikit_Learn and scikit-learn are one."""
    return re.sub(r"[-_.]+", "-", name).lower()


def pinned_names(requirements: Path) -> set[str]:
    """The packages a requirements file names (its options, comments and blank lines aside)."""
    names = set()
    for line in requirements.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line and not line.startswith("-"):
            names.add(package_name(re.split(r"[\s\[<>=!~;@]", line, maxsplit=1)[0]))
    return names


# What pip prints as it finds each package, once per package: "Collecting torch==2.14.1" from an index,
# "Processing /wheels/numpy-2.4.6-cp311-....whl" from a file or a local mirror. Both may end in "(from ...)",
# for a dependency and for a line of the requirements file alike, so the name alone says which it is.
COLLECTED = re.compile(r"^(?:Collecting (?P<requirement>[A-Za-z0-9][A-Za-z0-9._-]*)|Processing \S*?(?P<wheel>[^/\s]+)\.whl)")
INSTALLING = "Installing collected packages: "


@dataclass
class PipProgress:
    """pip's output, line by line, as progress lines: a bar over the pinned requirements collected, the
    dependencies found besides, the time so far; then the install, which pip runs without a word."""

    pinned: set[str]
    report: Callable[[str], None]
    clock: Callable[[], float] = time.monotonic
    started: float = field(default=0.0)
    collected: set[str] = field(default_factory=set)
    dependencies: int = 0

    def __post_init__(self) -> None:
        self.started = self.clock()

    def feed(self, line: str) -> None:
        found = COLLECTED.match(line)
        if found:
            self.collect(package_name(found["requirement"] or found["wheel"].split("-")[0]))
        elif line.startswith(INSTALLING):
            count = len(line[len(INSTALLING):].split(","))
            self.report(f"pip: installing {count} packages (unpacking the wheels: pip says nothing until it is done), "
                        f"{duration(self.clock() - self.started)} so far")

    def collect(self, name: str) -> None:
        if name in self.pinned:
            self.collected.add(name)
        else:
            self.dependencies += 1
        done, total = len(self.collected), len(self.pinned)
        self.report(f"pip {text_bar(done, total)} {done}/{total} requirements, dependencies found: {self.dependencies}, "
                    f"{duration(self.clock() - self.started)}: {name}")
