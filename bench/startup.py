"""CLI startup: `main.py --help` and `main.py list`, each a fresh interpreter as a user types it."""

from __future__ import annotations

from bench.timing import Result, at_most, cli, median_time, seconds

HELP_TARGET_S = 0.3


def measure(repeats: int, quick: bool = False) -> list[Result]:
    cli("--help")  # the first run fills the OS file cache and writes .pyc files; users run warm
    help_s = median_time(lambda: cli("--help"), repeats)
    list_s = median_time(lambda: cli("list"), repeats)
    return [
        Result("`main.py --help`", seconds(help_s), f"<= {HELP_TARGET_S} s", at_most(help_s, HELP_TARGET_S)),
        Result("`main.py list`", seconds(list_s), "(none)", "",
               "typer coerces every option of the default command through pydantic, also for `list`"),
    ]
