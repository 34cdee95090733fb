"""What the commands share: the help's layout in panels, shell completion from a registry, one sentence for a
domain error, warnings on stderr, the command line as typed, and the campaign and results-folder parameters."""

from __future__ import annotations

import shlex
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer
from typer.core import TyperGroup

from bench_contract.config import ConfigError
from orchestrator.errors import OrchestratorError, is_disk_full, oserror_reason
from orchestrator.suggest import Invocation, invoked


class PanelledHelp(TyperGroup):
    """Plain-text help with the options grouped under their panel's title. Typer draws panels only with rich, whose
    boxes cost `--help` 0.2 s (a third of a second in all, against the 0.3 s of bench/startup.py) and read badly
    in a log or a pipe."""

    def format_options(self, ctx, formatter) -> None:
        panels: dict[str, list[tuple[str, str]]] = {}
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is not None:
                panels.setdefault(getattr(param, "rich_help_panel", None) or "Options", []).append(record)
        for title, records in panels.items():
            with formatter.section(title):
                formatter.write_dl(records)
        self.format_commands(ctx, formatter)


def completes(names):
    """Shell completion of an option from a registry's names (the check of the value stays the registry's)."""
    return lambda incomplete: [name for name in names if name.startswith(incomplete)]


def completes_executors(incomplete: str) -> list[str]:
    """Shell completion of --executor from the executors' registry, read when a shell asks: the executors import
    what submitting needs, which `--help` does not."""
    from orchestrator.run.executors import EXECUTORS

    return completes(EXECUTORS)(incomplete)


@contextmanager
def domain_errors() -> Iterator[None]:
    """An OrchestratorError leaves as one sentence on stderr and its exit code, never as a traceback; so does a
    full disk that a command did not say in its own words (where each command that writes says what it kept).
    Inside, the commands that messages suggest carry this command line's --profile and --results-dir."""
    try:
        with invoked(invocation()):
            yield
    except OrchestratorError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(code=exc.exit_code) from None
    except ConfigError as exc:  # a setting the configuration refuses (bench_contract.config): bad input
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(code=2) from None
    except OSError as exc:
        if not is_disk_full(exc):
            raise
        typer.echo(f"error: {oserror_reason(exc)}; free some space and run the command again", err=True)
        raise typer.Exit(code=1) from None


def invocation() -> Invocation:
    """The running command's name and its --profile and --results-dir, from click's context (every command runs
    inside domain_errors, so no command has to pass them on); collect's first --results-dir is its home folder."""
    from typer._click.globals import get_current_context  # typer 0.29 (pinned) parses with its own copy of click

    ctx = get_current_context(silent=True)
    if ctx is None:
        return Invocation()
    names, level = [], ctx
    while level.parent is not None:  # the root's name is the program's; a command's is below it, a group's above
        names.insert(0, level.info_name or "")
        level = level.parent
    params = ctx.params
    folder = params.get("results_dir")
    if isinstance(folder, list):
        folder = folder[0] if folder else None
    return Invocation(" ".join(names), params.get("profile"), folder)


def warn(line: str) -> None:
    """Progress and warnings go to stderr; results to stdout."""
    typer.echo(line, err=True)


def command_line() -> str:
    """The command as typed (`python main.py ...` or `jaxtorch-bench ...`), recorded with what it planned."""
    program = ["python", "main.py"] if sys.argv[0].endswith("main.py") else [Path(sys.argv[0]).name]
    return shlex.join([*program, *sys.argv[1:]])


CampaignArg = Annotated[str | None, typer.Argument(help="Campaign id or folder, as --campaign.", show_default=False)]
CampaignOption = Annotated[str | None, typer.Option("--campaign", "-c", help="Campaign id or folder (default: the newest that is not a dry run; see `campaigns`).")]
ResultsDirOption = Annotated[Path, typer.Option(help="Folder holding the campaigns.")]
