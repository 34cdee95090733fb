"""The report's tables: Markdown, LaTeX and CSV files, the use cases' tables and the extra tables beside them
(against a baseline, the roofline's bounds, the largest batch that fits)."""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

from bench_contract.atomic import publish
from orchestrator.results.baseline import VERDICT_NAME_COLUMNS, Judged, verdict_rows
from orchestrator.results.batch_search import batch_search_rows
from orchestrator.results.compare import FRAMEWORKS, format_value, summary_rows
from orchestrator.results.views import ViewTable


def one_line(header: str) -> str:
    """A two-line header of the text tables (views.Column) as one line, where a format has no line breaks."""
    return header.replace("\n", " ")


def markdown_table(headers: list[str], rows: list[list[str]]) -> str:
    def line(cells):
        return "| " + " | ".join(one_line(str(c)).replace("|", "\\|") for c in cells) + " |"

    return "\n".join([line(headers), line(["---"] * len(headers)), *(line(r) for r in rows)])


LATEX_SPECIAL = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
                 "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}"}


def latex_escape(text: str) -> str:
    return "".join(LATEX_SPECIAL.get(c, c) for c in str(text))


# A table of more columns than this does not fit one column of a two-column paper: it spans the page (table*).
COLUMN_WIDE = 7
LATEX_PREAMBLE = ("% The report's tables, for a paper: \\input{report.tex} after \\usepackage{booktabs,graphicx} in\n"
                  "% the preamble. Each table has a \\label (tab:...) to cite with \\ref; one of more than "
                  f"{COLUMN_WIDE} columns is a\n% table*, across both columns of a two-column paper; one wider than "
                  "its column is scaled down to fit.")
# The tabular at its natural size, or scaled down to the column (\linewidth: the text's width in a table*) where it is
# wider: graphicx's \resizebox reads the content's width as \width.
FIT_OPEN = r"\resizebox{\ifdim\width>\linewidth\linewidth\else\width\fi}{!}{%"


def latex_table(caption: str, headers: list[str], rows: list[list[str]], left: int = 5, label: str = "") -> str:
    """A booktabs table; its first `left` columns (the names) are left-aligned, the numbers right-aligned; a header
    of two lines (views.Column) stays two lines, so a column is as narrow as its values. A table of more than
    COLUMN_WIDE columns is a table* (both columns of a two-column paper) in a smaller font; one still wider than its
    column is scaled down to fit it (FIT_OPEN)."""
    wide = len(headers) > COLUMN_WIDE
    environment = "table*" if wide else "table"
    lines = [
        f"\\begin{{{environment}}}[t]", r"\centering", r"\footnotesize" if wide else r"\small",
        r"\setlength{\tabcolsep}{4pt}",
        f"\\caption{{{latex_escape(caption)}}}", *([f"\\label{{{label}}}"] if label else []),
        FIT_OPEN, r"\begin{tabular}{@{}" + "l" * left + "r" * (len(headers) - left) + "@{}}", r"\toprule",
        " & ".join(latex_header(h) for h in headers) + r" \\", r"\midrule",
        *(" & ".join(latex_escape(c) for c in row) + r" \\" for row in rows),
        r"\bottomrule", r"\end{tabular}}", f"\\end{{{environment}}}",
    ]
    return "\n".join(lines)


def latex_header(header: str) -> str:
    """A header cell; its two lines stacked (a tabular in the cell, so no package is needed for it)."""
    parts = [latex_escape(part) for part in header.split("\n")]
    # "\\{}": a line that starts with "[" (as "[95% CI]") would be read as the length argument of a bare "\\".
    return parts[0] if len(parts) == 1 else r"\begin{tabular}[b]{@{}c@{}}" + r"\\{}".join(parts) + r"\end{tabular}"


def latex_labels(captions: list[str]) -> list[str]:
    """A label per table, from its title ("tab:training-on-cpu-x"), made unique by a number where two agree."""
    import re

    labels, seen = [], {}
    for caption in captions:
        slug = re.sub(r"[^a-z0-9]+", "-", caption.lower()).strip("-")[:60].rstrip("-") or "table"
        seen[slug] = seen.get(slug, 0) + 1
        labels.append(f"tab:{slug}" + (f"-{seen[slug]}" if seen[slug] > 1 else ""))
    return labels


EXTRA_NAME_COLUMNS = 6  # device model, benchmark, use case, model, batch or precision, precision or memory cap


