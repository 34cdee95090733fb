"""Check the rows that scripts/gpu_check.sh produced: each GPU field a row carries, against what the GPU says.

    python scripts/gpu_check.py --work DIR [--device gpu|cpu]   # the checks; summary.md and checks.json in DIR
    python scripts/gpu_check.py --work DIR --nvml-probe          # how NVML's energy counter and clocks behave

Every check names the cell and the field. Exit status 1 when one fails. With --device cpu (the rehearsal) the
checks that only a GPU can pass are left out, and the summary says which.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

LANES = ("mnist", "inference", "cifar", "search")
GIB = 2**30


@dataclass
class Cell:
    lane: str
    path: Path
    context: dict
    metrics: dict  # metric -> (first value, note)

    @property
    def name(self) -> str:
        return self.context["cell_id"]

    def value(self, metric: str) -> float:
        value = self.metrics.get(metric, (None, ""))[0]
        return math.nan if value is None else float(value)

    def note(self, metric: str) -> str:
        return self.metrics.get(metric, (None, ""))[1] or ""

    @property
    def details(self) -> dict:
        return json.loads(self.context["device_details"])

    @property
    def mode(self) -> str:
        return json.loads(self.context["framework_options"]).get("mode", "")

    @property
    def searched(self) -> bool:
        return not math.isnan(self.value("max_batch_size"))


@dataclass
class Check:
    cell: str
    field: str
    ok: bool
    seen: str
    expected: str


def load_cells(work: Path) -> tuple[list[Cell], list[dict]]:
    from bench_contract.results import CONTEXT_NAMES, read_task_table
    import pyarrow.parquet as pq

    cells, failures = [], []
    for lane in LANES:
        for path in sorted((work / "results" / lane).glob("*/rows/*/*.parquet")):
            table = read_task_table(path).to_pandas()
            context = {name: table.iloc[0][name] for name in CONTEXT_NAMES}
            metrics: dict = {}
            for row in table.itertuples():
                metrics.setdefault(row.metric, (None if row.value != row.value else row.value, row.note))
            cells.append(Cell(lane, path, context, metrics))
        for path in sorted((work / "results" / lane).glob("*/failures/*/*.parquet")):
            row = pq.read_table(path).to_pylist()[0]
            failures.append({"lane": lane, "cell": row.get("cell_id"), "reason": row.get("failure_reason"),
                             "phase": row.get("phase")})
    return cells, failures


def planned_cells(work: Path) -> dict[str, str]:
    """cell id -> lane, for every cell the campaigns planned (the specs files)."""
    planned = {}
    for lane in LANES:
        for specs in (work / "results" / lane).glob("*/specs/*.jsonl"):
            for line in specs.read_text().splitlines():
                if line.strip():
                    planned[json.loads(line)["cell_id"]] = lane
    return planned


class Checker:
    def __init__(self, gpu: bool) -> None:
        self.gpu, self.checks = gpu, []

    def expect(self, cell: str, field: str, ok: bool, seen, expected: str) -> None:
        self.checks.append(Check(cell, field, bool(ok), str(seen), expected))

    def provenance(self, c: Cell) -> None:
        self.expect(c.name, "environment_kind", str(c.context["environment_kind"]).startswith("site: "),
                    c.context["environment_kind"], "site: <the machine's python>")
        if not self.gpu:
            self.expect(c.name, "device_kind", c.context["device_kind"] == "cpu", c.context["device_kind"], "cpu")
            return
        details = c.details
        nvml = (self.details_gpus(c) or [{}])[0]
        framework = details.get("framework_device") or {}
        self.expect(c.name, "device_kind", c.context["device_kind"] == "gpu", c.context["device_kind"], "gpu")
        self.expect(c.name, "device_model = NVML's name", nvml.get("name") == c.context["device_model"],
                    f"{c.context['device_model']!r}, NVML {nvml.get('name')!r}", "equal")
        self.expect(c.name, "device_model = the framework's name", framework.get("name") == c.context["device_model"],
                    f"{c.context['device_model']!r}, {framework.get('source')} {framework.get('name')!r}", "equal")
        self.expect(c.name, "device_details.matched_by", bool(nvml.get("matched_by")), nvml.get("matched_by"),
                    "how the CUDA device was found in NVML")
        self.expect(c.name, "device_details.driver_version", not str(details.get("driver_version", "not")).startswith("not"),
                    details.get("driver_version"), "a driver version")
        self.expect(c.name, "device_details.memory_total_bytes", nvml.get("memory_total_bytes", 0) > 0,
                    nvml.get("memory_total_bytes"), "> 0")
        self.expect(c.name, "device_details.framework_device.multiprocessors",
                    (framework.get("multiprocessors") or 0) > 0, framework.get("multiprocessors"), "> 0")
        for clock in ("sm_clock_max_mhz", "memory_clock_max_mhz"):
            self.expect(c.name, f"device_details.{clock}", isinstance(nvml.get(clock), int) and nvml[clock] > 0,
                        nvml.get(clock), "> 0 MHz")
        self.expect(c.name, "device_details.compute_capability",
                    str(nvml.get("compute_capability")) == str(framework.get("compute_capability")),
                    f"NVML {nvml.get('compute_capability')}, framework {framework.get('compute_capability')}", "equal")
        versions = json.loads(c.context["library_versions"])
        for library in ("cuda", "cudnn"):
            self.expect(c.name, f"library_versions.{library}", not str(versions.get(library, "not")).startswith("not"),
                        versions.get(library), "a version")

    @staticmethod
    def details_gpus(c: Cell) -> list[dict]:
        gpus = c.details.get("gpus")
        return gpus if isinstance(gpus, list) else []

    def precision(self, c: Cell) -> None:
        from bench_contract.run.precision import REDUCED_MATMUL_BOUND

        error = c.value("float32_matmul_error")
        if c.context["precision"] == "tf32":
            self.expect(c.name, "float32_matmul_error (TF32 on)", error > REDUCED_MATMUL_BOUND, f"{error:.3g}",
                        f"> {REDUCED_MATMUL_BOUND:.3g}")
        else:
            self.expect(c.name, "float32_matmul_error (TF32 off)", error <= REDUCED_MATMUL_BOUND, f"{error:.3g}",
                        f"<= {REDUCED_MATMUL_BOUND:.3g}")

    def measured(self, c: Cell) -> None:
        from bench_contract.measure.flops import gpu_peak

        if c.context["use_case"] != 5:
            self.expect(c.name, "precision_census", bool(c.context["precision_census"]), "set" if c.context["precision_census"] else "empty",
                        "a census of the training step")
        if c.mode.startswith("torch.compile"):
            self.expect(c.name, "recompilations_timed", c.value("recompilations_timed") == 0,
                        c.value("recompilations_timed"), "0")
        if c.context["framework"] == "jax":
            self.expect(c.name, "compile_time", c.value("compile_time") > 0, c.value("compile_time"), "> 0 s, apart")
        if not self.gpu:
            return
        self.expect(c.name, "energy_timed", c.value("energy_timed") > 0 and c.note("energy_timed").startswith(
            "NVML total-energy counter"), f"{c.value('energy_timed'):.4g} J ({c.note('energy_timed')[:80]})",
            "> 0 J, from NVML's total-energy counter")
        # Energy over its window's time is the mean power: between nothing and the GPU's power limit, or the energy
        # is wrong (per-step windows summed against a counter that moves every 100 ms gave 4,500 W on a 700 W GPU).
        nvml = (self.details_gpus(c) or [{}])[0]
        limit = nvml.get("power_limit_w") if isinstance(nvml.get("power_limit_w"), (int, float)) else math.nan
        power = c.value("energy_timed") / c.value("energy_window_time")
        self.expect(c.name, "energy_timed / energy_window_time", 0 < power <= limit, f"{power:.0f} W",
                    f"in (0, {limit:.0f} W], the GPU's power limit")
        self.expect(c.name, "peak_device_memory_allocated", c.value("peak_device_memory_allocated") > 0,
                    c.value("peak_device_memory_allocated"), "> 0 bytes")
        mfu = c.value("mfu")
        if not math.isnan(c.value("flops_per_step")):
            self.expect(c.name, "mfu", 0 < mfu < 1, f"{mfu:.4g}", "in (0, 1)")
            peak = gpu_peak(c.context["device_model"], c.context["precision"])
            self.expect(c.name, "peak_flops", peak.flops is not None and math.isclose(c.value("peak_flops"), peak.flops),
                        f"{c.value('peak_flops'):.4g} ({c.note('peak_flops')[:70]})",
                        f"the table's dense {c.context['precision']} peak {peak.flops}")
            self.expect(c.name, "peak_bandwidth", peak.bandwidth is not None and math.isclose(
                c.value("peak_bandwidth"), peak.bandwidth), f"{c.value('peak_bandwidth'):.4g}",
                f"the table's HBM bandwidth {peak.bandwidth}")

    def search(self, c: Cell, cap_bytes: int) -> None:
        largest, failed = c.value("max_batch_size"), c.value("min_batch_size_out_of_memory")
        self.expect(c.name, "max_batch_size", largest > 0, largest, "> 0")
        self.expect(c.name, "min_batch_size_out_of_memory", failed > largest, failed,
                    f"> max_batch_size: the next size up failed for lack of memory")
        self.expect(c.name, "memory_limit", c.value("memory_limit") == cap_bytes, c.value("memory_limit"), cap_bytes)
        self.expect(c.name, "batch_search_limit_reached", c.value("batch_search_limit_reached") == 0,
                    c.value("batch_search_limit_reached"), "0 (the memory, not the limit, ended the search)")

    def small_after_large(self, cells: list[Cell]) -> None:
        """The small inference cell ran after the large ones in one lane: its peak is its own, not theirs."""
        if not self.gpu:
            return
        for framework in ("jax", "torch"):
            lane = [c for c in cells if c.lane == "inference" and c.context["framework"] == framework]
            small = [c for c in lane if c.context["model"] == "mlp"]
            large = [c for c in lane if c.context["model"] in ("resnet50", "vit_b_16")]
            if not small or not large:
                self.expect(f"{framework} inference", "peak_device_memory_allocated (small after large)", False,
                            "cells missing", "an MLP cell after the resnet50 and vit_b_16 cells")
                continue
            biggest = max(c.value("peak_device_memory_allocated") for c in large)
            mine = small[0].value("peak_device_memory_allocated")
            self.expect(small[0].name, "peak_device_memory_allocated (small after large)", mine < biggest / 10,
                        f"{mine / GIB:.3f} GiB after a cell of {biggest / GIB:.3f} GiB", "< a tenth of the large cell's")


def flop_counts_agree(checker: Checker, cells: list[Cell]) -> None:
    """Both frameworks' FLOPs per step of one inference cell: one counting method (matmuls and convolutions of
    the traced program), so the same model and batch must give nearly the same count. XLA's cost analysis, which
    leaves out the cuBLAS and cuDNN calls on a GPU, gave JAX a hundredth of PyTorch's count on the H200."""
    pairs: dict[tuple, dict[str, float]] = {}
    for c in cells:
        if c.context["use_case"] == 5 and not c.searched:
            key = (c.context["model"], c.context["batch_size"], c.context["precision"])
            pairs.setdefault(key, {})[c.context["framework"]] = c.value("flops_per_step")
    for (model, batch, precision), counts in sorted(pairs.items()):
        if len(counts) == 2:
            ratio = counts["jax"] / counts["torch"]
            # 10%: the same multiply-adds; only operations one model has and the other does not (a different but
            # equivalent layer) may differ, and none of the models here has one.
            checker.expect(f"{model} batch {batch} {precision} inference", "flops_per_step, JAX / PyTorch",
                           0.9 <= ratio <= 1.1, f"{ratio:.3f} ({counts['jax']:.3g} / {counts['torch']:.3g})",
                           "within 10%")


