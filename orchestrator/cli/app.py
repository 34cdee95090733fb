"""The command line: plan and submit (the default command), collect, report, campaigns, status and the rest.

Each command turns its options into one call of the module that owns the work, which reports through the
callbacks it is given (results to stdout, progress and warnings to stderr). Errors from the domain arrive as
OrchestratorError and leave as one sentence on stderr with an exit code: 2 for bad input (click's usage errors
too), 1 for a failure. Users never see a traceback or a page of help for bad input.

The commands live by concern: `launch` (the default command), `campaigns`, `results` and `prepare`; `common`
holds what they share. This module builds the app from them, in the order its help lists them, and runs it
(run_app); the entry point, run(), is the package's, which catches signals before this module is imported.
"""

from __future__ import annotations

import sys

import typer
from typer._click import exceptions as click_errors  # typer 0.29 (pinned) parses with its own copy of click

from orchestrator.cli import campaigns, launch, prepare, results
from orchestrator.cli.common import PanelledHelp
from orchestrator.signals import Stopped, stop_with

app = typer.Typer(
    cls=PanelledHelp,
    context_settings={"help_option_names": ["-h", "--help"]},
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # plain text, fast; PanelledHelp draws the panels
    help="Plan, submit and collect fair JAX-vs-PyTorch benchmarks on Slurm.\n\n"
    "Run a campaign:  python main.py --benchmark digits --use-case 1\n\n"
    "Then merge the results:  python main.py collect",
)

# The default command, then the commands in the order the help lists them (the groups `data` and `baseline`
# come after every command there, wherever they are added).
app.callback(invoke_without_command=True)(launch.main)
app.command()(campaigns.campaigns)
app.command()(results.collect)
app.command("list")(prepare.list_catalog)
app.command()(prepare.validate)
app.command()(prepare.envs)
app.command()(results.report)
app.command()(prepare.doctor)
app.command()(campaigns.status)
app.command()(campaigns.resubmit)
app.command()(campaigns.watch)
app.add_typer(prepare.data_app, name="data")
app.add_typer(results.baseline_app, name="baseline")
app.command()(results.compare)


# The words for pydantic's error types, which typer 0.29 raises for an option value of the wrong type.
VALUE_KINDS = {"int_parsing": "a whole number", "int_from_float": "a whole number", "float_parsing": "a number",
               "bool_parsing": "true or false"}


def usage_sentence(exc: click_errors.UsageError) -> str:
    """Click's usage error as one sentence: a value of the wrong type is named with the option and what it takes,
    in our words rather than pydantic's; a group given no command (`data`) names its commands, where click's
    message would be the group's whole help."""
    if isinstance(exc, click_errors.NoArgsIsHelpError) and exc.ctx is not None:
        commands = exc.ctx.command.list_commands(exc.ctx)
        return f"`{exc.ctx.command_path}` needs a command: {' or '.join(commands)}"
    errors = getattr(exc.__cause__, "errors", None)
    param = getattr(exc, "param", None)
    if callable(errors) and param is not None and errors():
        first = errors()[0]
        name = next((opt for opt in param.opts if opt.startswith("--")), param.name)
        return f"{name} takes {VALUE_KINDS.get(first['type'], 'another kind of value')}, not {first['input']!r}"
    return exc.format_message().rstrip(".")


COMPLETION_OPTIONS = ("--install-completion", "--show-completion")


def refuse_completion_for_main_py(argv: list[str]) -> None:
    """A shell completes a command by its name, and `python main.py` is the command `python`: the completion Typer
    would install for it (registered for `main.py`) never fires. It is the installed `jaxtorch-bench` command's
    (make setup puts it in .venv/bin); this says so, in one sentence, instead of installing one that does nothing."""
    if argv and argv[0].endswith("main.py") and any(a.split("=")[0] in COMPLETION_OPTIONS for a in argv[1:]):
        option = next(a.split("=")[0] for a in argv[1:] if a.split("=")[0] in COMPLETION_OPTIONS)
        typer.echo(f"error: shell completion works for the installed command, not for `python main.py`: run "
                   f"`.venv/bin/jaxtorch-bench {option}` (make setup installs it; activate .venv to have it on PATH)",
                   err=True)
        sys.exit(2)


def run_app() -> None:
    """The command line, once signals stop it by an exception (orchestrator.cli.run). Click's own usage errors (an
    unknown option, a value of the wrong type, a missing value) leave as one sentence and exit 2, as the
    domain's bad input does, instead of a box of help. SIGINT, SIGTERM and SIGHUP stop a command by an
    exception, so its `finally` blocks run, and it says so in one sentence (orchestrator.signals)."""
    refuse_completion_for_main_py(sys.argv)
    try:
        code = app(standalone_mode=False)
    except Stopped as exc:
        stop_with(exc)
    except click_errors.UsageError as exc:
        where = f" (see `{exc.ctx.command_path} -h`)" if exc.ctx is not None else ""
        typer.echo(f"error: {usage_sentence(exc)}{where}", err=True)
        sys.exit(2)
    except click_errors.ClickException as exc:
        typer.echo(f"error: {exc.format_message()}", err=True)
        sys.exit(exc.exit_code)
    except typer.Abort:
        typer.echo("aborted", err=True)
        sys.exit(1)
    except Exception as exc:  # noqa: BLE001  a stop that reached the command inside another error; else raised again
        stop_with(exc)
    sys.exit(code if isinstance(code, int) else 0)
