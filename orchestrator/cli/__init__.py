"""The command line's entry point, run(): `python main.py` and the `jaxtorch-bench` command. The app, built from the
commands, is orchestrator.cli.app.

This module imports nothing else before it has set SIGINT, SIGTERM and SIGHUP to stop a command in one sentence
(orchestrator.signals): importing typer and the commands takes a quarter of a second, more on a busy login node,
and a Ctrl-C then ended in a KeyboardInterrupt traceback.
"""

from __future__ import annotations

import sys

from orchestrator.signals import Stopped, stop_on_signals


def run() -> None:
    """Stop on signals from here on, then import the command line and run it."""
    stop_on_signals()
    try:
        from orchestrator.cli.app import run_app
    except Stopped as exc:  # a signal while the command line was imported
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(exc.exit_code)
    run_app()
