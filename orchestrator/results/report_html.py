"""The report's HTML page: the tables, the plots embedded, the provenance of every device model and framework,
and links to the profiler traces."""

from __future__ import annotations

import base64
import html
import json
from pathlib import Path

from bench_contract.atomic import publish
from bench_contract.measure.tracing import trace_files
from bench_contract.results import LOCKED, SITE_PREFIX
from orchestrator import PROJECT_ROOT
from orchestrator.results.compare import FRAMEWORK_TITLES
from orchestrator.results.report_plots import Plot
from orchestrator.results.report_tables import Extra
from orchestrator.results.verdict import Verdict
from orchestrator.results.views import ViewTable, cross_device_table

PROVENANCE = ["framework_version", "library_versions", "packages_sha256", "python_version", "precision_policy",
              "data_source", "xla_flags", "environment_variables", "device_details", "git_commit"]


def html_table(headers: list[str], rows: list[list[str]], left: int = 0) -> str:
    """An HTML table; its first `left` columns name the cell (left-aligned), the others are numbers."""
    def cell(tag, k, text):
        opening = f'<{tag} class="name">' if k < left else f"<{tag}>"
        return opening + html.escape(str(text)).replace("\n", "<br>") + f"</{tag}>"

    head = "".join(cell("th", k, h) for k, h in enumerate(headers))
    body = "".join("<tr>" + "".join(cell("td", k, c) for k, c in enumerate(row)) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def provenance_sections(df) -> list[dict]:
    """Per device model and framework: where it ran (hosts, Slurm jobs, campaigns) and every provenance field,
    one field a line. A JSON field (library versions, device details, environment variables) is spread into
    one "name: value" line per entry, not shown as one squeezed string."""
    sections = []
    for (device, fw), block in df.groupby(["device_model", "framework"]):
        jobs = sorted(j for j in block["slurm_array_job_id"].unique()
                      if j and not j.startswith("not available")) or ["(not Slurm)"]
        fields = [("hosts", ", ".join(sorted(block["hostname"].unique()))), ("Slurm jobs", ", ".join(jobs)),
                  ("campaigns", ", ".join(sorted(block["campaign"].unique())))]
        kinds = sorted(block["environment_kind"].unique())
        fields.append(("environment", "\n\n".join(environment_mark(kind) for kind in kinds)))
        for column in PROVENANCE:
            values = sorted(str(v) for v in block[column].unique())
            fields.append((column.replace("_", " "), "\n\n".join(readable(v) for v in values)))
        sections.append({"title": f"{FRAMEWORK_TITLES.get(fw, fw)} on {device}", "fields": fields})
    return sections


def environment_mark(kind: str) -> str:
    """environment_kind for a reader: a site interpreter's rows are marked as not reproducible from a lock file."""
    if kind.startswith(SITE_PREFIX):
        return f"site environment, not locked: {kind.removeprefix(SITE_PREFIX)}"
    return "built from the lock file" if kind == LOCKED else kind


def readable(value: str) -> str:
    """A provenance value for a reader: a JSON object or list as "name: value" lines (nested names joined by
    dots), anything else as it is."""
    try:
        parsed = json.loads(value)
    except ValueError:
        return value
    if not isinstance(parsed, dict | list):
        return value
    return "\n".join(f"{name}: {item}" for name, item in flattened(parsed)) or "(none)"


def flattened(value, prefix: str = "") -> list[tuple[str, object]]:
    if isinstance(value, dict):
        items = value.items()
    elif isinstance(value, list) and any(isinstance(v, dict | list) for v in value):
        items = ((str(i), v) for i, v in enumerate(value))
    else:
        return [(prefix, ", ".join(map(str, value)) if isinstance(value, list) else value)]
    return [pair for name, item in items for pair in flattened(item, f"{prefix}.{name}" if prefix else str(name))]


def trace_links(df, results_dir: Path, page_dir: Path) -> list[dict]:
    """Every profiler trace of the collected campaigns (bench_contract.measure.tracing writes them beside the result
    files, in <campaign>/rows/<framework>/<cell>-trial<t>.trace/), as links relative to the page."""
    import os

    links = []
    for campaign in sorted(df["campaign"].unique()):
        for folder in sorted((results_dir / campaign / "rows").glob("*/*.trace")):
            for file in trace_files(folder):
                links.append({"cell": folder.name.removesuffix(".trace"), "file": file.name,
                              "href": os.path.relpath(file, page_dir)})
    return links


def write_html(df, frame, view_tables: list[ViewTable], plots: list[Plot], path: Path, merged: Path,
               extras: list[Extra], verdicts: list[Verdict] = (), methods: str = "") -> Path:
    """The page: `view_tables` (the use cases' and the language models', views and language_models), then the
    extras, the table across device models, the plots, the provenance and the traces."""
    import jinja2

    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(PROJECT_ROOT / "templates")),
                             undefined=jinja2.StrictUndefined, autoescape=True)
    # A use case's table names its cells in its key columns and the framework column.
    tables = [{"title": table.caption, "html": html_table(table.headers, table.rows, left=table.key_columns + 1),
               "notes": table.notes, "info": table.info} for table in view_tables]
    tables += [{"title": extra.title, "html": html_table(extra.headers, extra.rows, left=extra.left), "notes": [],
                "info": []}
               for extra in extras]
    across = cross_device_table(frame)
    cross_device = None if across is None else {
        "title": across.caption, "html": html_table(across.headers, across.rows, left=across.key_columns)}
    embedded = [{"title": plot.title, "data": base64.b64encode(plot.screen).decode()} for plot in plots]
    page = env.get_template("report.html.j2").render(
        merged=str(merged), rows=len(df), tables=tables, cross_device=cross_device, plots=embedded,
        verdicts=verdicts, reliable=sum(v.reliable for v in verdicts), methods=methods,
        provenance=provenance_sections(df),
        campaigns=sorted(df["campaign"].unique()), traces=trace_links(df, merged.parent, path.parent),
    )
    return publish(path, lambda tmp: tmp.write_text(page))
