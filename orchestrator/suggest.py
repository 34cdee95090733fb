"""The commands a message suggests, written so that they work as printed (issue 32).

A fix that drops the user's --profile or --results-dir acts on another profile or folder and sends the user
round a loop: `envs` without the profile built the CPU recipe, and the same "JAX environment is missing" came
back. So the command line's --profile and --results-dir are recorded once, where every command starts its work
(orchestrator.cli.common.domain_errors: `invoked`), and each suggested command carries those it takes.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path

from orchestrator import DEFAULT_RESULTS_DIR

PROGRAM = "python main.py"  # as the README and every message spell it

# The commands that take each option (tests/unit/test_suggested_commands.py checks these against the app's
# own options); "" is the default command, which plans and submits.
TAKES_PROFILE = frozenset({"", "validate", "envs", "doctor", "data fetch"})
TAKES_RESULTS_DIR = frozenset({"", "validate", "campaigns", "collect", "report", "status", "resubmit", "watch",
                               "baseline save", "compare"})


@dataclass(frozen=True)
class Invocation:
    """What the running command was given: its name ("" for the default command), --profile, --results-dir."""

    command: str = ""
    profile: Path | None = None
    results_dir: Path | None = None


INVOKED: ContextVar[Invocation] = ContextVar("invoked", default=Invocation())


@contextmanager
def invoked(invocation: Invocation) -> Iterator[None]:
    """Suggestions made inside carry this invocation's --profile and --results-dir."""
    token = INVOKED.set(invocation)
    try:
        yield
    finally:
        INVOKED.reset(token)


def command(name: str | None = None, *args: str, results_dir: Path | None = None) -> str:
    """`python main.py NAME ARGS` (NAME None: the command running now, e.g. again with another option), with the
    running command's --profile where NAME takes one, and --results-dir where NAME takes one and the folder
    (`results_dir` where the message is about a given folder, else the command line's) is not the default."""
    now = INVOKED.get()
    name = now.command if name is None else name
    words = [PROGRAM, *name.split(), *(shlex.quote(arg) for arg in args)]
    if now.profile is not None and name in TAKES_PROFILE:
        words += ["--profile", shown(now.profile)]
    folder = results_dir if results_dir is not None else now.results_dir
    if folder is not None and name in TAKES_RESULTS_DIR and not same_folder(folder, DEFAULT_RESULTS_DIR):
        words += ["--results-dir", shown(folder)]
    return " ".join(words)


def same_folder(a: Path, b: Path) -> bool:
    return os.path.realpath(a) == os.path.realpath(b)


def shown(path: Path) -> str:
    """A path as a user would type it in a command: relative to the current folder when it lies inside it,
    quoted for the shell, so that a command printed with it works when pasted where it was run."""
    absolute = os.path.abspath(path)
    here = os.getcwd()
    inside = absolute == here or absolute.startswith(here.rstrip(os.sep) + os.sep)
    return shlex.quote(os.path.relpath(absolute, here) if inside else absolute)
