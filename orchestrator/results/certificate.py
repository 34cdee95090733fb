"""The comparability certificate of each comparison row: whether its JAX and PyTorch sides measured like things,
judged from what each run recorded it did, not from what its spec asked for.

A row is comparable ("yes") when every check passes; otherwise its `comparable` column lists the reasons, and
no table shows its speed-up (compare.format_speedup). The checks:
- software: the runs pooled on one side share one framework version and one kind of environment (locked,
  site interpreter, ...): JAX 0.4.30 from one campaign and JAX 0.10.2 from another are not trials of one cell;
- tuning: the runs of one side share their framework's own tuning knobs (a spec's xla_flags and tuned: JAX's XLA_FLAGS,
  and the configuration `--tune` chose, bench_contract.tuning). Such a knob belongs to one side, so it never splits a
  pair, but runs made with different values are not pooled;
- equal effort: the two sides ran at one tuning level with one budget, as each run recorded it (framework_options'
  `tuning`): a tuned side is never set against an untuned one, nor one tuned with a bigger budget than the other;
- precision as run: the two sides' precision censuses (bench_contract.run.census: the dtype each class of operation
  computed in during one step, read from the framework) are equal, else the classes that differ are named
  ("normalisation bfloat16 in JAX, float32 in PyTorch");
- compilation: no side recompiled inside its timed steps (`recompilations_timed`, and the per-sample timings'
  own counts): a timed step that compiled timed the compiler;
- float32 as run: in an fp32 row, each run's own float32 matmul check (bench_contract.run.precision's probe on the
  cell's device after its precision setup) shows float32 arithmetic, not TF32 or lower: a variable such as NGC's
  TORCH_ALLOW_TF32_CUBLAS_OVERRIDE turns TF32 on behind every setting, on one side only;
- device: the GPU's model is known (a GPU neither NVML nor the framework named may be an A100 on one side and an
  H100 on the other, and pools them);
- harness and data: every run of the row, on both sides, ran one commit of this harness and saw the same data (its
  splits' sizes and digest, Dataset.fingerprint): two data folders of different size, or a harness changed between
  two campaigns, are not trials of one cell;
- padding: the two sides computed alike per example drawn. A Poisson batch padded to one compiled shape (JAX, and
  compiled PyTorch) computes 1/(1 - p) examples per drawn one, p its padding fraction; a throughput counts the
  drawn examples alone, so a side that computes r times the other's per drawn example moves the speed-up by up
  to r where time follows the examples computed. Above the error a quoted speed-up may carry (MAX_INTERVAL, the
  verdict's) the row is not comparable, naming both fractions; within it, a note says them (padding_note).
"""

from __future__ import annotations

import math

from bench_contract.measure.device import UNKNOWN_GPU
from bench_contract.run import census
from bench_contract.run.precision import MATMUL_ERROR, REDUCED_MATMUL_BOUND
from bench_contract.spec import FRAMEWORK_TITLES
from bench_contract.tuning import OUT_OF_THE_BOX, TUNING_WORDS, described

COMPARABLE = "yes"
# The columns whose value must be one per side (absent in a table written before they existed: then the check has
# nothing to tell apart and passes).
SOFTWARE = ("framework_version", "environment_kind")
# How each run executed (runner.framework_options), as JSON: where a tuned run records its tuning level, budget and
# configuration. Two columns are derived from it (with_recorded_tuning): the configuration, and the level with the
# budget, in words.
OPTIONS = "framework_options"
TUNED_SETTINGS = "tuned_settings"
TUNING_RECORD = "tuning_record"
# Per framework, its own tuning knobs as the rows record them (column, words): only JAX reads XLA_FLAGS; each side
# its tuned configuration.
TUNING = {"jax": {"xla_flags": "XLA_FLAGS", TUNING_RECORD: "tuning", TUNED_SETTINGS: "tuned settings"},
          "torch": {TUNING_RECORD: "tuning", TUNED_SETTINGS: "tuned settings"}}
