"""Create each framework's own Python environment from its lock file, and reuse it while the lock holds.

Environments are built with uv from the checked-in lock (orchestrator.run.locks): every package, transitive ones
included, at a pinned version whose hashes are checked, so two sites get the same environment. A lock that no
longer matches its requirements is refused before anything is built. An environment records the sha256 of the
lock it was built from; while the lock is unchanged it is reused as it is, so the command is cheap to run before
every campaign.

A site environment ([envs.<framework>] in the profile) is an interpreter the site already has: nothing is built,
it is checked to import its framework and what the contract needs.
"""

from __future__ import annotations

import hashlib
import shlex
import shutil
import subprocess
import sys
from collections import deque
from collections.abc import Callable
from pathlib import Path

from orchestrator import PROJECT_ROOT, suggest
from orchestrator.errors import OrchestratorError, UsageError
from orchestrator.plan import catalog
from orchestrator.plan.discovery import profile_for
from orchestrator.plan.profile import ClusterProfile
from orchestrator.plan.render import check_container_reference, is_image_file, launcher_words
from orchestrator.run import locks, queue

STAMP = ".lock.sha256"
ERROR_LINES = 10  # the end of a failed command's output that its error shows
# What a framework's jobs import: the framework's own packages, then what bench_contract needs in both
# (numpy, pyarrow, pynvml from nvidia-ml-py, scikit-learn for digits, PIL for image folders).
FRAMEWORK_IMPORTS = {"jax": ("jax", "flax", "optax"), "torch": ("torch", "torchvision")}
CONTRACT_IMPORTS = ("numpy", "pyarrow", "pynvml", "sklearn", "PIL")


def lock_for(framework: str, profile: ClusterProfile) -> locks.Lock:
    return locks.JAX[profile.jax_recipe] if framework == "jax" else locks.TORCH


# How an environment is built, beside its lock: 2 compiles every module to bytecode at build time. A site whose
# environments are read-only on the compute nodes, or that sets PYTHONDONTWRITEBYTECODE (as our CI machines do),
# otherwise compiles torch, torchvision and torch._dynamo from source in every process: 7.7 s of CPU for
# `import torch, torchvision` here, against 3.2 s with bytecode (and 1.2 against 0.7 s for jax, flax and optax).
# An environment built by another recipe is not current, and is built again.
RECIPE = 2


def fingerprint(lock: Path) -> str:
    return f"{hashlib.sha256(lock.read_bytes()).hexdigest()} recipe {RECIPE}"


def is_current(env: Path, lock: Path) -> bool:
    stamp = env / STAMP
    return stamp.is_file() and stamp.read_text().strip() == fingerprint(lock)


def built_from(env: Path) -> locks.Lock | None:
    """The lock an environment was built from, by the fingerprint its stamp records; None without a stamp, or for
    a lock of none of today's recipes (an older version of one)."""
    stamp = env / STAMP
    if not stamp.is_file():
        return None
    recorded = stamp.read_text().strip()
    return next((lock for lock in locks.EVERY_LOCK if fingerprint(lock.lock) == recorded), None)


def build_mismatch(framework: str, profile: ClusterProfile) -> str | None:
    """Why the framework's built environment is not the one this plan's jobs would run, with the command that
    builds it; None when it is, or when the folder was not built by `envs` (no stamp: a folder made by hand)."""
    env, wanted = profile.env_path(framework), lock_for(framework, profile)
    if not (env / STAMP).is_file() or is_current(env, wanted.lock):
        return None
    found = built_from(env)
    source = f"from {found.lock.name}" if found else "from an earlier version of its lock file"
    why = f" (the profile's jax_recipe is {profile.jax_recipe})" if framework == "jax" else ""
    return (f"the {framework} environment {env} was built {source}, not from {wanted.lock.name}, which this plan's "
            f"jobs need{why}; build it with: {suggest.command('envs', '--framework', framework)}")


def ensure_envs(frameworks: list[str], profile: Path | None, report: Callable[[str], None] = print) -> None:
    """The envs command: each framework's environment (default: every framework's) from the profile (a TOML
    path, or the built-in one); every name is checked before anything is built."""
    chosen = frameworks or list(catalog.FRAMEWORKS)
    for name in chosen:
        catalog.check_framework(name)
    loaded, discovered = profile_for(profile)  # without a profile, the build Slurm's GPUs call for (plan.discovery)
    if discovered:
        report(f"cluster: {discovered}")
    for name in chosen:
        ensure_env(name, loaded, report=report)


