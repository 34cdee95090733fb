"""The summaries of the GPU scripts that measure speed: what ran, each row's numbers beside the published ones, and
what only these checks look at.

    python -m bench.gpu_summary speed --work DIR    # scripts/gpu_speed.sh (issue 35)
    python -m bench.gpu_summary dpsgd --work DIR    # scripts/gpu_dpsgd.sh (issue 36)

Each reads DIR/results/merged.parquet (collect's), DIR/logs/steps.log and, for speed, DIR/overhead, and writes
DIR/summary.md. The rows' own verdicts, intervals and methods are in DIR/results/report (the product's report).
Exit status 1 when no comparison row was measured.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

from bench.harness_overhead import Probe, label, parse_probe_output, verdict

# The harness's step may differ from a bare loop's by this much on a GPU (issue 35).
GPU_TARGET_PERCENT = 3.0

# Published images/s at batch 128, inference, one H100 (the seed study, docs/what-was-run.md): PyTorch
# eager without TF32, JAX at its default precision (TF32 in its float32 convolutions and matmuls on an H100).
SEED_H100 = {
    "resnet50": {"torch": 5915.0, "jax": 11739.0},
    "vit_b_16": {"torch": 946.0, "jax": 530.0},
    "mobilenet_v3_small": {"torch": 37325.0, "jax": 56123.0},
    "efficientnet_b0": {"torch": 9027.0, "jax": 16510.0},
}
SEED_SETTING = "seed study, H100, batch 128: PyTorch eager fp32 without TF32, JAX's default precision"
# AlgoPerf's seconds per training step on A100s with TF32 set in both (mlcommons/algorithmic-efficiency PR #892):
# their batch sizes and several GPUs, so a scale for the training rows, not a like-for-like number.
ALGOPERF_A100_STEP_S = {"resnet50": {"jax": 0.259, "torch": 0.300}, "vit_b_16": {"jax": 0.386, "torch": 0.321}}
# DP-SGD's published costs: Opacus with correct Poisson sampling trains 2.6 to 8 times fewer samples a second than
# SGD, ghost clipping about half that cost (arXiv 2406.17298); JAX's vmap up to an order of magnitude faster than
# Opacus of 2021 (Subramani et al., NeurIPS 2021).
PUBLISHED_DP_SGD = ("Published: Opacus with Poisson sampling 2.6x to 8x SGD's cost, about half that with ghost "
                    "clipping (arXiv 2406.17298); JAX's vmap up to 10x faster than Opacus of 2021 (Subramani et al.).")

USE_CASES = {1: "training", 3: "DP-SGD", 5: "inference"}


# --- shared -----------------------------------------------------------------------------------------------------

def number(value) -> str:
    """Samples/s as the product's tables print them."""
    from orchestrator.results.compare import format_value

    return format_value("throughput", value)


def seconds(value) -> str:
    return "n/a" if value is None or math.isnan(value) else f"{value:.1f}"


def times(value) -> str:
    return "n/a" if value is None or math.isnan(value) else f"{value:.1f}x"


def epsilon(value) -> str:
    return "n/a" if value is None or math.isnan(value) else f"{value:.3g}"


def speedup_text(row) -> str:
    """The speed-up and its interval as the product's tables print them: none for a row that is not comparable."""
    from orchestrator.results.compare import format_speedup

    return format_speedup(row)


def pytorch_as(settings: str) -> str:
    """How a row's PyTorch side ran, from its settings: eager, compiled or compiled with CUDA graphs
    (reduce-overhead), in channels_last where set, and its DP-SGD engine where it has one."""
    parsed = json.loads(settings) if settings else {}
    mode = "eager"
    if parsed.get("torch_compile"):
        mode = "compiled" + (f" ({parsed['torch_compile_mode']})" if parsed.get("torch_compile_mode", "default")
                             != "default" else "")
    extras = [name for name in ("channels_last",) if parsed.get(name)] + [parsed.get("dp_engine") or ""]
    return ", ".join([mode, *filter(None, extras)])


def step_lines(log: Path) -> list[str]:
    """The steps' outcomes as scripts/gpu_common.sh logs them ("== NAME: finished ...", "not run", "stopped"), what
    the script concluded from them (a line of its own starting "== "), and where each call began."""
    if not log.is_file():
        return ["(no steps' log)"]
    outcomes = (": finished", ": not run", ": stopped", ": the campaigns run", "a call began")
    return [f"- {line[3:]}" for line in log.read_text().splitlines()
            if line.startswith("== ") and any(word in line for word in outcomes)]


