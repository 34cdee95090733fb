"""A server that runs `python main.py ARGS` for the tests without starting an interpreter each time (issue 28).

Of the 66.5 CPU-minutes a test run spent in Python processes, 14 went to about 700 calls of the command line, most
of each call importing the same libraries (dp-accounting's import alone took 0.96 to 1.4 s under `python -X
importtime` here). This process imports those libraries once, then forks one child per call: the child has its own
process, arguments, environment, working folder, standard streams and exit code, as `python main.py` would, and
imports the orchestrator itself, so that every module of ours reads the environment of its call (some read it at
import). Only third-party libraries are loaded ahead, none of which reads a variable the tests set (numpy's BLAS
reads its thread count at import: the server's, the same as the tests').

Started as `python tests/cli_zygote.py PATH/main.py` (tests/helpers.run_cli). Protocol, one JSON object a
line: a request {"args", "env", "cwd", "stdout", "stderr"} (the last two: files the child writes its streams to) on
stdin; on stdout {"pid": P} once the child has started, then {"returncode": R} once it has ended (R is -N for a
child ended by signal N, as subprocess reports). End of input ends the server.
"""

from __future__ import annotations

import json
import os
import sys

# What the command line imports that costs the most and depends on no environment variable of ours.
PRELOADED = ("numpy", "pandas", "pyarrow", "pyarrow.parquet", "scipy.stats", "dp_accounting", "dp_accounting.pld",
             "dp_accounting.rdp", "jinja2", "typer", "pydantic")



def preload() -> None:
    import importlib

    for name in PRELOADED:
        try:
            importlib.import_module(name)
        except ImportError:  # a library the command line does not need in this environment: it imports its own
            pass


def run_call(main: str, request: dict) -> None:
    """In the forked child: become `python main.py ARGS` in the request's folder, environment and streams, and
    exit as that process would (its exit code; at-exit handlers and non-daemon threads finished first)."""
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    redirect(0, os.devnull, os.O_RDONLY)
    redirect(1, request["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    redirect(2, request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    sys.stdin = open(0, closefd=False)
    sys.stdout = open(1, "w", encoding="utf-8", closefd=False)
    sys.stderr = open(2, "w", encoding="utf-8", errors="backslashreplace", buffering=1, closefd=False)
    sys.argv = [main, *request["args"]]
    sys.path[0] = os.path.dirname(main)  # as for `python main.py`: the script's folder first
    code = 0
    try:
        from orchestrator.cli import run

        run()
    except SystemExit as exc:
        code = exit_code(exc.code)
    except BaseException:  # noqa: BLE001 - an uncaught exception: Python prints it and exits 1
        import traceback

        traceback.print_exc()
        code = 1
    finish(code)


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


def serve(main: str) -> None:
    """Serve calls of the script `main` (the repository's main.py, which the client names) until input ends."""
    preload()
    reply({"ready": True})
    for line in sys.stdin:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            try:
                run_call(main, request)
            finally:  # run_call exits; this is for a request it could not even start (a missing folder)
                os._exit(1)
        reply({"pid": pid})
        _, status = os.waitpid(pid, 0)
        reply({"returncode": os.waitstatus_to_exitcode(status)})


if __name__ == "__main__":
    serve(os.path.abspath(sys.argv[1]))