NOT_SET = "not set"  # bench_contract.measure.device's value of a variable that was not set
CENSUS = "precision_census"
# The columns whose value must be one across the whole row, both sides, in words ("" or absent in rows written
# before they were recorded: nothing to tell apart).
ONE_PER_ROW = {"git_commit": "harness commits", "data_fingerprint": "data"}
# What a reader of the merged dataset must read, besides the row key, for the certificate.
CERTIFIED_COLUMNS = (*SOFTWARE, "xla_flags", OPTIONS, CENSUS, *ONE_PER_ROW)
# A count of compilations inside timed steps: the training or inference step's, and each per-sample timing's.
RECOMPILATIONS = ("recompilations_timed", "per_sample_grads_vectorized_recompilations_timed",
                  "per_sample_grads_loop_recompilations_timed")
# The interval's half-width, relative to the speed-up, that a number one quotes may have: 1.30x [1.20, 1.40] is
# within 8%; 1.30x [1.00, 1.80] is not (the verdict's rule). Padding that could move a speed-up by more makes its
# row not comparable (padding_reasons).
MAX_INTERVAL = 0.10
# The share of a run's computed examples that was padding (bench_contract.run.sampling.SamplingRecord records it
# wherever a run padded its batches; a run without it computed its drawn examples alone).
PADDING = "padding_fraction"


def certificates(df, row_key: list[str], run_key: list[str]) -> dict[tuple, str]:
    """Per comparison row (the values of row_key), "yes" or the reasons it is not comparable, "; "-joined.
    `df` holds every run's summary rows with the row_key columns (compare.with_row_key); run_key: the columns
    that tell one run of a side from another."""
    df = with_recorded_tuning(df)
    reasons: dict[tuple, list[str]] = {}
    efforts: dict[tuple, dict[str, set[str]]] = {}  # row -> side -> the tuning level and budget its runs recorded
    censuses: dict[tuple, dict[str, str]] = {}  # row -> side -> its runs' one census text
    paddings: dict[tuple, dict[str, float]] = {}  # row -> side -> its runs' padding fraction (the median)
    shared: dict[tuple, dict[str, dict[str, set]]] = {}  # row -> column of ONE_PER_ROW -> side -> its values
    model_at = row_key.index("device_model")
    for key, side in df.groupby([*row_key, "framework"], dropna=False, sort=False):
        row, framework = tuple(key[:-1]), key[-1]
        runs = side.drop_duplicates([c for c in run_key if c in side])
        found = reasons.setdefault(row, unknown_device(str(row[model_at])))
        found += side_reasons(side, runs, framework)
        efforts.setdefault(row, {})[framework] = set(runs[TUNING_RECORD].fillna("")) if TUNING_RECORD in runs else {""}
        texts = set(runs[CENSUS].fillna("")) if CENSUS in runs else {""}
        if len(texts) == 1:
            censuses.setdefault(row, {})[framework] = texts.pop()
        paddings.setdefault(row, {})[framework] = padding_of(side.loc[side["metric"] == PADDING, "value"].median())
        for column in (c for c in ONE_PER_ROW if c in runs):
            recorded = {str(v) for v in runs[column].dropna() if str(v)}
            shared.setdefault(row, {}).setdefault(column, {})[framework] = recorded
    for row, found in reasons.items():  # between the sides; censuses and shared lack a row none of whose sides had one
        found += (effort_reasons(efforts[row]) + census_reasons(censuses.get(row, {}))
                  + padding_reasons(paddings[row]) + one_per_row_reasons(shared.get(row, {})))
    return {row: "; ".join(found) or COMPARABLE for row, found in reasons.items()}


def with_recorded_tuning(df):
    """`df` with TUNED_SETTINGS (the configuration a tuned run recorded, as sorted JSON; "" out of the box) and
    TUNING_RECORD ("tuned, 8 configurations"; "" out of the box) from each run's framework_options; as it is where
    the column is absent (rows from before it) or the derived columns are there already."""
    import json

    if OPTIONS not in df or TUNING_RECORD in df:
        return df
    parsed = {text: json.loads(text) if text else {} for text in df[OPTIONS].fillna("").unique()}

    def record(text: str) -> str:
        tuning = parsed[text].get("tuning")
        return f"{TUNING_WORDS.get(tuning['level'], tuning['level'])}, {tuning['budget']} configurations" if tuning \
            else ""

    options = df[OPTIONS].fillna("")
    return df.assign(**{
        TUNED_SETTINGS: options.map(lambda text: described(parsed[text]["tuned"]) if "tuning" in parsed[text] else ""),
        TUNING_RECORD: options.map(record),
    })


