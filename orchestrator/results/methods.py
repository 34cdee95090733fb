"""A methods paragraph for a paper, written from the merged rows (issue 31): the hardware, the driver and framework
versions, precision, compilation, batch sizes, warm-up and timed steps, trials, how the intervals were computed, and
how many comparisons were reliable or not comparable. `report` puts it in report.md and on the HTML page, ready to
paste; every figure in it is read from the rows, none is written here."""

from __future__ import annotations

import json

from bench_contract.sequential import percent
from bench_contract.spec import FIRST_STAGE, FRAMEWORK_TITLES
from orchestrator.results.baseline import json_field
from bench_contract.tuning import described
from orchestrator.results.compare import COMPARABLE, FRAMEWORKS, node_of, summary_rows
from orchestrator.run.tuning import Tuned
from orchestrator.results.verdict import MAX_INTERVAL, MIN_RUNS, Verdict


def methods_paragraph(df, frame, verdicts: list[Verdict], records: list[tuple[int, Tuned]] = ()) -> str:
    """The paragraph for the merged rows `df`, their comparison `frame` (views.use_case_frame) and its verdicts;
    `records`: the tuning records of its campaigns (orchestrator.run.tuning), where any was tuned."""
    rows = summary_rows(df)
    if rows.empty:
        return ""
    runs = rows.drop_duplicates(["campaign", "cell_id", "trial", "framework"])
    settings = [json.loads(s) for s in runs["settings"].dropna().unique() if s]
    return " ".join(part for part in (
        hardware(runs), software(runs), workload(runs), timing(rows, settings, runs), tuned(records), sampled(rows),
        repeats(runs), intervals(frame), judged(frame, verdicts)) if part)


def tuned(records: list[tuple[int, Tuned]]) -> str:
    """Equal-effort tuning: the search spaces, the budget, the rule, and what won, from the campaigns' records."""
    if not records:
        return ""
    spaces = listed(f"{FRAMEWORK_TITLES[fw]}'s {' × '.join(space)}" for fw, space in
                    {(t.framework, tuple(t.space)): 0 for _, t in records})
    budgets = listed(budget for budget, _ in records)
    won = listed(f"{FRAMEWORK_TITLES[t.framework]} {described(t.chosen)} ({t.model}, batch {t.batch_size}, use case "
                 f"{t.use_case})" for _, t in records)
    dropped = sum(1 for _, t in records for attempt in t.tries if attempt.dropped)
    return (f"Each framework was measured out of the box and tuned with equal effort: {budgets} configurations per "
            f"cell and framework, out of the box among them and the rest drawn by a seeded generator without repeats "
            f"from its search space of settings that leave the mathematics unchanged ({spaces}), each measured once "
            f"with the cell's stopping rule; a configuration whose losses or outputs differed from out of the box's "
            f"beyond the precision's parity bound, or that failed, was dropped ({dropped} "
            f"{plural(dropped, 'configuration')}), and the fastest kept ran paired against the other framework's, "
            f"beside out of the box against out of the box. Chosen: {won}.")


def listed(values) -> str:
    """"a", "a and b", "a, b and c", sorted, each once."""
    items = sorted({str(v) for v in values if str(v) not in ("", "nan", "None")})
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + f" and {items[-1]}" if items else ""


def hardware(runs) -> str:
    devices = []
    for (kind, model), block in runs.groupby(["device_kind", "device_model"]):
        if kind == "cpu":
            cpus = listed(block["bound_cpus"].dropna().astype(int))
            devices.append(f"{model} CPUs ({cpus} bound to each process)" if cpus else f"{model} CPUs")
        else:
            drivers = listed(json_field(d).get("driver_version", "") for d in block["device_details"])
            devices.append(f"{model} GPUs" + (f" (driver {drivers})" if drivers else ""))
    nodes = len(set(node_of(runs)))
    return f"All runs used {listed(devices)}, on {nodes} node{'s' if nodes != 1 else ''}."


# The native libraries the methods name, by their key in library_versions (what each framework reports loading).
RUNTIMES = {"cuda": "CUDA", "cudnn": "cuDNN"}
CONTAINER = "container: "  # environment_kind of a run in a container image (plan.render's site.kind)


