"""The command line's entry point, run(): `python main.py` and the `jaxtorch-bench` command. The app, built from the
commands, is orchestrator.cli.app.

This module imports nothing else before it has set SIGINT, SIGTERM and SIGHUP to stop a command in one sentence
(orchestrator.signals): importing typer and the commands takes a quarter of a second, more on a busy login node,
and a Ctrl-C then ended in a KeyboardInterrupt traceback.

The command line is the one place where our own modules are imported inside functions: each command imports the
modules that do its work when it runs. What builds the command line (its options, the catalog, the settings'
parsers) is imported at the top of the command modules: 22 modules of ours. The work's modules are most of the
other hundred, with numpy and pyarrow: imported at the start, they made `--help` three times as slow here (0.51 s
against 0.17 s, the fastest of 25 runs each; bench/startup.py holds it to 0.3 s). Everywhere else, our own
modules are imported at the top.
"""

from __future__ import annotations

from orchestrator.signals import stop_on_signals, stop_with


def run() -> None:
    """Stop on signals from here on, then import the command line and run it."""
    stop_on_signals()
    try:
        from orchestrator.cli.app import run_app  # after the signals are caught: see above
    except BaseException as exc:  # noqa: BLE001  a signal while the command line was imported; anything else raises
        stop_with(exc)
    run_app()