def traces_found(work: Path) -> dict[str, list[str]]:
    """The trace files of the --trace-steps cells, per framework (a trace folder is named after its cell)."""
    files = [p for p in (work / "results").rglob("*") if p.is_file() and ".trace" in str(p.relative_to(work))]
    return {framework: sorted(str(p.relative_to(work)) for p in files if f"/{framework}-" in str(p))
            for framework in ("jax", "torch")}


def validate_lines(work: Path) -> list[str]:
    """Each `validate` step's header line and its PASS or FAIL verdict (the output between two step headers)."""
    found, inside = [], False
    for lane in LANES:
        log = work / "logs" / f"{lane}.log"
        for line in log.read_text(errors="replace").splitlines() if log.exists() else []:
            if line.startswith("== "):
                inside = " validate " in line and not line.startswith("== exit")
                if " validate " in line:
                    found.append(line)
            elif inside and line.strip() in ("PASS", "FAIL"):
                found.append(line.strip())
    return found


def cell_table(cells: list[Cell]) -> list[str]:
    head = ("| lane | framework | model | uc | batch | precision | mode / engine | throughput | compile s | peak GiB "
            "| energy J | MFU | fp32 matmul err |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for c in cells:
        ctx = c.context
        mode = c.mode + (f", {ctx['dp_engine']}" if ctx["dp_engine"] else "")
        thr = c.value("throughput") if not c.searched else c.value("max_batch_size")
        lines.append(f"| {c.lane} | {ctx['framework']} | {ctx['model']} | {ctx['use_case']} | {ctx['batch_size']} | "
                     f"{ctx['precision']} | {mode} | {'max batch ' if c.searched else ''}{thr:,.0f} | "
                     f"{c.value('compile_time'):.3g} | {c.value('peak_device_memory_allocated') / GIB:.3g} | "
                     f"{c.value('energy_timed'):.3g} | {c.value('mfu'):.3g} | {c.value('float32_matmul_error'):.2g} |")
    return lines


def parse_size(text: str) -> int:
    units = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
    return int(float(text[:-1]) * units[text[-1].upper()]) if text[-1].upper() in units else int(text)


def run_checks(work: Path, gpu: bool, cap: str) -> int:
    cells, failures = load_cells(work)
    planned = planned_cells(work)
    checker = Checker(gpu)
    ran = {c.name for c in cells} | {c.context["cell_id"] for c in cells}
    for cell_id, lane in sorted(planned.items()):
        checker.expect(cell_id, "result file", cell_id in ran, "written" if cell_id in ran else "missing",
                       f"a result row of lane {lane}")
    for c in cells:
        checker.provenance(c)
        if c.searched:
            checker.search(c, parse_size(cap))
            continue
        checker.precision(c)
        checker.measured(c)
    checker.small_after_large(cells)
    flop_counts_agree(checker, cells)
    traces = traces_found(work)
    for framework, files in traces.items():
        checker.expect(f"{framework} --trace-steps 3", "trace file", bool(files), ", ".join(files) or "none", "a trace")
    validate = validate_lines(work)
    verdicts = [line for line in validate if "PASS" in line or "FAIL" in line]
    checker.expect("validate resnet50, vit_b_16", "validate", len(verdicts) >= 2 and all("PASS" in v for v in verdicts),
                   "; ".join(verdicts) or "no verdict", "PASS twice")
    failed = [k for k in checker.checks if not k.ok]
    summary = [f"# GPU check ({'GPU' if gpu else 'CPU rehearsal'}): {len(checker.checks) - len(failed)} of "
               f"{len(checker.checks)} checks passed, {len(cells)} cells, {len(failures)} failure rows", ""]
    machine = work / "machine.txt"
    if machine.exists():
        summary += ["```", *machine.read_text(errors="replace").splitlines()[:40], "```", ""]
    if failed:
        summary += ["## Failed checks", "", "| cell | field | seen | expected |", "|---|---|---|---|"]
        summary += [f"| {k.cell} | {k.field} | {k.seen} | {k.expected} |" for k in failed] + [""]
    if failures:
        summary += ["## Failure rows", ""] + [f"- {f['lane']}: {f['cell']}: {f['reason']} ({f['phase']})"
                                              for f in failures] + [""]
    summary += ["## Cells", ""] + cell_table(cells) + ["", "## Validate", ""] + [f"    {v}" for v in validate]
    summary += ["", "## Traces", ""] + [f"- {fw}: {', '.join(files) or 'none'}" for fw, files in traces.items()]
    summary += ["", "## Every check", "", "| cell | field | ok | seen | expected |", "|---|---|---|---|---|"]
    summary += [f"| {k.cell} | {k.field} | {'yes' if k.ok else 'NO'} | {k.seen} | {k.expected} |" for k in checker.checks]
    (work / "summary.md").write_text("\n".join(summary) + "\n")
    (work / "checks.json").write_text(json.dumps([k.__dict__ for k in checker.checks], indent=1))
    print("\n".join(summary[:2]))
    for k in failed[:40]:
        print(f"FAILED {k.cell}: {k.field}: seen {k.seen}, expected {k.expected}")
    for f in failures[:20]:
        print(f"FAILURE ROW {f['cell']}: {f['reason']}")
    return 1 if failed or failures else 0


def nvml_probe() -> None:
    """How often NVML's energy counter moves, and the clocks and power it reads now (for the notes)."""
    import pynvml

    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    readings, start = [], time.perf_counter()
    while time.perf_counter() - start < 1.0:
        readings.append((time.perf_counter(), pynvml.nvmlDeviceGetTotalEnergyConsumption(handle)))
    changes = [t for (t, e), (_, before) in zip(readings[1:], readings) if e != before]
    gaps = sorted(b - a for a, b in zip(changes, changes[1:]))
    print(json.dumps({
        "name": pynvml.nvmlDeviceGetName(handle),
        "energy_counter_reads": len(readings), "energy_counter_changes": len(changes),
        "energy_counter_update_median_ms": 1000 * gaps[len(gaps) // 2] if gaps else None,
        "power_w": pynvml.nvmlDeviceGetPowerUsage(handle) / 1000,
        "sm_clock_mhz": pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM),
        "sm_clock_max_mhz": pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_SM),
    }, default=str, indent=1))
    pynvml.nvmlShutdown()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--device", choices=("gpu", "cpu"), default="gpu")
    parser.add_argument("--memory-limit", default="4G", help="the batch search's --memory-limit")
    parser.add_argument("--nvml-probe", action="store_true")
    args = parser.parse_args()
    if args.nvml_probe:
        nvml_probe()
        return 0
    return run_checks(args.work, args.device == "gpu", args.memory_limit)


if __name__ == "__main__":
    sys.exit(main())
