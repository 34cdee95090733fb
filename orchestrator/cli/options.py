"""The command line bound to the cell's configuration: one Typer option per setting of bench_contract.config, made
from its declaration (option, aliases, help, panel, choices for completion, default in the help), and the values
typed turned back into settings.

An option's parameter defaults to None, "not given", so that the plan can tell a setting the user chose from one left
at its default: the default of a setting the plan derives (the benchmark's epochs, Poisson sampling for DP-SGD)
applies only where it was not given, and an option that a use case does not read is refused only when given.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from typing import Annotated, Any

import typer

from bench_contract.config import (
    DATA,
    FIELD_TYPES,
    MATRIX,
    MEASUREMENT,
    PRIVACY,
    ON_COMMAND_LINE,
    SETTINGS,
    SLURM,
    TRAINING,
    CellConfig,
    option_of,
)
from orchestrator.cli.common import completes

# Where a command's jobs go, replacing the profile's values (plan.profile.OPTION_KEYS): declared once, for the
# commands that submit (the launch) and the one that checks what a job would get (doctor --on-node).
Partition = Annotated[str | None, typer.Option(
    help="Slurm partition (default: the profile's partition, else the cluster's default).",
    show_default=False, rich_help_panel=SLURM)]
Account = Annotated[str | None, typer.Option(
    help="Slurm account to charge (default: the profile's).", show_default=False, rich_help_panel=SLURM)]
Qos = Annotated[str | None, typer.Option(
    help="Slurm QOS (default: the profile's, else the account's default).", show_default=False, rich_help_panel=SLURM)]
GpusPerTask = Annotated[int | None, typer.Option(
    help="GPUs per task, rendered as --gres=gpu:N (default: the profile's); GPUs need a profile with a CUDA "
         "jax_recipe.", show_default=False, rich_help_panel=SLURM)]
Systems = Annotated[list[str] | None, typer.Option(
    "--systems", help="The profile's systems (kinds of nodes), e.g. a100,h100: a launch runs the matrix once on each, "
                      "one array per framework each; doctor checks each (default: the profile's default_system).",
    rich_help_panel=SLURM)]

PANELS = (MATRIX, TRAINING, PRIVACY, DATA, SLURM, MEASUREMENT)  # the help's order
DEFAULTS = {f.name: f.default for f in dataclasses.fields(CellConfig)}
TYPES = {"int": int, "float": float, "str": str}


def is_flag(name: str) -> bool:
    declaration = SETTINGS[name]
    return declaration.flag_value is not None or isinstance(DEFAULTS[name], bool)


def derived(name: str) -> bool:
    """Whether the plan derives the setting's default (the benchmark's epochs), or the option takes text the
    setting parses (a memory size): its parameter's default is then None, "not given"."""
    declaration = SETTINGS[name]
    return bool(declaration.shown_default) or declaration.parse is not None or DEFAULTS[name] is None


def option_type(name: str) -> Any:
    """The type Typer parses the option's text as: text where the setting parses its own (a memory size)."""
    if is_flag(name):
        return bool
    if SETTINGS[name].parse is not None:
        return str | None
    kind = TYPES[FIELD_TYPES[name].split("|")[0].strip()]
    return kind | None if derived(name) else kind


def parameter(name: str) -> inspect.Parameter:
    """The keyword parameter of one setting, its Typer option from the declaration."""
    declaration = SETTINGS[name]
    help_text = declaration.help + (f" (default: {declaration.shown_default})" if declaration.shown_default else "")
    option = typer.Option(option_of(name), *declaration.aliases, help=help_text, rich_help_panel=declaration.panel,
                          show_default=not derived(name) and not is_flag(name),
                          autocompletion=completes([c for c in declaration.choices if c]) if declaration.choices
                          else None)
    default = False if is_flag(name) else None if derived(name) else DEFAULTS[name]
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default,
                             annotation=Annotated[option_type(name), option])


def with_setting_options(command: Callable) -> Callable:
    """`command` with a keyword parameter per setting on the command line besides its own, every parameter in the
    order of its help panel (PANELS), so that the help reads as before: the matrix first, then training, ..."""
    own = [p for p in inspect.signature(command, eval_str=True).parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
    generated = [parameter(name) for name in ON_COMMAND_LINE]
    rank = {panel: i for i, panel in enumerate(PANELS)}

    def panel_of(param: inspect.Parameter) -> int:
        metadata = getattr(param.annotation, "__metadata__", ())
        panel = next((getattr(m, "rich_help_panel", None) for m in metadata), None)
        return rank.get(panel, len(PANELS))

    head = [p for p in own if p.kind is not inspect.Parameter.KEYWORD_ONLY or p.name == "ctx"]
    options = sorted([p for p in own if p not in head] + generated, key=panel_of)  # stable: declaration order kept
    command.__signature__ = inspect.Signature([*head, *options])
    command.__annotations__ = {p.name: p.annotation for p in command.__signature__.parameters.values()}
    return command


def given_settings(ctx: typer.Context, options: dict[str, Any]) -> dict[str, Any]:
    """The settings the user gave on the command line, by name, as the configuration holds them: a flag's value,
    a parsed text (a memory size), else the typed value. A setting left at its option's default is not here."""
    from typer._click.core import ParameterSource  # typer 0.29 (pinned) parses with its own copy of click

    given = {}
    for name in ON_COMMAND_LINE:
        if ctx.get_parameter_source(name) in (None, ParameterSource.DEFAULT) or options.get(name) is None:
            continue
        declaration, value = SETTINGS[name], options[name]
        if declaration.flag_value is not None:
            if not value:
                continue
            value = declaration.flag_value
        elif declaration.parse is not None:
            value = declaration.parse(value)
        given[name] = value
    return given


def command_line_sources(ctx: typer.Context, options: dict[str, Any]) -> set[str]:
    """The parameters among `options` that the user typed (not left at their defaults)."""
    from typer._click.core import ParameterSource

    return {name for name in options if ctx.get_parameter_source(name) not in (None, ParameterSource.DEFAULT)}
