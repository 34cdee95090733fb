"""Language models in tokens/s: per device model, a table of the comparison rows of a language model (gpt), JAX
against PyTorch, beside the use cases' tables (views) in collect and the report.

A line of it is a comparison row as compare.comparison_frame forms it, and shows per framework:
- tokens/s: the median over runs of token_throughput (bench_contract.measure.tokens);
- the speed-up JAX/PyTorch with its 95% interval: the throughput's (compare). A sample is the same context of
  tokens on both sides, so tokens/s is samples/s times one constant and the ratio and its interval are the same
  numbers; they are not computed a second time. A row that is not comparable has none, as everywhere;
- MFU by the model's FLOPs (model_flops_utilisation: 6N per token plus attention's), where a peak was known, the
  comparison's: against the peak both frameworks share (compare.with_shared_peak), as every MFU shown;
- memory per device, twice: the parameters and optimizer state one device holds (state_memory_per_device: what
  sharding divides, exactly), and the peak: the device memory allocated where the framework measured it (a GPU),
  else on a CPU the peak resident memory of the process (peak_host_rss), said below the table: each process drives
  one CPU device, so its memory is that device's, the framework's own runtime included (a table is one device
  model's, so its peaks are all of one kind);
- the attention kernel it ran (the rows' attention_kernel): said once below the table where each framework ran one
  kernel in every cell of it, a column otherwise (the CPU's "XLA (dot_product_attention's reference ...)" alone is
  half a terminal wide).
The row's key: model, variant, use case, parallelism (ddp or fsdp, from the row's measured settings; a row written
before that setting existed ran ddp), batch and precision. A key value that is the same on every line is said
once above the table, as views does for the precision. The warnings and information below the table are those of
the use cases' tables (views.verdict_notes): spread too wide, not comparable, implausible, tuning.
"""

from __future__ import annotations

import json

from bench_contract.measure.tokens import TOKEN_METRICS
from bench_contract.models.language import MODEL_NAME
from bench_contract.spec import DEFAULT_PARALLELISM, FRAMEWORK_TITLES
from orchestrator.results.compare import (
    FRAMEWORKS,
    ROW_KEY,
    summary_rows,
    with_row_key,
    with_variant_label,
)
from orchestrator.results.views import (
    KEY_HEADERS,
    SAID_ONCE,
    SPEEDUP,
    Column,
    ViewTable,
    cell_lines,
    framework_medians,
    metric_text,
    missing,
    said_once_or_keys,
    table_text,
    verdict_notes,
)

LANGUAGE_MODELS = (MODEL_NAME,)
TOKENS = TOKEN_METRICS["throughput"]  # token_throughput, tokens/s
# Per framework, the summary metrics the table reads beside the comparison's (compare.FRAME_METRICS). Its MFU by
# the model's FLOPs is the comparison's, against the peak both frameworks share (compare.with_shared_peak): read
# here from the runs' own rows, each divided by its process's own peak, JAX's was 32.1 times PyTorch's where its
# throughput was 27.6 times.
LANGUAGE_METRICS = [TOKENS, "state_memory_per_device"]
PEAK_MEMORY = "peak_device_memory_allocated"  # comparison metrics (compare.FRAME_METRICS), in bytes
HOST_PEAK = "peak_host_rss"
TITLE = "Language models in tokens/s"
HOST_WORDS = "peak per device: each process's peak resident memory (peak_host_rss); a process drives one CPU"


def model_and_variant(label: str) -> tuple[str, str]:
    """("gpt", "tiny") from the comparison's model label "gpt (tiny)" (compare.with_variant_label); ("gpt", "full")
    from "gpt"."""
    model, _, variant = label.partition(" (")
    return (model, variant.removesuffix(")")) if variant else (label, "full")


def parallelism(settings: str) -> str:
    """The row's data-parallel strategy (ddp or fsdp), from its measured settings' JSON; a row written before the
    setting existed ran the default (ddp)."""
    parsed = json.loads(settings) if settings else {}
    return parsed.get("parallelism") or DEFAULT_PARALLELISM


def language_rows(df):
    """The rows of `df` (merged rows, any columns) of a language model."""
    return df[df["model"].isin(LANGUAGE_MODELS)]


def with_language_columns(frame, df):
    """views.use_case_frame's `frame` with, for the comparison rows of a language model (of the merged rows `df`),
    per framework the medians of LANGUAGE_METRICS, its peak memory per device and where that came from ("device",
    "host" or ""), and its attention kernel; per row its language model, variant and parallelism ("" on the rows
    of other models). `frame` unchanged where no language model was collected."""
    import numpy as np
    import pandas as pd

    rows = language_rows(df)
    if frame.empty or rows.empty:
        return frame
    labelled = with_variant_label(with_row_key(rows))
    frame = frame.merge(framework_medians(summary_rows(labelled), LANGUAGE_METRICS), on=ROW_KEY, how="left")
    kernels = attention_kernels(labelled)
    keys = list(frame[ROW_KEY].itertuples(index=False, name=None))
    absent = pd.Series(np.nan, index=frame.index)
    on_cpu = frame["device_kind"] == "cpu"
    for framework in FRAMEWORKS:
        device = frame.get(f"{framework}_{PEAK_MEMORY}", absent)
        host = frame.get(f"{framework}_{HOST_PEAK}", absent).where(on_cpu)
        frame[f"{framework}_peak_memory_per_device"] = device.where(device.notna(), host)
        frame[f"{framework}_peak_memory_source"] = np.where(device.notna(), "device",
                                                            np.where(host.notna(), "host", ""))
        frame[f"{framework}_attention_kernel"] = [kernels.get((*key, framework), "") for key in keys]
    named = [model_and_variant(label) for label in frame["model"]]
    language = [model in LANGUAGE_MODELS for model, _ in named]
    frame["language_model"] = [model if is_lm else "" for (model, _), is_lm in zip(named, language)]
    frame["variant"] = [variant if is_lm else "" for (_, variant), is_lm in zip(named, language)]
    frame["parallelism"] = [parallelism(s) if is_lm else "" for s, is_lm in zip(frame["settings"], language)]
    return frame


