"""Plain fixed-width text tables for the terminal: readable in a log file and in a pipe."""

from __future__ import annotations

TERMINAL_WIDTH = 120  # the widest line a table printed for a person may have (use-case tables are built to fit)


def format_table(headers: list[str], rows: list[list[object]]) -> str:
    """Columns padded to their widest cell. A header may hold a line break ("step p50\\nms"): it is printed on
    two lines, so that a column is as narrow as its values rather than as wide as its title."""
    header_lines = [str(h).split("\n") for h in headers]
    depth = max((len(lines) for lines in header_lines), default=1)
    # Short headers sit on the last header line, just above the dashes, as the one-line headers do.
    heads = [[""] * (depth - len(lines)) + lines for lines in header_lines]
    body = [["" if v is None else str(v) for v in row] for row in rows]
    widths = [max([len(line) for line in heads[i]] + [len(row[i]) for row in body]) for i in range(len(headers))]

    def line(values):
        return "  ".join(value.ljust(widths[i]) for i, value in enumerate(values)).rstrip()

    lines = [line([head[k] for head in heads]) for k in range(depth)]
    lines.append("  ".join("-" * w for w in widths).rstrip())
    lines += [line(row) for row in body]
    return "\n".join(lines)