def effort_reasons(sides: dict[str, set[str]]) -> list[str]:
    """A reason when the two sides' runs did not all record one tuning level and budget: a tuned side against an
    untuned one, or tuned with different budgets ("JAX tuned, 8 configurations; PyTorch out of the box")."""
    recorded = set().union(*sides.values())
    if len(sides) < 2 or len(recorded) < 2:
        return []
    said = "; ".join(f"{FRAMEWORK_TITLES[side]} {' | '.join(sorted(v or TUNING_WORDS[OUT_OF_THE_BOX] for v in sides[side]))}"
                     for side in in_framework_order(sides))
    levels = {value.partition(",")[0] for value in recorded}
    if len(levels) > 1:
        return [f"a tuned side is never set against an untuned one ({said})"]
    return [f"the sides were tuned with different budgets ({said}): equal effort needs one budget"]


def in_framework_order(sides) -> list[str]:
    """The frameworks among `sides`, JAX first: the order FRAMEWORK_TITLES names them in, as every table does."""
    return [side for side in FRAMEWORK_TITLES if side in sides]


def census_reasons(sides: dict[str, str]) -> list[str]:
    """The classes in which two sides' precision censuses differ; that one side took none where the other did (a
    row from before the census, on both sides, has nothing to compare)."""
    if len(sides) < 2 or not any(sides.values()):
        return []
    sides = {side: sides[side] for side in in_framework_order(sides)}
    missing = [FRAMEWORK_TITLES[side] for side, text in sides.items() if not text]
    if missing:
        return [f"no precision census from {' or '.join(missing)}"]
    return census.differences({side: census.parse(text) for side, text in sides.items()}, FRAMEWORK_TITLES)


def one_per_row_reasons(columns: dict[str, dict[str, set]]) -> list[str]:
    """A reason per column of ONE_PER_ROW of which the row's runs, on both sides together, recorded more than one
    value; each side's values named, JAX first."""
    reasons = []
    for column, sides in columns.items():
        if len(set().union(*sides.values())) > 1:
            said = "; ".join(f"{FRAMEWORK_TITLES[side]} {' | '.join(sorted(sides[side]))}"
                             for side in in_framework_order(sides) if sides[side])
            reasons.append(f"runs of different {ONE_PER_ROW[column]} ({said})")
    return reasons


def padding_of(fraction) -> float:
    """A side's padding fraction; 0 where its runs recorded none (they computed the examples they drew)."""
    return 0.0 if fraction is None or math.isnan(fraction) else float(fraction)


def padding_reasons(paddings: dict[str, float]) -> list[str]:
    """A reason when one side computed more examples per drawn one than the other by more than a quoted speed-up's
    error may be: "JAX computed 2.86 times the examples per drawn one that PyTorch did (padding JAX 65%, PyTorch
    none), ...". `paddings`: each side's padding fraction (padding_of)."""
    if len(paddings) < 2:
        return []
    drawn_share = {side: 1 - fraction for side, fraction in paddings.items()}  # drawn examples per computed one
    heavier, lighter = min(drawn_share, key=drawn_share.get), max(drawn_share, key=drawn_share.get)
    ratio = drawn_share[lighter] / drawn_share[heavier] if drawn_share[heavier] > 0 else math.inf
    if ratio - 1 <= MAX_INTERVAL:
        return []
    return [f"{FRAMEWORK_TITLES[heavier]} computed {ratio:.2f} times the examples per drawn one that "
            f"{FRAMEWORK_TITLES[lighter]} did "
            f"(padding {padding_words(paddings)}), more than the {MAX_INTERVAL:.0%} a quoted speed-up may be off by: "
            "compiled PyTorch pads alike (--torch-modes compiled)"]


def padding_words(paddings: dict[str, float]) -> str:
    """"JAX 65%, PyTorch none": each side's share of its computed examples that was padding, JAX first."""
    return ", ".join(f"{FRAMEWORK_TITLES[side]} {paddings[side]:.0%}" if paddings[side] > 0
                     else f"{FRAMEWORK_TITLES[side]} none" for side in in_framework_order(paddings))


