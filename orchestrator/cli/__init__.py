"""The command line's entry point, run(): `python main.py` and the `jaxtorch-bench` command. The app, built from the
commands, is orchestrator.cli.app.

This module imports nothing else before it has set SIGINT, SIGTERM and SIGHUP to stop a command in one sentence
(orchestrator.signals): importing typer and the commands takes a quarter of a second, more on a busy login node,
and a Ctrl-C then ended in a KeyboardInterrupt traceback.
"""

from __future__ import annotations

from orchestrator.signals import stop_on_signals, stop_with


def run() -> None:
    """Stop on signals from here on, then import the command line and run it."""
    stop_on_signals()
    try:
        from orchestrator.cli.app import run_app
    except BaseException as exc:  # noqa: BLE001  a signal while the command line was imported; anything else raises
        stop_with(exc)
    run_app()

