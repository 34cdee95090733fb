"""What collect prints after merging: the verdicts (verdict), every use case's table per device model and the table
across device models (views), the language models' tables in tokens/s (language_models), then the largest batches,
where a campaign searched for them (batch_search)."""

from __future__ import annotations

from orchestrator.results.batch_search import batch_search_table
from orchestrator.results.language_models import language_model_lines, with_language_columns
from orchestrator.results.verdict import verdict_lines, verdicts
from orchestrator.results.views import use_case_frame, use_case_lines


def summary_lines(summary, curves=None) -> list[str]:
    """collect's comparison of the summary rows; the training table's time to accuracy reads the per-epoch
    `curves`."""
    import pandas as pd

    frame = use_case_frame(summary if curves is None else pd.concat([summary, curves], ignore_index=True))
    frame = with_language_columns(frame, summary)
    lines = verdict_lines(verdicts(frame, summary)) + use_case_lines(frame) + language_model_lines(frame)
    searched = batch_search_table(summary)
    if searched:
        lines.append(f"\nLargest batch that fits (each try a fresh process):\n{searched}")
    return lines