def ensure_env(framework: str, profile: ClusterProfile, report: Callable[[str], None] = print) -> Path:
    site = profile.site_environment(framework)
    if site:
        check_site_environment(framework, profile)
        where = f"container {site.container} ({site.runtime})" if site.container else f"site environment {site.python}"
        report(f"{framework}: {where} imports {', '.join(required_imports(framework))} (not built, not locked)")
        return profile.env_path(framework)
    env = profile.env_path(framework)
    lock = lock_for(framework, profile)
    lock.check()
    if is_current(env, lock.lock):
        report(f"{framework}: environment {env} is up to date with {lock.lock.name}")
        return env
    python = shutil.which(profile.python)
    if python is None:
        raise OrchestratorError(f"the profile's python {profile.python!r} is not on PATH")
    uv = uv_binary()
    report(f"{framework}: building {env} from {lock.lock} with uv")
    # The stamp is written last: a build that was interrupted never looks current, and is redone from scratch.
    shutil.rmtree(env, ignore_errors=True)
    run_uv([uv, "venv", "--quiet", "--python", python, str(env)], lambda line: report(f"{framework}: {line}"))
    run_uv([uv, "pip", "sync", "--require-hashes", "--compile-bytecode", "--python", str(env / "bin" / "python"),
            str(lock.lock)],
           lambda line: report(f"{framework}: {line}"))
    (env / STAMP).write_text(fingerprint(lock.lock) + "\n")
    report(f"{framework}: environment ready at {env}")
    return env


def uv_binary() -> str:
    """uv is a pinned package of the orchestrator's environment, beside its python; else the one on PATH."""
    beside = Path(sys.executable).parent / "uv"
    found = str(beside) if beside.is_file() else shutil.which("uv")
    if found is None:
        raise OrchestratorError("uv is not installed: it comes with the orchestrator's environment (make setup), "
                                "or install it with: python3 -m pip install uv")
    return found


# uv's lines per package ("+ numpy==2.4.6", "- old==1") are many; its summary lines say the progress.
PACKAGE_LINE = (" + ", " - ", " ~ ")


def run_uv(command: list[str], report: Callable[[str], None]) -> None:
    """Run uv. On a terminal, uv draws its own progress bars there (downloads and installs: a cold build of the
    CUDA environments downloads gigabytes for minutes); elsewhere (a log, CI, a pipe) its summary lines are
    reported as they come (resolved, prepared in 12s, installed in 0.3s). A failed uv ends in one error."""
    terminal = sys.stderr if sys.stderr.isatty() else None
    if terminal is not None:
        run_uv_on_terminal(command, terminal)
        return
    tail: deque[str] = deque(maxlen=ERROR_LINES)
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace")
    for line in proc.stdout:
        tail.append(line.rstrip())
        if line.strip() and not line.startswith(PACKAGE_LINE):
            report(f"uv: {line.strip()}")
    if proc.wait() != 0:
        raise OrchestratorError(f"{' '.join(command[:3])} ... failed (exit {proc.returncode}):\n" + "\n".join(tail))


def run_uv_on_terminal(command: list[str], terminal) -> None:
    """uv with the terminal as its stderr, where it draws its progress bars and prints its own error."""
    terminal.flush()
    returncode = subprocess.run(command, stderr=terminal, stdin=subprocess.DEVNULL, check=False).returncode
    if returncode != 0:
        raise OrchestratorError(f"{' '.join(command[:3])} ... failed (exit {returncode}): uv's output above says why")


def required_imports(framework: str) -> tuple[str, ...]:
    return FRAMEWORK_IMPORTS[framework] + CONTRACT_IMPORTS


def interpreter_command(framework: str, profile: ClusterProfile, arguments: list[str]) -> list[str]:
    """The command that runs the framework's interpreter with `arguments`: directly, or for a site environment
    after its setup lines (module load ...) in one bash, as its jobs run it."""
    site = profile.site_environment(framework)
    # A container's interpreter runs inside its image, through its runtime, as the jobs run it.
    command = [*launcher_words(site, [PROJECT_ROOT], 1), str(profile.python_path(framework)), *arguments]
    return after_setup_lines(site_setup_lines(framework, profile), command)