def attention_kernels(labelled) -> dict[tuple, str]:
    """(*ROW_KEY, framework) -> the attention kernel its runs ran, "; "-joined where they ran several; none for
    rows that named none (a dataset merged before the column existed, a model without attention)."""
    if "attention_kernel" not in labelled:
        return {}
    rows = summary_rows(labelled)
    rows = rows[rows["attention_kernel"].fillna("") != ""]
    found = rows.groupby([*ROW_KEY, "framework"], dropna=False)["attention_kernel"].agg(
        lambda kernels: "; ".join(sorted(set(kernels))))
    return found.to_dict()


# --- the table ------------------------------------------------------------------------------------------

def kernel_text(row, column: str) -> str:
    return row.get(column) or "n/a"


COLUMNS = (
    Column(TOKENS, "tokens/s", metric_text("throughput")), SPEEDUP,
    Column("model_flops_utilisation", "MFU\n(6N)", metric_text("model_flops_utilisation")),
    Column("state_memory_per_device", "state per\ndevice MiB", metric_text(PEAK_MEMORY)),  # bytes, shown in MiB
    Column("peak_memory_per_device", "peak per\ndevice MiB", metric_text(PEAK_MEMORY)),
)
KERNEL = Column("attention_kernel", "attention\nkernel", kernel_text)
# The key columns, each said once above the table where it is the same on every line (views.SAID_ONCE's rule).
KEY_WORDS = {"language_model": "{}", "variant": "variant {}", "use_case": "use case {}", "parallelism": "{}"}
HEADERS = {**KEY_HEADERS, "language_model": "model", "variant": "variant", "use_case": "use\ncase",
           "parallelism": "paral-\nlelism"}


def language_model_tables(frame) -> list[ViewTable]:
    """The language models' table on every device model that ran one (with_language_columns' frame), device
    models in order; none where no language model was collected."""
    if frame.empty or "language_model" not in frame:
        return []
    tables = []
    for device in sorted(str(d) for d in frame["device_model"].unique()):
        table = language_model_table(frame, device)
        if table is not None:
            tables.append(table)
    return tables


def measured(row) -> bool:
    """Whether either framework has a throughput (a batch-search cell has none: it has its own table)."""
    return not all(missing(row.get(f"{fw}_{metric}")) for fw in FRAMEWORKS for metric in (TOKENS, "throughput"))


def language_model_table(frame, device: str) -> ViewTable | None:
    """One device model's table of the language models' comparison rows, or None where it ran none."""
    block = frame[(frame["device_model"].astype(str) == device) & (frame["language_model"] != "")]
    block = block[[measured(row) for _, row in block.iterrows()]]
    if block.empty:
        return None
    block = block.sort_values(["language_model", "variant", "use_case", "parallelism", "batch_size", "precision",
                               "settings"])
    said_once, keys = said_once_or_keys(block, KEY_WORDS)
    keys.append("batch_size")
    more_said, varying = said_once_or_keys(block, SAID_ONCE)
    said_once += more_said
    keys += varying + (["differs_in"] if block["differs_in"].astype(bool).any() else [])
    kernels = {fw: set(block[f"{fw}_attention_kernel"]) for fw in FRAMEWORKS}
    one_kernel = all(len(found) == 1 for found in kernels.values())
    columns = COLUMNS if one_kernel else (*COLUMNS, KERNEL)
    headers, rows = cell_lines(block, keys, [HEADERS[k] for k in keys], columns)
    notes, info = verdict_notes(block, row_words)
    if one_kernel:
        info.insert(0, "attention kernel: " + "; ".join(
            f"{FRAMEWORK_TITLES[fw]} {next(iter(kernels[fw])) or 'n/a'}" for fw in FRAMEWORKS))
    if (block[[f"{fw}_peak_memory_source" for fw in FRAMEWORKS]] == "host").any(axis=None):
        info.append(HOST_WORDS)
    return ViewTable(f"{TITLE} on {device}", said_once, headers, rows, notes, info, key_columns=len(keys))


def row_words(row) -> str:
    """A language model's comparison row in the words of a note below its table: "gpt (tiny) use case 2 fsdp
    batch 8", and the settings that tell it from the other rows of its cell."""
    settings = f", {row['differs_in']}" if row.get("differs_in") else ""
    return f"{row['model']} use case {row['use_case']} {row['parallelism']} batch {row['batch_size']}{settings}"


def language_model_lines(frame) -> list[str]:
    """collect's language-model tables of `frame` (with_language_columns), each after an empty line."""
    return [f"\n{table_text(table)}" for table in language_model_tables(frame)]