class Extra(NamedTuple):
    """A table beside the use cases' tables; its first `left` columns name its cells (left-aligned)."""

    title: str
    headers: list[str]
    rows: list[list[str]]
    left: int = EXTRA_NAME_COLUMNS


def extra_tables(df, frame) -> list[Extra]:
    """The tables beside the use cases' (each where it has rows): the roofline's bound of every cell, and the
    largest batch that fits."""
    tables = [Extra("Roofline: compute- or memory-bound", *roofline_rows(frame)),
              Extra("Largest batch that fits", *batch_search_rows(summary_rows(df)))]
    return [table for table in tables if table.rows]


def baseline_tables(judged: Judged | None) -> list[Extra]:
    """The table of `compare --baseline` (orchestrator.results.baseline.verdict_rows) as the report's first
    extra table, titled with its summary: per cell and framework the change, its flag and, beside a flagged
    cell, the versions that changed. None without a baseline."""
    if judged is None:
        return []
    return [Extra(f"Against baseline {judged.name}: {judged.summary}", *verdict_rows(judged.verdicts),
                  left=VERDICT_NAME_COLUMNS)]


def roofline_rows(frame) -> tuple[list[str], list[list[str]]]:
    """Each cell's arithmetic intensity and bound (compute or memory, against the device's shared ridge point)
    per framework: the roofline plot's points as numbers. No rows where no bound was recorded."""
    headers = ["device model", "benchmark", "use case", "model", "batch", "precision",
               "JAX intensity\n(FLOP/byte)", "PyTorch intensity\n(FLOP/byte)", "JAX bound", "PyTorch bound"]
    bounds = [f"{fw}_compute_bound" for fw in FRAMEWORKS]
    if frame.empty or not set(bounds) <= set(frame.columns):
        return headers, []
    rows = []
    for _, row in frame[frame[bounds].notna().any(axis=1)].iterrows():
        rows.append([row["device_model"], row["benchmark"], str(row["use_case"]), row["model"],
                     str(row["batch_size"]), row["precision"],
                     *(format_value("arithmetic_intensity", row[f"{fw}_arithmetic_intensity"]) for fw in FRAMEWORKS),
                     *(format_value("compute_bound", row[f"{fw}_compute_bound"]) for fw in FRAMEWORKS)])
    return headers, rows


def write_tables(frame, tables: list[ViewTable], folder: Path,
                 extras: list[Extra] = (),
                 cross_device: ViewTable | None = None, verdicts: list[str] = (), methods: str = "") -> dict[str, Path]:
    """Markdown and LaTeX: the verdicts (Markdown only), each use case's table per device model (views), the
    table across device models where there are several, then the extras; CSV: every column of every comparison row
    (views.use_case_frame), what the tables leave out included."""
    md, tex = ["# JAX vs PyTorch", ""], []
    if verdicts:  # verdict.verdict_lines: a heading line, then one line per comparison row
        md += [f"## {verdicts[0].rstrip(':')}", "", *(f"- {line.strip()}" for line in verdicts[1:]), ""]
    if methods:  # methods.methods_paragraph: for a paper, ready to paste
        md += ["## Methods", "", methods, ""]
    # The names (and in a use case's table the framework column) are left-aligned.
    named = [(table, table.key_columns + 1) for table in tables]
    named += [(cross_device, cross_device.key_columns)] if cross_device else []
    labels = iter(latex_labels([table.title for table, _ in named] + [extra.title for extra in extras]))
    for table, left in named:
        said = [*table.notes, *table.info]
        md += [f"## {table.caption}", "", markdown_table(table.headers, table.rows), "", *said, *([""] if said else [])]
        tex.append(latex_table(table.caption, table.headers, table.rows, left=left, label=next(labels)))
    for extra in extras:
        md += [f"## {extra.title}", "", markdown_table(extra.headers, extra.rows), ""]
        tex.append(latex_table(extra.title, extra.headers, extra.rows, left=extra.left, label=next(labels)))
    paths = {
        "markdown": publish(folder / "report.md", lambda tmp: tmp.write_text("\n".join(md))),
        "latex": publish(folder / "report.tex", lambda tmp: tmp.write_text("\n\n".join([LATEX_PREAMBLE, *tex]) + "\n")),
        "csv": publish(folder / "report.csv", lambda tmp: frame.to_csv(tmp, index=False)),
    }
    return paths