def site_setup_lines(framework: str, profile: ClusterProfile) -> list[str]:
    """The shell lines a site environment's jobs run before its interpreter: the profile's, then the table's."""
    site = profile.site_environment(framework)
    return [*profile.setup_lines, *site.setup_lines] if site else []


def after_setup_lines(setup: list[str], command: list[str]) -> list[str]:
    """`command` run after the setup lines (module load ...), in one bash as the jobs run them."""
    return ["bash", "-c", "\n".join([*setup, 'exec "$0" "$@"']), *command] if setup else command


def check_site_environment(framework: str, profile: ClusterProfile) -> None:
    """A site interpreter must exist and import the framework and what the contract needs; one sentence if not."""
    python = profile.python_path(framework)
    site = profile.envs[framework]
    if site.container:
        check_container(framework, site)
    else:
        check_site_interpreter(framework, profile)
    missing = missing_imports(interpreter_command(framework, profile, ["-c", import_probe(framework)]))
    if missing:
        if site.container:
            raise OrchestratorError(f"{framework}: the container {site.container} cannot import {missing}: use an "
                                    f"image that has it ([envs.{framework}] container)")
        raise OrchestratorError(f"{framework}: the site environment's python {python} cannot import {missing}: "
                                f"install it there or point [envs.{framework}] python at another interpreter")


def check_runnable(framework: str, profile: ClusterProfile) -> None:
    """What running a framework's job here needs, checked before anything is written: a container's runtime and
    image (its interpreter is inside the image), or the interpreter of a built or site environment."""
    site = profile.site_environment(framework)
    if site is not None and site.container:
        check_container(framework, site)
        return
    if site is not None:  # a conda env or /usr/bin/python3 has no activate script, and needs none
        check_site_interpreter(framework, profile)
        return
    python = profile.python_path(framework)
    if not python.is_file():
        raise UsageError(f"the {framework} environment is missing ({python} does not exist); create it with: "
                         f"{suggest.command('envs')}")
    mismatch = build_mismatch(framework, profile)
    if mismatch:
        raise UsageError(mismatch)


def check_site_interpreter(framework: str, profile: ClusterProfile) -> None:
    """A site environment's interpreter must exist, as its jobs find it: after its setup lines (a module load may be
    what puts it there), which run here only where the path alone is not found. One sentence if it is missing."""
    python = profile.python_path(framework)
    setup = site_setup_lines(framework, profile)
    look_again = after_setup_lines(setup, ["test", "-f", str(python)])
    if python.is_file() or (setup and queue.answered(look_again[0], look_again[1:], timeout_s=120)):
        return
    after = ", even after its setup lines" if setup else ""
    raise UsageError(f"the {framework} environment is missing ({python} does not exist{after}); correct "
                     f"[envs.{framework}] python in the profile")


def check_container(framework: str, site) -> None:
    """The image must be one the runtime can use as the jobs would (render.check_container_reference), the runtime
    must be on PATH, and an image given as a file must exist: one sentence each, before anything runs."""
    check_container_reference(framework, site)
    command = "apptainer" if site.runtime == "apptainer" else "srun"
    if shutil.which(command) is None:
        raise UsageError(f"{framework}: the container runtime {site.runtime} needs `{command}`, which is not on "
                                f"PATH (profile table 'envs.{framework}')")
    if is_image_file(site.container) and not Path(site.container).expanduser().is_file():
        raise UsageError(f"{framework}: the container image {site.container} does not exist (profile table "
                                f"'envs.{framework}')")


def import_probe(framework: str) -> str:
    """Python that imports every required module and prints the first that fails (with why), or nothing."""
    return ("import importlib\n"
            f"for m in {required_imports(framework)!r}:\n"
            "    try:\n        importlib.import_module(m)\n"
            "    except Exception as e:\n        print(f'{m} ({type(e).__name__}: {e})'.splitlines()[0]); break\n")


def missing_imports(command: list[str]) -> str:
    """The first module the probe found missing; the interpreter's own failure when it did not run."""
    try:
        proc = subprocess.run(command, check=False, capture_output=True, text=True, timeout=300, cwd=PROJECT_ROOT,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"anything ({shlex.join(command[:3])} did not run: {exc})"
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return f"anything ({shlex.join(command[:3])} failed: {last})"
    return proc.stdout.strip()