def software(runs) -> str:
    """The harness and its commit, each framework's version, the native libraries it loaded and the container image
    it ran in, and Python."""
    sides = [FRAMEWORK_TITLES[fw] + " " + listed(block["framework_version"]) + native(block)
             for fw in FRAMEWORKS if len(block := runs[runs["framework"] == fw])]
    python = listed(runs["python_version"]) if "python_version" in runs else ""
    commits = listed(runs["git_commit"]) if "git_commit" in runs else ""
    return (f"Software: {listed(sides)}" + (f", Python {python}" if python else "") + "; measured with jaxtorch-bench"
            + (f" at commit {commits}" if commits else "") + ".")


def native(block) -> str:
    """ " (CUDA 12.8, cuDNN 9.7; container nvcr.io/nvidia/jax:25.04-py3)": what a side's runs loaded and ran in, where
    known."""
    loaded = [json_field(v) for v in block["library_versions"]] if "library_versions" in block else []
    words = [f"{name} {versions}" for key, name in RUNTIMES.items()
             if (versions := listed(v.get(key, "") for v in loaded if not str(v.get(key, "")).startswith("not ")))]
    kinds = block["environment_kind"].dropna().astype(str) if "environment_kind" in block else []
    images = listed(kind.removeprefix(CONTAINER) for kind in kinds if kind.startswith(CONTAINER))
    parts = [", ".join(words)] if words else []
    parts += [f"container {images}"] if images else []
    return f" ({'; '.join(parts)})" if parts else ""


def workload(runs) -> str:
    variants = runs["model_variant"].fillna("") if "model_variant" in runs else [""] * len(runs)
    cells = listed(f"{b} {m}" + (f" ({v})" if v not in ("", "full") else "")
                   for b, m, v in zip(runs["benchmark"], runs["model"], variants))
    cases, batches = runs["use_case"].astype(int), runs["batch_size"].astype(int)
    return (f"Workloads: {cells}; {plural(cases.nunique(), 'use case')} {listed(cases)}; "
            f"{plural(batches.nunique(), 'batch size')} {listed(batches)}; precision {listed(runs['precision'])}, one "
            "policy per precision in both frameworks (checked per run by a census of the dtype each class of "
            "operation computed in).")


def plural(count: int, noun: str) -> str:
    """The noun for `count` of it, without the number: "batch size", "batch sizes"."""
    return noun if count == 1 else f"{noun}s"


def execution_modes(runs, settings: list[dict]) -> str:
    """How PyTorch's runs executed, as they recorded it (framework_options' mode: a tuned run's settings keep the
    cell's axes); from the settings for rows written before it was recorded."""
    if "framework_options" in runs:
        recorded = [json.loads(text).get("mode", "") for text in
                    runs.loc[runs["framework"] == "torch", "framework_options"].dropna().unique() if text]
        if any(recorded):
            return listed(recorded)
    return listed("torch.compile" + (f" ({s.get('torch_compile_mode')})" if s.get("torch_compile_mode") else "")
                  if s.get("torch_compile") else "eager" for s in settings)


def timing(rows, settings: list[dict], runs=None) -> str:
    """How each framework ran, from the settings; how many steps each run warmed up for and timed, from what the
    runs recorded (`warmup_steps`, `timed_steps`): the spec's timed_steps is a minimum, and in training it sets only
    the pipelined steps, so a run may time far fewer or more steps than it says."""
    if not settings:
        return ""
    modes = execution_modes(runs if runs is not None else rows.iloc[:0], settings)
    steps = [f"warmed up for {counted(rows, 'warmup_steps')} steps" if counted(rows, "warmup_steps") else "",
             f"timed {counted(rows, 'timed_steps')} steps" if counted(rows, "timed_steps") else ""]
    said = " then ".join(step for step in steps if step)
    return (f"JAX ran jit-compiled (XLA) and PyTorch {modes}; compilation was timed apart from the steps."
            + (f" Each run {said}, each step ended by a device synchronisation." if said else ""))