def merged_rows(results: Path):
    """The merged rows of a results folder (collect's), or None where collect wrote none."""
    from orchestrator.results.report import read_merged

    merged = results / "merged.parquet"
    return read_merged(merged) if merged.exists() else None


def table(headers: list[str], lines: list[str]) -> list[str]:
    return ["| " + " | ".join(headers) + " |", "|" + " --- |" * len(headers), *lines]


# --- issue 35: speed --------------------------------------------------------------------------------------------

def rows_table(frame) -> list[str]:
    """One line per comparison row: what it ran, each side's samples/s and compile time, the speed-up."""
    lines = [f"| {USE_CASES.get(row.use_case, row.use_case)} | {row.model} | {row.batch_size} | {row.precision} | "
             f"{pytorch_as(row.settings)} | {number(row.jax_throughput)} | {number(row.torch_throughput)} | "
             f"{speedup_text(row)} | {row.runs_jax_torch} | {seconds(row.jax_compile_time)} / "
             f"{seconds(row.torch_compile_time)} | {row.comparable} |" for _, row in frame.iterrows()]
    return table(["use case", "model", "batch", "precision", "PyTorch as", "JAX samples/s", "PyTorch samples/s",
                  "JAX/PyTorch [95%]", "runs", "compile s JAX / PyTorch", "comparable"], lines)


def beside_published(frame) -> list[str]:
    """Our inference rows at batch 128 in PyTorch eager beside the seed study's numbers for the same model."""
    eager = frame["settings"].map(pytorch_as) == "eager"
    rows = frame[(frame["use_case"] == 5) & (frame["batch_size"] == 128) & eager
                 & frame["model"].isin(list(SEED_H100))]
    lines = []
    for _, row in rows.iterrows():
        seed = SEED_H100[row.model]
        lines.append(f"| {row.model} | {row.precision} | {number(row.jax_throughput)} | {number(seed['jax'])} | "
                     f"{number(row.torch_throughput)} | {number(seed['torch'])} | {speedup_text(row)} | "
                     f"{seed['jax'] / seed['torch']:.2f}x |")
    if not lines:
        lines = ["| (no inference row at batch 128 in PyTorch eager yet) | | | | | | | |"]
    algoperf = "; ".join(f"{model} JAX {s['jax']} s, PyTorch {s['torch']} s"
                         for model, s in ALGOPERF_A100_STEP_S.items())
    return [f"Published: {SEED_SETTING}.", "",
            *table(["model", "precision", "JAX ours", "JAX seed", "PyTorch ours", "PyTorch seed", "ours JAX/PyTorch",
                    "seed"], lines),
            "", f"AlgoPerf, seconds per training step on A100s (their batches, several GPUs): {algoperf}"]


def overhead_lines(probes: list[Probe]) -> list[str]:
    lines = [f"| {label(p.framework, p.mode, p.path)} | {p.model}, {p.batch_size} {p.device} | {p.harness:.3f} / "
             f"{p.bare:.3f} | {p.overhead_percent:+.2f}% | {verdict(p.overhead_percent, GPU_TARGET_PERCENT)} |"
             for p in probes]
    return table(["harness path", "model, batch", "harness / bare loop ms", "harness / bare - 1",
                  f"within {GPU_TARGET_PERCENT:g}%"], lines)


def read_probes(folder: Path) -> tuple[list[Probe], list[str]]:
    """The probes that wrote a result, and a sentence for each that did not."""
    probes, problems = [], []
    for path in sorted(folder.glob("*.out")):
        try:
            probes.append(parse_probe_output(path.read_text()))
        except ValueError as error:
            problems.append(f"{path.name}: {error}")
    return probes, problems


def speed_summary(work: Path) -> tuple[str, int]:
    """The speed summary's text and the count of comparison rows it found."""
    from orchestrator.results.compare import comparison_frame

    rows = merged_rows(work / "results")
    frame = comparison_frame(rows) if rows is not None else None
    probes, problems = read_probes(work / "overhead")
    text = ["# GPU speed (issue 35)", "", "## Steps", "", *step_lines(work / "logs" / "steps.log"), ""]
    if frame is None or frame.empty:
        text += ["No comparison row was measured.", ""]
    else:
        devices = ", ".join(sorted(frame["device_model"].unique()))
        text += [f"## Rows ({devices}; verdicts and methods in results/report)", "", *rows_table(frame), "",
                 "## Beside the published numbers", "", *beside_published(frame), ""]
    text += ["## The harness against a bare loop", "", *overhead_lines(probes), *[f"- {p}" for p in problems], ""]
    return "\n".join(text), 0 if frame is None else len(frame)


