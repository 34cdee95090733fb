"""A server that runs `python ARGV` for the tests without starting an interpreter each time.

Of the 66.5 CPU-minutes a test run spent in Python processes, 14 went to about 700 calls of the command line, most
of each call importing the same libraries (dp-accounting's import alone took 0.96 to 1.4 s under `python -X
importtime` here); a backend run's floor is its framework's import (4.4 of a PyTorch digits cell's 5.6 s of CPU,
1.7 of JAX's 4.3 s). This process imports those libraries once, then forks one child per call: the child has its
own process, arguments, environment, working folder, standard streams and exit code, as `python ARGV` would. The
libraries of the command line read no variable the tests set (numpy's BLAS reads its thread count at import: the
server's, the same as the tests'); the frameworks do (JAX's configuration, PyTorch's and OpenMP's settings), so
tests/helpers.py keeps a framework server for each environment as the framework reads it. The command-line server
also imports the orchestrator package ahead (about 0.2 s of each call's CPU; measured in
docs/records/2026-11-29-cli-server-imports-orchestrator.md), which reads the environment only when called, never at
import (orchestrator/run/waiting_times.py; tests/unit/test_cli_server.py parses every module of ours the server has
loaded). The backends' modules are imported by each call.

Started as `python tests/zygote.py KIND` with KIND's interpreter (tests/helpers.py): `cli` with the orchestrator's,
`jax` or `torch` with that framework's. ARGV is `SCRIPT ARGS`, `-m MODULE ARGS` or `-c CODE ARGS`. Protocol, one
JSON object a line: a request {"argv", "env", "cwd", "stdout", "stderr"} (the last two: files the child writes its
streams to) on stdin; on stdout {"pid": P} once the child has started, then {"returncode": R} once it has ended (R
is -N for a child ended by signal N, as subprocess reports). End of input ends the server.
"""

from __future__ import annotations

import json
import os
import sys

# What each kind of call imports that costs the most: third-party libraries only.
PRELOADED = {
    "cli": ("numpy", "pandas", "pyarrow", "pyarrow.parquet", "scipy.stats", "dp_accounting", "dp_accounting.pld",
            "dp_accounting.rdp", "jinja2", "typer", "pydantic"),
    "jax": ("numpy", "pyarrow", "pyarrow.parquet", "jax", "jax.numpy", "flax.linen", "optax", "pynvml"),
    # torch._dynamo: every optimizer's first call imports it (torch._disable_dynamo), 2.4 s here.
    "torch": ("numpy", "pyarrow", "pyarrow.parquet", "torch", "torch._dynamo", "torch.distributed.fsdp",
              "torch.utils.flop_counter", "torchvision", "opacus", "pynvml"),
}


# Our packages imported ahead, every module of them: those that read no environment variable at import.
OURS = {"cli": ("orchestrator",), "jax": (), "torch": ()}


def preload(kind: str) -> None:
    import importlib

    for name in PRELOADED[kind]:
        try:
            importlib.import_module(name)
        except ImportError:  # a library this environment lacks: a call that needs it fails as it would afresh
            pass
    for name in our_modules(kind):
        importlib.import_module(name)


def our_modules(kind: str) -> list[str]:
    """Every module of the packages OURS names for this kind of call."""
    import importlib
    import pkgutil

    names = []
    for package in OURS[kind]:
        found = pkgutil.walk_packages(importlib.import_module(package).__path__, prefix=f"{package}.")
        names.extend([package, *(module.name for module in found)])
    return names


def run_call(request: dict) -> None:
    """In the forked child: become `python ARGV` in the request's folder, environment and streams, and exit as that
    process would (its exit code; at-exit handlers and non-daemon threads finished first)."""
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    redirect(0, os.devnull, os.O_RDONLY)
    redirect(1, request["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    redirect(2, request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    sys.stdin = open(0, closefd=False)
    sys.stdout = open(1, "w", encoding="utf-8", closefd=False)
    sys.stderr = open(2, "w", encoding="utf-8", errors="backslashreplace", buffering=1, closefd=False)
    code = 0
    try:
        run_argv(request["argv"])
    except SystemExit as exc:
        code = exit_code(exc.code)
    except BaseException:  # noqa: BLE001 - an uncaught exception: Python prints it and exits 1
        import traceback

        traceback.print_exc()
        code = 1
    finish(code)


def run_argv(argv: list[str]) -> None:
    """What the interpreter does with `python ARGV`: sys.argv and sys.path[0] set as it sets them, then the script
    or the module run as __main__."""
    import runpy

    if argv[0] == "-m":
        sys.argv = ["-m", *argv[2:]]  # runpy puts the module's file in sys.argv[0]
        sys.path[0] = os.getcwd()
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
    elif argv[0] == "-c":
        import types

        sys.argv = ["-c", *argv[2:]]
        sys.path[0] = ""
        main = sys.modules["__main__"] = types.ModuleType("__main__")
        exec(compile(argv[1], "<string>", "exec"), main.__dict__)
    else:
        sys.argv = list(argv)
        sys.path[0] = os.path.dirname(os.path.abspath(argv[0]))
        runpy.run_path(argv[0], run_name="__main__")


def exit_code(code) -> int:
    """SystemExit's code as the process's exit status, as the interpreter turns it: None is 0, a message is 1."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def finish(code: int) -> None:
    import atexit
    import threading

    threading._shutdown()  # what the interpreter does at exit: wait for non-daemon threads
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


def redirect(fd: int, path: str, flags: int) -> None:
    opened = os.open(path, flags, 0o644)
    os.dup2(opened, fd)
    os.close(opened)


def reply(message: dict) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def serve(kind: str) -> None:
    """Serve calls until input ends."""
    preload(kind)
    reply({"ready": True})
    for line in sys.stdin:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            try:
                run_call(request)
            finally:  # run_call exits; this is for a request it could not even start (a missing folder)
                os._exit(1)
        reply({"pid": pid})
        _, status = os.waitpid(pid, 0)
        reply({"returncode": os.waitstatus_to_exitcode(status)})


if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] not in PRELOADED:
        sys.exit(f"usage: python tests/zygote.py {{{'|'.join(PRELOADED)}}}")
    serve(sys.argv[1])
