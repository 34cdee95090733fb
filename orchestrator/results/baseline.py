"""Baselines: the summary of some campaigns kept under a name, and later campaigns compared against it, ReFrame-style.

A baseline holds, per comparison row (device kind and model, benchmark, use case, model, batch size, precision,
settings) and framework: the median throughput over its runs, a 95% bootstrap interval of that median, the number
of runs, and the versions the runs used (framework, libraries, CUDA, driver, XLA_FLAGS). It is a JSON file in
`<results-dir>/baselines/NAME.json`, small enough to keep in git or copy between clusters.

A cell is judged by the 95% bootstrap interval of its change (campaign median over baseline median, minus one;
the runs of both sides resampled, which needs the baseline's run values and their nodes, kept in each entry; runs
on several nodes are resampled over their nodes first, as the speed-up's interval is: orchestrator.results.intervals,
so that ten runs on one node and one on another are not eleven independent runs): a regression only
where the whole interval lies below minus the tolerance, an improvement where it lies above the tolerance, within
tolerance where it lies inside both, and inconclusive where it straddles either edge, or where a side has a single
run, so no interval, and its change passes the tolerance (issue 31: a noisy unchanged pair is never flagged). A
flagged cell names the versions that changed between the baseline and the campaign, which is where a regression
usually comes from.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from bench_contract.atomic import publish
from orchestrator.errors import OrchestratorError, UsageError
from orchestrator.results.certificate import side_reasons, unknown_device
from orchestrator.results.compare import CELL_RUN, ROW_KEY, differing_settings, run_values, with_row_key
from orchestrator.results.intervals import BOOTSTRAP_SAMPLES, one_node, per_draw, picks
from orchestrator.results.views import summary_frame
from orchestrator.suggest import command
from orchestrator.tables import format_table

FOLDER = "baselines"
METRIC = "throughput"  # higher is better; the one figure every use case records per run
VERSION_COLUMNS = ["framework_version", "library_versions", "xla_flags", "device_details"]
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


@dataclass(frozen=True)
class Verdict:
    key: dict  # the comparison row's key and the framework
    baseline: dict | None  # the baseline's entry; None for a cell the baseline does not hold
    median: float | None  # this campaign's median; None for a cell it does not hold
    interval: tuple[float, float] | None
    runs: int
    change: float | None  # median / baseline median - 1
    flag: str  # "regression", "improvement", "within tolerance", "inconclusive", "new", "missing", "not comparable"
    changed_versions: list[str]
    campaign: str = ""  # the campaign judged; "" for a baseline cell that no campaign ran
    reasons: str = ""  # why the campaign's runs of the cell cannot be judged (flag "not comparable")
    change_interval: tuple[float, float] | None = None  # the change's 95% interval; None with a single run a side


def path_of(results_dir: Path, name: str) -> Path:
    if not NAME.fullmatch(name):
        raise UsageError(f"baseline name {name!r} may hold only letters, digits, '.', '_' and '-'")
    return results_dir / FOLDER / f"{name}.json"


def median_interval(values: np.ndarray, seed: int = 0) -> tuple[float, float] | None:
    """95% percentile bootstrap interval of the median; None for a single run (no spread to resample)."""
    if len(values) < 2:
        return None
    rng = np.random.default_rng(seed)
    medians = np.median(rng.choice(values, size=(BOOTSTRAP_SAMPLES, len(values)), replace=True), axis=1)
    low, high = np.percentile(medians, [2.5, 97.5])
    return float(low), float(high)


def versions_of(rows) -> dict[str, str]:
    """The versions a group of runs used, flattened (the most common value of each, should runs differ)."""
    found: dict[str, list[str]] = {}
    for _, row in rows.iterrows():
        entries = {"framework": row.get("framework_version"), "XLA_FLAGS": row.get("xla_flags")}
        entries.update(json_field(row.get("library_versions")))
        details = json_field(row.get("device_details"))
        entries.update({k: details.get(k) for k in ("driver_version", "cuda_driver_version") if k in details})
        for name, value in entries.items():
            if value not in (None, ""):
                found.setdefault(name, []).append(str(value))
    return {name: max(set(values), key=values.count) for name, values in sorted(found.items())}


def json_field(text) -> dict:
    try:
        value = json.loads(text) if isinstance(text, str) and text else {}
    except json.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


def summarize(df) -> list[dict]:
    """One entry per comparison row and framework: median throughput, its interval, runs and versions."""
    df = with_row_key(df)
    throughput = run_values(df, METRIC)
    if throughput.empty:
        return []
    key_columns = [*ROW_KEY, "framework"]
    entries = []
    for key, runs in throughput.groupby(level=list(range(len(key_columns))), dropna=False):
        runs = runs.dropna().sort_values()
        values, nodes = runs.to_numpy(dtype=float), [str(n) for n in runs.index.get_level_values("node")]
        if not len(values):
            continue
        key = dict(zip(key_columns, (plain(k) for k in key)))
        rows = df[np.logical_and.reduce([df[c].astype(str) == str(v) for c, v in key.items()])]
        interval = median_interval(values)
        runs = rows.drop_duplicates([c for c in CELL_RUN if c in rows])
        reasons = unknown_device(str(key["device_model"])) + side_reasons(rows, runs, key["framework"])
        entries.append({"key": key, "median": float(np.median(values)), "interval": interval, "runs": len(values),
                        "values": [float(v) for v in values], "nodes": nodes,  # each run's value and node
                        "campaigns": sorted(set(rows["campaign"].dropna().astype(str))),
                        "versions": versions_of(rows.drop_duplicates("cell_id" if "cell_id" in rows else None)),
                        "not_comparable": "; ".join(reasons)})
    return entries


def plain(value):
    """A key value JSON can hold and compare: numpy integers become ints, NaN (a missing column) becomes ""."""
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, float) and np.isnan(value):
        return ""
    return value


def read_rows(merged: Path, campaigns: tuple[str, ...] = ()):
    """The summary rows of the merged dataset, with the version columns, of the given campaigns (all if none)."""
    if not merged.exists():
        raise UsageError(f"{merged} does not exist: run `{command('collect')}` first")
    df = summary_frame(merged, VERSION_COLUMNS)
    if campaigns:
        unknown = sorted(set(campaigns) - set(df["campaign"].astype(str)))
        if unknown:
            raise UsageError(f"no results of campaign {', '.join(unknown)} in {merged}")
        df = df[df["campaign"].isin(campaigns)]
    return df


def save(results_dir: Path, merged: Path, name: str, campaigns: tuple[str, ...] = ()) -> tuple[Path, int]:
    """Write the baseline NAME from the merged results; return its path and how many entries it holds."""
    path = path_of(results_dir, name)
    entries = summarize(read_rows(merged, campaigns))
    if not entries:
        raise OrchestratorError(f"no throughput in {merged}{' for ' + ', '.join(campaigns) if campaigns else ''}: "
                                "nothing to keep as a baseline")
    document = {"name": name, "metric": METRIC, "campaigns": sorted({c for e in entries for c in e["campaigns"]}),
                "entries": entries}
    publish(path, lambda tmp: tmp.write_text(json.dumps(document, indent=1, sort_keys=True) + "\n"))
    return path, len(entries)


def load(results_dir: Path, name: str) -> dict:
    path = path_of(results_dir, name)
    if not path.is_file():
        saved = sorted(p.stem for p in (results_dir / FOLDER).glob("*.json"))
        raise UsageError(f"no baseline {name!r} in {results_dir / FOLDER} "
                         f"({'there are: ' + ', '.join(saved) if saved else 'save one with `baseline save NAME`'})")
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise OrchestratorError(f"baseline {path} is not valid JSON ({exc}); save it again") from None


def judge(baseline: dict, current: list[dict], tolerance: float) -> list[Verdict]:
    """Each cell of the baseline and of the campaign, with its flag (see the module's docstring)."""
    before = {frozen(e["key"]): e for e in baseline["entries"]}
    now = {frozen(e["key"]): e for e in current}
    verdicts = []
    for key in sorted(before.keys() | now.keys(), key=str):
        old, new = before.get(key), now.get(key)
        if new is None:
            verdicts.append(Verdict(dict(key), old, None, None, 0, None, "missing", []))
            continue
        if new.get("not_comparable"):  # its runs cannot stand for the cell (certificate): shown apart, not judged
            verdicts.append(Verdict(dict(key), old, new["median"], tuple_or_none(new["interval"]), new["runs"], None,
                                    "not comparable", [], reasons=new["not_comparable"]))
            continue
        if old is None:
            verdicts.append(Verdict(dict(key), None, new["median"], tuple_or_none(new["interval"]), new["runs"],
                                    None, "new", []))
            continue
        change = new["median"] / old["median"] - 1.0
        interval = change_interval(old.get("values", []), new.get("values", []),
                                   before_nodes=old.get("nodes"), after_nodes=new.get("nodes"))
        flag = flag_of(change, interval, tolerance)
        changed = changed_versions(old["versions"], new["versions"]) if flag in ("regression", "improvement") else []
        verdicts.append(Verdict(dict(key), old, new["median"], tuple_or_none(new["interval"]), new["runs"], change,
                                flag, changed, change_interval=interval))
    return verdicts


def change_interval(before: list[float], after: list[float], seed: int = 0, before_nodes: list[str] | None = None,
                    after_nodes: list[str] | None = None) -> tuple[float, float] | None:
    """95% percentile bootstrap interval of median(after) / median(before) - 1, each side's runs resampled on its
    own, over their nodes first where they ran on several (a side without nodes, as a baseline saved before they
    were kept, is one node); None where a side has fewer than two runs (a baseline saved before it kept its runs'
    values has none)."""
    if len(before) < 2 or len(after) < 2:
        return None
    rng = np.random.default_rng(seed)
    old, new = (per_draw(np.median, np.asarray(values, dtype=float),
                         picks(np.asarray(nodes) if nodes else one_node(len(values)), rng))
                for values, nodes in ((before, before_nodes), (after, after_nodes)))
    low, high = np.percentile(new / old - 1.0, [2.5, 97.5])
    return float(low), float(high)


def flag_of(change: float, interval: tuple[float, float] | None, tolerance: float) -> str:
    """The flag of a change and its interval against the tolerance (the module's docstring)."""
    if interval is None:  # a single run on a side: nothing to tell the change from noise with
        return "within tolerance" if abs(change) <= tolerance else "inconclusive"
    low, high = interval
    if high < -tolerance:
        return "regression"
    if low > tolerance:
        return "improvement"
    if -tolerance <= low and high <= tolerance:
        return "within tolerance"
    return "inconclusive"  # the interval straddles an edge of the tolerance: more runs would tell


def changed_versions(old: dict[str, str], new: dict[str, str]) -> list[str]:
    return [f"{name} {old.get(name, 'absent')} -> {new.get(name, 'absent')}"
            for name in sorted(old.keys() | new.keys()) if old.get(name) != new.get(name)]


def frozen(key: dict) -> tuple:
    return tuple(sorted((k, str(v)) for k, v in key.items()))


def tuple_or_none(interval) -> tuple[float, float] | None:
    return tuple(interval) if interval else None


def parse_tolerance(text: str) -> float:
    """'5%' or '0.05' -> 0.05."""
    try:
        value = float(text[:-1]) / 100 if text.endswith("%") else float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value < 10:
        raise UsageError(f"--tolerance {text!r} is not a fraction or a percentage such as 5%")
    return value


FLAG_WORDS = {"regression": "REGRESSION", "improvement": "improvement"}


def verdict_table(verdicts: list[Verdict]) -> str:
    """One line per cell and framework: baseline and current median, the change, the flag and what changed."""
    return format_table(*verdict_rows(verdicts))


VERDICT_NAME_COLUMNS = 4  # campaign, device, cell, framework: the columns that name a line (left-aligned)


def verdict_rows(verdicts: list[Verdict]) -> tuple[list[str], list[list[str]]]:
    """The headers and lines of verdict_table, for the terminal (`compare`) and the report (`report --baseline`)."""
    import pandas as pd

    headers = ["campaign", "device", "cell", "framework", "baseline", "now", "change", "flag", "versions changed"]
    # Two rows of one cell measured under different settings say how they differ ("torch.compile", "2 nodes").
    differs = differing_settings(pd.DataFrame([v.key for v in verdicts])) if verdicts else []
    rows = []
    for v, differ in zip(verdicts, differs):
        k = v.key
        cell = f"{k['benchmark']} uc{k['use_case']} {k['model']} b{k['batch_size']} {k['precision']}"
        if differ:
            cell += f" ({differ})"
        rows.append([v.campaign, k["device_model"], cell, k["framework"], figure(v.baseline and v.baseline["median"]),
                     figure(v.median), change_text(v),
                     FLAG_WORDS.get(v.flag, v.flag) + (f": {v.reasons}" if v.reasons else ""),
                     "; ".join(v.changed_versions)])
    return headers, rows


def change_text(v: Verdict) -> str:
    """"-16.7% [-18.3%, -15.0%]": the change and its interval, where there is one."""
    if v.change is None:
        return ""
    if v.change_interval is None:
        return f"{v.change:+.1%}"
    return f"{v.change:+.1%} [{v.change_interval[0]:+.1%}, {v.change_interval[1]:+.1%}]"


def figure(value: float | None) -> str:
    return "" if value is None else f"{value:,.1f}/s"


def regressions(verdicts: list[Verdict]) -> list[Verdict]:
    return [v for v in verdicts if v.flag == "regression"]


def verdict_summary(name: str, verdicts: list[Verdict], tolerance: float) -> str:
    """`2 regression(s) against baseline NAME (tolerance 5%), 1 improvement(s)`: the line under a verdict table."""
    improved = sum(v.flag == "improvement" for v in verdicts)
    apart = sum(v.flag == "not comparable" for v in verdicts)
    return (f"{len(regressions(verdicts))} regression(s) against baseline {name} (tolerance {tolerance:.0%}), "
            f"{improved} improvement(s)" + (f", {apart} not comparable (not judged)" if apart else ""))


@dataclass(frozen=True)
class Judged:
    """What a baseline says of the collected campaigns, for the report: its name, the tolerance and the verdicts."""

    name: str
    tolerance: float
    verdicts: list[Verdict]

    @property
    def summary(self) -> str:
        return verdict_summary(self.name, self.verdicts, self.tolerance)


def judge_merged(results_dir: Path, merged: Path, name: str, tolerance: str) -> Judged:
    """Every collected campaign the baseline NAME (in results_dir) was not made of, judged against it; a bad name,
    tolerance or a dataset holding only the baseline's own campaigns is refused in one sentence."""
    limit = parse_tolerance(tolerance)
    return Judged(name, limit, judge_campaigns(load(results_dir, name), merged, (), limit))


def judge_campaigns(saved: dict, merged: Path, campaigns: tuple[str, ...], tolerance: float) -> list[Verdict]:
    """Each of the given campaigns (default: every collected one the baseline was not made of) against the
    baseline, on its own: pooling two campaigns would mix two sets of versions into one median."""
    df = read_rows(merged, campaigns)
    if not campaigns:
        df = df[~df["campaign"].isin(saved["campaigns"])]
        if df.empty:
            raise UsageError(f"{merged} holds no campaign besides the baseline's own ({', '.join(saved['campaigns'])}):"
                             " collect a new campaign first, or name one with --campaign")
    verdicts = []
    for name in sorted(set(df["campaign"].astype(str))):
        verdicts += [replace(v, campaign=name) for v in judge(saved, summarize(df[df["campaign"] == name]), tolerance)
                     if v.flag != "missing"]
    ran = {frozen(v.key) for v in verdicts}
    return verdicts + [v for v in judge(saved, [], tolerance) if frozen(v.key) not in ran]
