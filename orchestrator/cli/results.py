"""The commands on results: collect, report, and baselines (`baseline save`, `compare`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from orchestrator import DEFAULT_RESULTS_DIR
from orchestrator.cli.common import PanelledHelp, ResultsDirOption, domain_errors, warn


def collect(
    results_dir: Annotated[list[Path] | None, typer.Option(help=f"Folder holding the campaigns (default: {DEFAULT_RESULTS_DIR}); repeat it to merge folders copied from other clusters, or a results folder nested in the first, into the first one's merged.parquet.", show_default=False)] = None,
    campaign: Annotated[str | None, typer.Option("--campaign", "-c", help="Show this campaign's cells and comparison only, and write its rows to <results-dir>/merged-<campaign>.parquet (every campaign is merged all the same).")] = None,
    output: Annotated[Path | None, typer.Option(help="Merged Parquet dataset, a folder of parts (default: <results-dir>/merged.parquet).")] = None,
    failures: Annotated[Path | None, typer.Option(help="The cells without a result, with reasons and log ends (default: <results-dir>/failures.parquet).")] = None,
    log_lines: Annotated[int, typer.Option(help="Lines of the end of each failed task's log to show and keep.")] = 20,
    progress: Annotated[bool | None, typer.Option("--progress/--no-progress", help="A progress bar on stderr while task files are read (default: on a terminal, from 1,000 files to read).", show_default=False)] = None,
) -> None:
    """Merge every task's Parquet file into one dataset and print JAX vs PyTorch per GPU (or CPU) model.

    Incremental: only task files that are new or changed since the last collect are read. Every cell that ended
    without a result is named with its reason, and listed apart from the measurements in failures.parquet. Cells
    still queued or running are counted, and collect exits 3: what it merged is partial. With several
    --results-dir, each campaign is merged once, and a table compares the device models side by side."""
    from orchestrator.results.collect import collect_and_report

    home, *others = results_dir or [DEFAULT_RESULTS_DIR]
    with domain_errors():
        code = collect_and_report(home, output, failures, log_lines, report=typer.echo, warn=warn,
                                  campaign=campaign, others=others, progress=progress)
    raise typer.Exit(code=code)


def report(
    merged: Annotated[Path | None, typer.Option(help="Merged dataset (default: <results-dir>/merged.parquet).")] = None,
    results_dir: Annotated[Path, typer.Option(help="Folder holding the campaigns.")] = DEFAULT_RESULTS_DIR,
    output_dir: Annotated[Path | None, typer.Option(help="Where the report goes (default: <results-dir>/report, or <results-dir>/report-<campaign>).")] = None,
    wandb_project: Annotated[str | None, typer.Option(help="Also export the results to this W&B project (W&B's own settings apply, e.g. WANDB_MODE=offline).")] = None,
    campaign: Annotated[str | None, typer.Option("--campaign", "-c", help="Report this campaign's rows only.")] = None,
    baseline: Annotated[str | None, typer.Option("--baseline", "-b", help="Also show each cell's throughput against this baseline (`baseline save NAME`), as `compare --baseline` does.")] = None,
    tolerance: Annotated[str, typer.Option(help="With --baseline: a change within this is never flagged: 5% or 0.05.")] = "5%",
) -> None:
    """Write the comparison as Markdown, LaTeX and CSV tables, plots, and one self-contained HTML page."""
    from orchestrator.results.report import report_and_export, report_campaign

    with domain_errors():
        if campaign:
            report_campaign(results_dir, campaign, merged, output_dir, wandb_project, report=typer.echo,
                            baseline=baseline, tolerance=tolerance)
        else:
            report_and_export(results_dir, merged, output_dir, wandb_project, report=typer.echo, baseline=baseline,
                              tolerance=tolerance)


baseline_app = typer.Typer(cls=PanelledHelp, no_args_is_help=True,
                           help="Baselines: keep campaigns' numbers under a name; `compare --baseline` checks later ones.")


@baseline_app.command("save")
def baseline_save(
    name: Annotated[str, typer.Argument(help="The baseline's name (letters, digits, . _ -), e.g. jax-0.10.")],
    results_dir: ResultsDirOption = DEFAULT_RESULTS_DIR,
    campaign: Annotated[list[str] | None, typer.Option("--campaign", "-c", help="Campaigns to keep (default: every collected one); repeat for several.")] = None,
    merged: Annotated[Path | None, typer.Option(help="Merged dataset (default: <results-dir>/merged.parquet).")] = None,
) -> None:
    """Keep the median throughput, its interval, the runs and the versions of each cell and framework as
    <results-dir>/baselines/NAME.json (replaced if it exists)."""
    from orchestrator.results import baseline
    from orchestrator.results.store import MERGED

    with domain_errors():
        path, entries = baseline.save(results_dir, merged or results_dir / MERGED, name, tuple(campaign or ()))
    typer.echo(f"baseline {name}: {entries} cell and framework entries in {path}")


def compare(
    baseline_name: Annotated[str, typer.Option("--baseline", "-b", help="The baseline to compare with (`baseline save NAME`).")],
    results_dir: ResultsDirOption = DEFAULT_RESULTS_DIR,
    campaign: Annotated[list[str] | None, typer.Option("--campaign", "-c", help="Campaigns to judge (default: every collected campaign the baseline was not made of).")] = None,
    tolerance: Annotated[str, typer.Option(help="A change within this is never flagged: 5% or 0.05.")] = "5%",
    fail_on_regression: Annotated[bool, typer.Option("--fail-on-regression", help="Exit 1 when a cell regressed (for CI).")] = False,
    merged: Annotated[Path | None, typer.Option(help="Merged dataset (default: <results-dir>/merged.parquet).")] = None,
) -> None:
    """Each cell's throughput against the baseline: flagged as a regression or an improvement when it changed
    by more than the tolerance and outside both sides' intervals, with the versions that changed."""
    from orchestrator.results import baseline
    from orchestrator.results.store import MERGED

    with domain_errors():
        limit = baseline.parse_tolerance(tolerance)
        saved = baseline.load(results_dir, baseline_name)
        verdicts = baseline.judge_campaigns(saved, merged or results_dir / MERGED, tuple(campaign or ()), limit)
    typer.echo(baseline.verdict_table(verdicts))
    regressed = baseline.regressions(verdicts)
    typer.echo(baseline.verdict_summary(baseline_name, verdicts, limit))
    raise typer.Exit(code=1 if regressed and fail_on_regression else 0)