# --- issue 36: DP-SGD -------------------------------------------------------------------------------------------

def dp_sgd_table(frame) -> list[str]:
    """One line per DP-SGD row (use_case_frame's): samples/s, the speed-up, each side's cost over its SGD step,
    the vectorisation speed-up and epsilon."""
    rows = frame[frame["use_case"].isin([3, 4])]
    lines = [f"| {row.model} | {row.batch_size} | {pytorch_as(row.settings)} | {number(row.jax_throughput)} | "
             f"{number(row.torch_throughput)} | {speedup_text(row)} | {times(row.jax_sgd_cost)} / "
             f"{times(row.torch_sgd_cost)} | {times(row.jax_vectorization_speedup)} / "
             f"{times(row.torch_vectorization_speedup)} | {epsilon(row.privacy_epsilon)} |"
             for _, row in rows.iterrows()]
    return table(["model", "batch", "PyTorch as", "JAX samples/s", "PyTorch samples/s", "JAX/PyTorch [95%]",
                  "cost over SGD JAX / PyTorch", "vmap over loop JAX / PyTorch", "epsilon"], lines)


def dp_sgd_checks(rows) -> list[str]:
    """What the issue asks of every row: epsilon on every DP-SGD row; no recompilation in a compiled step's timed
    steps (Poisson batches vary in size)."""
    dp = rows[rows["use_case"].isin([3, 4])]
    cells = dp.groupby("cell_id")
    no_epsilon = sorted(cell for cell, block in cells
                        if not (block["metric"] == "privacy_epsilon").any()
                        or block.loc[block["metric"] == "privacy_epsilon", "value"].isna().all())
    recompiled = dp[(dp["metric"] == "recompilations_timed") & (dp["value"] > 0)]
    missing = "yes" if not no_epsilon else "no, missing on " + ", ".join(no_epsilon)
    again = "none" if recompiled.empty else ", ".join(sorted(set(recompiled["cell_id"])))
    return [f"- epsilon on every DP-SGD cell: {missing}", f"- recompilations in timed steps: {again}"]


def largest_batches(rows) -> list[str]:
    found = rows[rows["metric"] == "max_batch_size"]
    return [f"- {row.framework} {row.model}: {row.value:,.0f}" for row in found.itertuples()] or ["- none found"]


def dpsgd_summary(work: Path) -> tuple[str, int]:
    from orchestrator.results.views import use_case_frame

    rows = merged_rows(work / "results")
    frame = use_case_frame(rows) if rows is not None else None
    text = ["# DP-SGD on a GPU (issue 36)", "", "## Steps", "", *step_lines(work / "logs" / "steps.log"), ""]
    for results, how in (("results_jax_compile", ""), ("results_no_autotuning", " without XLA's autotuning")):
        compiled = merged_rows(work / results)
        if compiled is not None:
            seconds_taken = compiled[compiled["metric"] == "compile_time"]["value"].median()
            text += [f"JAX's DP-SGD step of the CIFAR-10 CNN compiled{how} in {seconds_taken:.1f} s.", ""]
    if frame is None or frame.empty:
        text += ["No comparison row was measured.", ""]
    else:
        text += ["## DP-SGD rows", "", *dp_sgd_table(frame), "", PUBLISHED_DP_SGD, "", "## Checks", "",
                 *dp_sgd_checks(rows), ""]
    largest = merged_rows(work / "results_max_batch")
    if largest is not None:
        text += ["## Largest DP-SGD batch", "", *largest_batches(largest), ""]
    return "\n".join(text), 0 if frame is None else len(frame)


SUMMARIES = {"speed": speed_summary, "dpsgd": dpsgd_summary}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("check", choices=list(SUMMARIES), help="which script's work folder")
    parser.add_argument("--work", type=Path, required=True, help="the script's work folder")
    args = parser.parse_args(argv)
    text, rows = SUMMARIES[args.check](args.work)
    (args.work / "summary.md").write_text(text)
    print(text)
    return 0 if rows else 1


if __name__ == "__main__":
    sys.exit(main())