def padding_note(paddings: dict[str, float]) -> str:
    """What a row whose sides padded says beside it where padding_reasons found nothing to refuse: each side's
    padding and what the numbers count; "" where neither padded."""
    if not any(fraction > 0 for fraction in paddings.values()):
        return ""
    return (f"padding of the computed examples {padding_words(paddings)}; throughput and MFU count the drawn "
            "examples alone")


def side_reasons(side, runs, framework: str) -> list[str]:
    """What makes one side's runs unfit to stand for it: `side`, its summary rows; `runs`, a row per run. Also a
    baseline's test of each framework against its own past (orchestrator.results.baseline)."""
    return pooled_differently(runs, framework) + recompiled(side, framework) + reduced_float32(side, framework)


def unknown_device(model: str) -> list[str]:
    """A reason when the row's GPU model is unknown."""
    return [f"the GPU model is unknown ({model}): runs on different GPUs may be pooled"] if model.startswith(
        UNKNOWN_GPU) else []


def pooled_differently(runs, framework: str) -> list[str]:
    """A reason per column of SOFTWARE and TUNING in which the side's runs (a row each) differ."""
    title = FRAMEWORK_TITLES[framework]
    reasons = []
    runs = with_recorded_tuning(runs)
    software = [c for c in SOFTWARE if c in runs]
    if software:
        kinds = sorted({" ".join(str(v) for v in values) for values in runs[software].itertuples(index=False)})
        if len(kinds) > 1:
            reasons.append(f"{title} runs of {len(kinds)} versions pooled ({', '.join(kinds)})")
    if CENSUS in runs and runs[CENSUS].nunique(dropna=False) > 1:
        reasons.append(f"{title} runs of {runs[CENSUS].nunique(dropna=False)} precision censuses pooled")
    for column, words in TUNING.get(framework, {}).items():
        if column in runs and runs[column].nunique(dropna=False) > 1:
            values = ", ".join(repr(v) for v in sorted(runs[column].fillna("").astype(str).unique()))
            reasons.append(f"{title} runs with different {words} pooled ({values})")
    return reasons


def recompiled(side, framework: str) -> list[str]:
    """A reason when any run of the side recompiled inside its timed steps (the most any run did)."""
    counts = side.loc[side["metric"].isin(RECOMPILATIONS), "value"].dropna()
    most = counts.max() if len(counts) else 0
    if most > 0:
        return [f"{FRAMEWORK_TITLES[framework]} recompiled in its timed steps (up to {most:.0f} "
                "times in a run)"]
    return []


def reduced_float32(side, framework: str) -> list[str]:
    """A reason when a run of an fp32 side multiplied float32 matrices in reduced precision, by its own check."""
    if "precision" not in side or set(side["precision"].dropna()) != {"fp32"}:
        return []
    errors = side.loc[side["metric"] == MATMUL_ERROR, "value"].dropna()
    if len(errors) and errors.max() > REDUCED_MATMUL_BOUND:
        return [f"{FRAMEWORK_TITLES[framework]}'s float32 matmuls ran in reduced precision (TF32 or lower) in an fp32 "
                f"row: its own check's error {errors.max():.1e} is above {REDUCED_MATMUL_BOUND:.1e}"]
    return []


def tuning_notes(df, row_key: list[str]) -> dict[tuple, str]:
    """Per comparison row whose runs set one, each framework's own tuning as run ("JAX XLA_FLAGS
    --xla_cpu_enable_fast_math=false"): shown beside the row, since it is no reason to split the pair."""
    notes: dict[tuple, list[str]] = {}
    df = with_recorded_tuning(df)
    for framework, knobs in TUNING.items():
        side = df[df["framework"] == framework]
        for column, words in knobs.items():
            if column not in side:
                continue
            for key, values in side.groupby(row_key, dropna=False, sort=False)[column]:
                used = sorted(v for v in values.dropna().astype(str).unique() if v not in ("", NOT_SET))
                if used:
                    title = FRAMEWORK_TITLES[framework]
                    notes.setdefault(tuple(key), []).append(f"{title} {words} {' | '.join(used)}")
    return {row: "; ".join(found) for row, found in notes.items()}
