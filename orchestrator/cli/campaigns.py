"""The commands about one campaign or all of them: campaigns, status, watch and resubmit."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from orchestrator import DEFAULT_RESULTS_DIR
from orchestrator.cli.common import (
    CampaignArg,
    CampaignOption,
    ResultsDirOption,
    completes_executors,
    domain_errors,
    warn,
)
from orchestrator.errors import UsageError


def chosen_campaign(results_dir: Path, argument: str | None, option: str | None) -> Path:
    """The campaign folder that status, watch and resubmit act on: the one named (as an argument or with
    --campaign), else the newest that is not a dry run; where there is none, the error names the results folders
    nearby that hold submitted campaigns, each with this command for it."""
    from orchestrator.plan.campaign_folders import campaign_folder, newest_campaign
    from orchestrator.results.folders import NONE_NEARBY, elsewhere

    if argument and option and argument != option:
        raise UsageError(f"two campaigns named, {argument!r} and --campaign {option!r}; give one")
    name = option or argument
    if name:
        return campaign_folder(results_dir, name)
    try:
        return newest_campaign(results_dir)
    except UsageError as exc:  # none submitted here: say where there are some (issue 32: no loops)
        raise UsageError(f"{exc}{elsewhere(results_dir) or NONE_NEARBY}") from None


def campaigns(
    results_dir: ResultsDirOption = DEFAULT_RESULTS_DIR,
    dry_runs: Annotated[bool, typer.Option("--dry-runs", help="List the dry runs too.")] = False,
) -> None:
    """Every campaign of the results folder, oldest first: benchmark, use case, cells, submitted or not, where its
    cells stand, when it was planned. Dry runs are left out unless --dry-runs; * marks the default campaign."""
    from orchestrator.results.campaigns import list_campaigns

    with domain_errors():
        list_campaigns(results_dir, dry_runs, report=typer.echo)


def status(
    campaign: CampaignArg = None,
    campaign_option: CampaignOption = None,
    results_dir: ResultsDirOption = DEFAULT_RESULTS_DIR,
    log_lines: Annotated[int, typer.Option(help="Lines of the end of each failed task's log to show.")] = 20,
    every_task: Annotated[bool, typer.Option("--all", help="One line per run (each trial of each cell), not one per run of a cell's trials in the same state.")] = False,
) -> None:
    """The state of every cell of a campaign: pending, running, completed, failed, timed out, cancelled, no result,
    or unknown (squeue or sacct failed), then the count of each.

    With --trials, the trials of a cell in the same state share a line (trial 0-4, task 70_[0-4]); with several
    systems, a system column says where each runs. A cell that ended without a readable result is named with its
    reason (Slurm's state, the task's failure row, a bad result file) and the end of its log. Exit 3 when some
    cells are unknown: the queue could not be read, so nothing may be concluded (nor resubmitted) from them."""
    from orchestrator.run.status import show_status

    with domain_errors():
        show_status(results_dir, chosen_campaign(results_dir, campaign, campaign_option), log_lines,
                    report=typer.echo, every_task=every_task)


def resubmit(
    campaign: CampaignArg = None,
    campaign_option: CampaignOption = None,
    results_dir: ResultsDirOption = DEFAULT_RESULTS_DIR,
    executor: Annotated[str | None, typer.Option(help="slurm, submitit or local (default: the campaign's).", autocompletion=completes_executors)] = None,
    rerun_completed: Annotated[bool, typer.Option("--rerun-completed", "--force", help="Also run the cells that have a result again; each new result replaces the old one.")] = False,
    wait: Annotated[bool, typer.Option("--wait", help="Wait until the submitted jobs have finished.")] = False,
) -> None:
    """Submit again only the cells of a campaign that have no result (failed, timed out, cancelled, no result),
    one array per framework with only their indices. Cells still queued or running are left alone; a bad
    result file is moved aside first; nothing is submitted while the queue cannot be read."""
    from orchestrator.run.executors import executor as named_executor
    from orchestrator.run.resubmit import resubmit_and_report

    with domain_errors():
        if executor is not None:
            named_executor(executor)  # an unknown name is refused before the campaign is looked for
        code = resubmit_and_report(chosen_campaign(results_dir, campaign, campaign_option), executor=executor,
                                   rerun_completed=rerun_completed, wait=wait, report=typer.echo, warn=warn)
    raise typer.Exit(code=code)


def watch(
    campaign: CampaignArg = None,
    campaign_option: CampaignOption = None,
    results_dir: ResultsDirOption = DEFAULT_RESULTS_DIR,
    interval: Annotated[float, typer.Option(help="Seconds between the first polls, 0.01 to 60; it backs off to a minute.")] = 5.0,
) -> None:
    """Show live progress until every cell of the campaign has ended, each running cell's from its heartbeat;
    exit 1 if any ended without a result, 3 if the queue stayed unreadable for 10 minutes."""
    from orchestrator.run.status import check_interval, watch_campaign

    with domain_errors():
        check_interval(interval)  # before the campaign is looked for: the option is wrong whatever the campaign
        code = watch_campaign(chosen_campaign(results_dir, campaign, campaign_option), interval, report=typer.echo,
                              warn=warn)
    raise typer.Exit(code=code)
