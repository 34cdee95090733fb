"""`main.py report`: the comparison as Markdown, LaTeX and CSV tables, matplotlib plots, and one HTML page.

Everything is drawn from the merged dataset that `collect` wrote; nothing is measured here. The tables are
written by report_tables, the plots drawn by report_plots, the page by report_html; the HTML page embeds its
plots, so it is one file that can be mailed or archived.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from bench_contract.atomic import publish
from orchestrator.errors import OrchestratorError, UsageError
from orchestrator.results.baseline import Judged, judge_merged
from orchestrator.results.campaigns import campaign_id, write_campaign_rows
from orchestrator.results.compare import comparison_frame, device_mismatch_lines
from orchestrator.results.export_wandb import export
from orchestrator.results.folders import elsewhere, no_submitted_campaign, submitted_campaigns
from orchestrator.results.language_models import language_model_tables, with_language_columns
from orchestrator.results.methods import methods_paragraph
from orchestrator.results.neighbours import with_neighbours
from orchestrator.results.report_html import write_html
from orchestrator.results.report_plots import Plot, draw_plots
from orchestrator.results.report_tables import baseline_tables, extra_tables, write_tables
from orchestrator.results.store import MERGED, read_merged_rows
from orchestrator.results.tuning import draw_ladders, tuning_tables
from orchestrator.results.verdict import verdict_lines, verdicts
from orchestrator.results.views import cross_device_table, use_case_frame, view_tables
from orchestrator.run.tuning import records_of
from orchestrator.suggest import command


@dataclass
class Report:
    folder: Path
    tables: dict[str, Path] = field(default_factory=dict)  # format -> path
    plots: list[Plot] = field(default_factory=list)
    html: Path | None = None


def write_report(merged: Path, folder: Path, judged: Judged | None = None, results_dir: Path | None = None) -> Report:
    """The report of `merged` in `folder`; with `judged`, each cell's change against a baseline besides. An empty
    `merged` is refused with the collect to run, of results_dir where given (else the command line's)."""
    df = with_neighbours(read_merged(merged), [results_dir or merged.parent])  # who ran beside whom, in packs
    if df.empty:
        raise OrchestratorError(f"{merged} holds no rows; run `{command('collect', results_dir=results_dir)}` after "
                                f"the jobs finish{nothing_submitted(results_dir) if results_dir else ''}")
    folder.mkdir(parents=True, exist_ok=True)
    # The comparison with every use case's columns and the language models': all of it goes to the CSV.
    frame = with_language_columns(use_case_frame(df), df)
    report = Report(folder)
    # The tuning records of the campaigns whose rows these are (--tune), in their campaign folders.
    records = records_of(results_dir or merged.parent, df["campaign"].dropna().astype(str).unique())
    extras = baseline_tables(judged) + extra_tables(df, frame) + tuning_tables(frame, records)
    judged_rows = verdicts(frame, df)
    methods = methods_paragraph(df, frame, judged_rows, records)
    tables = view_tables(frame) + language_model_tables(frame)
    report.tables = write_tables(frame, tables, folder, extras, cross_device_table(frame),
                                 verdict_lines(judged_rows), methods)
    report.plots = draw_plots(df, frame, folder / "plots") + draw_ladders(records, folder / "plots")
    report.html = write_html(df, frame, tables, report.plots, folder / "report.html", merged, extras, judged_rows,
                             methods)
    return report


def report_and_export(results_dir: Path, merged: Path | None = None, output_dir: Path | None = None,
                      wandb_project: str | None = None, report: Callable[[str], None] = print,
                      baseline: str | None = None, tolerance: str = "5%") -> None:
    """The report command: write the report of `merged` (default <results_dir>/merged.parquet) into `output_dir`
    (default <results_dir>/report), say where each part went, and export to W&B where a project is named. With
    `baseline` (a name saved in results_dir), the report also shows each campaign's cells against it, as
    `compare --baseline` does, and says how many regressed."""
    merged = merged or results_dir / MERGED
    if not merged.exists():
        raise OrchestratorError(f"{merged} does not exist; run `{command('collect', results_dir=results_dir)}` first"
                                f"{nothing_submitted(results_dir)}")
    judged = judge_merged(results_dir, merged, baseline, tolerance) if baseline else None
    written = write_report(merged, output_dir or results_dir / "report", judged, results_dir)
    if judged:
        report(judged.summary)
    add_device_mismatches(written, device_mismatch_lines(merged, [results_dir]), report)
    for kind, path in written.tables.items():
        report(f"{kind}: {path}")
    report(f"{len(written.plots)} plots in {written.folder / 'plots'}")
    report(f"html: {written.html}")
    if wandb_project:
        df = read_merged(merged)
        run_dir = export(df, comparison_frame(df), wandb_project, written.folder)  # W&B adds its own wandb/
        report(f"W&B run written to {run_dir}")


def report_campaign(results_dir: Path, campaign: str, merged: Path | None, output_dir: Path | None,
                    wandb_project: str | None, report: Callable[[str], None] = print,
                    baseline: str | None = None, tolerance: str = "5%") -> None:
    """The report command with --campaign: the report of that campaign's rows alone, read afresh from the merged
    dataset, into <results_dir>/report-<campaign> unless output_dir is given (against `baseline` where named)."""
    name = campaign_id(results_dir, campaign)
    merged = merged or results_dir / MERGED
    if not merged.exists():
        raise UsageError(f"{merged} does not exist; run `{command('collect', results_dir=results_dir)}` first")
    rows = write_campaign_rows(merged, results_dir, name)
    report_and_export(results_dir, rows, output_dir or results_dir / f"report-{name}", wandb_project, report=report,
                      baseline=baseline, tolerance=tolerance)


def nothing_submitted(results_dir: Path) -> str:
    """"; no submitted campaign in X; Y holds 2: python main.py report --results-dir Y" where results_dir holds
    none and a folder nearby does (issue 32: the report of an empty folder names where the campaigns are)."""
    if submitted_campaigns(results_dir):
        return ""
    found = elsewhere(results_dir, "report")
    return f"; {no_submitted_campaign(results_dir)}{found}" if found else ""


def add_device_mismatches(written: Report, lines: list[str], report: Callable[[str], None]) -> None:
    """Rows that ran on a device their system does not expect: said, and appended to the Markdown report."""
    for line in lines:
        report(line)
    markdown = written.tables.get("markdown")
    if lines and markdown is not None:
        text = Path(markdown).read_text() + "\n## Devices the systems did not expect\n\n" + \
            "".join(f"- {line.removeprefix('warning: ')}\n" for line in lines)
        publish(markdown, lambda tmp: tmp.write_text(text))


def read_merged(merged: Path):
    """The merged dataset as one DataFrame, read from the one generation `merged` links to when reading starts
    (collect switches the link when it publishes the next one, and keeps this one until the switch after)."""
    return read_merged_rows(merged).to_pandas()