def counted(rows, metric: str) -> str:
    """The runs' recorded counts of `metric`: "3", or "from 3 to 395" where runs differ; "" where none recorded it."""
    values = rows.loc[rows["metric"] == metric, "value"].dropna().astype(int)
    if values.empty:
        return ""
    fewest, most = int(values.min()), int(values.max())
    return f"{most:,}" if fewest == most else f"from {fewest:,} to {most:,}"


def sampled(rows) -> str:
    """Where runs drew Poisson batches (they recorded timed_batch_size_mean): what throughput and FLOPs count, and
    each framework's padding as its runs recorded it ("JAX's 65%", "from 30% to 65%")."""
    if not (rows["metric"] == "timed_batch_size_mean").any():
        return ""
    padded = []
    for framework in FRAMEWORKS:
        values = rows.loc[(rows["metric"] == "padding_fraction") & (rows["framework"] == framework), "value"].dropna()
        if len(values):
            low, high = f"{values.min():.0%}", f"{values.max():.0%}"
            padded.append(f"{FRAMEWORK_TITLES[framework]}'s " + (high if low == high else f"from {low} to {high}"))
    text = ("Under Poisson sampling, throughput and FLOPs count the examples the timed steps drew, not the nominal "
            "batch size")
    if padded:
        text += (f"; batches padded to one compiled shape also computed padding ({listed(padded)} of the examples "
                 "computed), counted as no work")
    return text + "."


def repeats(runs) -> str:
    per_cell = runs.groupby(["benchmark", "use_case", "model", "batch_size", "precision", "settings",
                             "framework"]).size()
    paired = "pair_order" in runs and (runs["pair_order"].fillna("") != "").any()
    fewest, most = int(per_cell.min()), int(per_cell.max())
    times = f"{most} {plural(most, 'time')}" if fewest == most else f"from {fewest} to {most} times"
    return (f"Each cell ran {times} per framework, each run in a fresh process"
            + (", JAX and PyTorch alternating within a job (paired)" if paired else "") + ".")


def intervals(frame) -> str:
    return ("A speed-up is the ratio of the two frameworks' geometric mean throughputs (the geometric mean of the "
            "pairs' ratios where runs were paired), the centre of its 95% interval on the log scale: Student's t "
            "interval of the mean of the pairs' log ratios, or Welch's of the difference of the two sides' mean log "
            "throughputs (its degrees of freedom rounded down), with each node's mean as one value where runs ran on "
            f"several nodes, given where each framework has at least two runs.{sequential_words(frame)} A speed-up is called reliable with at least {MIN_RUNS} "
            f"runs a side, an interval within {MAX_INTERVAL:.0%} of it, a run-to-run and step-to-step spread (CV) "
            "within 10%, and no implausible pattern across batch sizes.") if len(frame) else ""


def sequential_words(frame) -> str:
    """What --trials auto did, where a row ran under it (compare's target_interval)."""
    if "target_interval" not in frame or not frame["target_interval"].notna().any():
        return ""
    targets = listed(percent(t) for t in frame["target_interval"].dropna())
    return (f" Where trials ran until the interval was narrow (target {targets}), each JAX/PyTorch pair ran "
            f"{FIRST_STAGE} trials, then as many as Stein's two-stage rule required from their spread (C. Stein, "
            "Ann. Math. Statist. 16, 1945); such a speed-up is the geometric mean of its pairs' ratios, with Stein's "
            "interval.")


def judged(frame, verdicts: list[Verdict]) -> str:
    if not len(frame):
        return ""
    apart = frame[frame["comparable"] != COMPARABLE]
    reliable = sum(v.reliable for v in verdicts)
    text = f"Of {len(frame)} {plural(len(frame), 'comparison')}, {reliable} {were(reliable)} reliable"
    if not len(apart):
        return f"{text}, and {'it was' if len(frame) == 1 else 'all were'} comparable."
    reasons = listed(r for reason in apart["comparable"] for r in str(reason).split("; "))
    return f"{text}; {len(apart)} {were(len(apart))} not comparable, so given no speed-up ({reasons})."


def were(count: int) -> str:
    return "was" if count == 1 else "were"
