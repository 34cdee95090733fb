"""A digits campaign of 40 cells in each framework on the local Slurm cluster, paired, as arrays (a job per cell pair)
and as packs (many pairs in one allocation, each run a job step of its own): once on the idle cluster and once under
a per-user submit limit, with the jobs submitted, the time in the queue (Slurm's Submit to Start, summed over the
jobs) and the time from the first submission to the last result of each; then `compare --baseline` of the packed
results against the arrays', cell by cell.

The limit: a QOS with MaxSubmitJobsPerUser=1, asked for through the profile (--qos), made for this run and deleted
after it. A limit binds only where it is below the jobs a user could run at once: the local cluster has two nodes
of one CPU, so 1 here is what 4 is on a cluster of eight one-GPU nodes. The local cluster does not enforce
accounting limits (other engineers share it), so the orchestrator's own reading of the limit keeps it: a campaign
of more jobs is refused at plan time (checked here), and the arrays go in as the refusal says, one command per
pair, each waiting for its job before the next (`--wait`); the packs fit in one job whose two slots span both
nodes (--pack-slots 2 --pack-nodes 2). On the idle cluster the packs are --pack 10: four jobs of ten pairs.

Every job this suite submits runs (digits trains in seconds); each configuration waits for its own, so they never
overlap. It needs the cluster (scripts/local_slurm.sh up, as make bench does) and both frameworks' environments.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

from bench.submission import cluster_unavailable
from bench.timing import REPO_ROOT, Result, cli
from orchestrator.run.queue import sacct_lines

PAIRS, QUICK_PAIRS = 40, 2  # --quick: to check that the suite runs, in about a minute
BATCH_SIZES = tuple(8 + 4 * i for i in range(PAIRS))  # the cells: the digits MLP, use case 1, at 40 batch sizes
# Each run short (one epoch, two warm-up steps; the timing's defaults, at least 50 steps and 1 s, so that
# compare's intervals are narrow enough to judge a cell): the cost of a cell is then mostly its imports and
# compilation, the kind of short cell packing is for.
BRIEF = ("--epochs", "1", "--warmup-steps", "2")
LIMIT = 1
FEWER_JOBS_TARGET, LIMITED_SPEED_UP_TARGET = 5.0, 2.0  # issue 67's "done when"


@dataclasses.dataclass
class Outcome:
    """One configuration's run: its jobs, their summed queue time, the seconds to its last result, and each pair's
    seconds (its array task's Start to End; in a pack, its two steps')."""

    jobs: int
    queued_s: float
    to_last_result_s: float
    results: Path
    pair_s: dict[str, float]


def measure(repeats: int, quick: bool = False) -> list[Result]:
    reason = cluster_unavailable()
    step = f"digits campaign of {QUICK_PAIRS if quick else PAIRS} cell pairs, arrays and packs"
    if reason:
        return [Result(step, "not measured", f">= {FEWER_JOBS_TARGET:.0f}x fewer jobs", reason)]
    sizes = BATCH_SIZES[:QUICK_PAIRS] if quick else BATCH_SIZES
    idle_pack = max(1, len(sizes) // 4)  # four packs: two rounds on the two nodes
    work = Path(tempfile.mkdtemp(prefix="bench-packing-"))
    qos = f"jt_bench_pack_{os.getpid()}"
    try:
        idle_profile = REPO_ROOT / "profiles" / "local_slurm.toml"
        arrays = run_campaign(work / "arrays", idle_profile, [sizes], ["--pack", "0"])
        packs = run_campaign(work / "packs", idle_profile, [sizes], ["--pack", str(idle_pack)])
        sacctmgr("add", "qos", qos, f"MaxSubmitJobsPerUser={LIMIT}")
        limited_profile = work / "limited.toml"
        limited_profile.write_text(idle_profile.read_text() + f'extra_sbatch = ["--qos={qos}"]\n')
        refusal = refused_whole(work / "refused", limited_profile, sizes)
        limited_arrays = run_campaign(work / "limited-arrays", limited_profile, [[size] for size in sizes],
                                      ["--pack", "0"])
        limited_packs = run_campaign(work / "limited-packs", limited_profile, [sizes],
                                     ["--pack", str(len(sizes)), "--pack-slots", "2", "--pack-nodes", "2"])
        flagged = [compare(arrays.results, packs.results), compare(limited_arrays.results, limited_packs.results)]
    finally:
        sacctmgr("delete", "qos", qos)
        shutil.rmtree(work, ignore_errors=True)
    return rows(step, arrays, packs, limited_arrays, limited_packs, refusal, flagged, idle_pack, len(sizes), quick)


def run_campaign(results: Path, profile: Path, commands: list[list[int]], extra: list[str]) -> Outcome:
    """Launch each command's pairs and wait for them, one command after the other; its jobs from Slurm's accounting."""
    start = time.time()
    for sizes in commands:
        cli("--benchmark", "digits", "--use-case", "1", "--batch-sizes", ",".join(map(str, sizes)), *BRIEF,
            "--paired", *extra, "--wait", "--profile", str(profile), "--results-dir", str(results),
            "--scripts-dir", str(results / "scripts"))
    manifests = [json.loads(path.read_text()) for path in results.glob("*/manifest.json")]
    result_files = [Path(cell["results"]) for manifest in manifests for cell in manifest["cells"]]
    missing = [path for path in result_files if not path.exists()]
    if missing:
        raise RuntimeError(f"{len(missing)} of {len(result_files)} runs left no result, e.g. {missing[0]}")
    task_ids = [manifest["submissions"]["paired"]["task_ids"] for manifest in manifests]
    times = accounting([task for tasks in task_ids for task in tasks])
    queued = sum(begin - submit for submit, begin, _ in times.values())
    packed = [json.loads(line) for path in results.glob("*/packs/*.jsonl") for line in path.read_text().splitlines()]
    pair_s: dict[str, float] = {}
    for run in packed:  # a pack's pairs: the seconds of their steps
        pair_s[run["pair_key"]] = pair_s.get(run["pair_key"], 0.0) + run["end"] - run["start"]
    if not packed:  # a job per pair: its array task's, End minus Start
        ran = {task: end - begin for task, (_, begin, end) in times.items()}
        pair_s = {cell["pair_key"]: ran[tasks[cell["array_index"]]]
                  for manifest, tasks in zip(manifests, task_ids) for cell in manifest["cells"]}
    return Outcome(len(times), queued, max(path.stat().st_mtime for path in result_files) - start, results, pair_s)


def accounting(tasks: list[str]) -> dict[str, tuple[float, float, float]]:
    """Submit, Start and End of each job (array task), in seconds, from sacct (the orchestrator's own call);
    slurmctld hands records to slurmdbd asynchronously, so it is asked again until every job has ended."""
    jobs = sorted({task.split("_")[0] for task in tasks})
    deadline = time.monotonic() + 120
    while True:
        lines = sacct_lines(jobs, "-X", "-o", "JobID,Submit,Start,End")
        found = {job: tuple(datetime.fromisoformat(stamp).timestamp() for stamp in stamps)
                 for job, *stamps in (line.split("|") for line in lines)
                 if job in tasks and not {"", "Unknown", "None"} & set(stamps)}
        if len(found) == len(tasks) or time.monotonic() > deadline:
            break
        time.sleep(2)
    if len(found) != len(tasks):
        raise RuntimeError(f"sacct shows an end for {len(found)} of {len(tasks)} jobs")
    return found


def idle_allowance(arrays: Outcome, packs: Outcome, nodes: int = 2) -> float:
    """How much later than the arrays' the packs' last result may come by chance, in seconds: each node runs
    pairs/nodes pairs one after another, so the time to the last result is a sum of that many pair times, and the
    difference between the two configurations a sum of as many per-pair differences (the same cell, so the cells'
    own lengths cancel). One-sided 95% of that sum: 1.645 standard deviations of a pair's difference, times the
    square root of the pairs a node runs."""
    differences = [packs.pair_s[key] - arrays.pair_s[key] for key in arrays.pair_s]
    return 1.645 * statistics.stdev(differences) * math.sqrt(len(differences) / nodes)


def refused_whole(results: Path, profile: Path, sizes: tuple[int, ...]) -> str:
    """The refusal of the whole campaign as arrays under the limit (exit 2, nothing written): its sentence."""
    proc = subprocess.run([sys.executable, str(REPO_ROOT / "main.py"), "--benchmark", "digits", "--use-case", "1",
                           "--batch-sizes", ",".join(map(str, sizes)), *BRIEF, "--paired", "--pack", "0",
                           "--profile", str(profile),
                           "--results-dir", str(results), "--scripts-dir", str(results / "scripts")],
                          capture_output=True, text=True, cwd=REPO_ROOT, stdin=subprocess.DEVNULL)
    if proc.returncode != 2 or list(results.glob("*/manifest.json")):
        raise RuntimeError(f"the campaign as arrays was not refused under the limit (exit {proc.returncode})")
    return proc.stderr.strip()


def compare(arrays: Path, packs: Path) -> list[str]:
    """`compare --baseline` of the packed campaign against the arrays' (saved as a baseline): the cells it flags,
    regressions and improvements alike (either way the two would not agree within noise)."""
    for results in (arrays, packs):
        cli("collect", "--results-dir", str(results))
    cli("baseline", "save", "arrays", "--results-dir", str(arrays))
    (packs / "baselines").mkdir(exist_ok=True)
    shutil.copy(arrays / "baselines" / "arrays.json", packs / "baselines" / "arrays.json")
    proc = cli("compare", "--baseline", "arrays", "--results-dir", str(packs))
    summary = re.search(r"(\d+) regression\(s\) against .*?, (\d+) improvement\(s\)", proc.stdout)
    if summary is None:
        raise RuntimeError(f"compare printed no summary line: {proc.stdout[-300:]}")
    flagged = [line for line in proc.stdout.splitlines() if re.search(r"  (REGRESSION|improvement)  ", line + "  ")]
    if len(flagged) != int(summary[1]) + int(summary[2]):
        raise RuntimeError(f"compare's table and its summary disagree: {summary[0]}")
    return flagged


def sacctmgr(*args: str) -> None:
    proc = subprocess.run(["sacctmgr", "-i", *args], capture_output=True, text=True, timeout=60)
    if proc.returncode != 0 and args[0] == "add":
        raise RuntimeError(f"sacctmgr could not add the QOS: {(proc.stderr or proc.stdout).strip()}")


def rows(step: str, arrays: Outcome, packs: Outcome, limited_arrays: Outcome, limited_packs: Outcome, refusal: str,
         flagged: list[list[str]], idle_pack: int, pairs: int, quick: bool) -> list[Result]:
    def verdict(met: bool, missed: str) -> str:
        return "" if quick else ("met" if met else missed)

    fewer = arrays.jobs / packs.jobs
    idle = packs.to_last_result_s / arrays.to_last_result_s
    allowed = 1 + idle_allowance(arrays, packs) / arrays.to_last_result_s
    limited = limited_arrays.to_last_result_s / limited_packs.to_last_result_s
    cells = 2 * pairs
    return [
        Result(f"{step}: jobs submitted, arrays / packs (--pack {idle_pack})", f"{fewer:.1f}x",
               f">= {FEWER_JOBS_TARGET:.0f}x", verdict(fewer >= FEWER_JOBS_TARGET, f"missed ({fewer:.1f}x)"),
               f"{arrays.jobs} against {packs.jobs}; queued {arrays.queued_s:.0f} s against {packs.queued_s:.0f} s "
               "(Submit to Start, summed)"),
        Result(f"{step}, idle cluster: to the last result, packs / arrays", f"{idle:.3f}x",
               f"<= {allowed:.3f}x (no slower)", verdict(idle <= allowed, f"missed ({idle:.3f}x)"),
               f"{packs.to_last_result_s:.0f} s against {arrays.to_last_result_s:.0f} s; the target allows what "
               "chance adds to a node's sum of pair times (the spread of the same pair's seconds, packed and not)"),
        Result(f"{step}, MaxSubmitJobsPerUser={LIMIT}: to the last result, arrays / packs", f"{limited:.2f}x",
               f">= {LIMITED_SPEED_UP_TARGET:.0f}x",
               verdict(limited >= LIMITED_SPEED_UP_TARGET, f"missed ({limited:.2f}x)"),
               f"{limited_arrays.jobs} commands of one pair, {limited_arrays.to_last_result_s:.0f} s, queued "
               f"{limited_arrays.queued_s:.0f} s; {limited_packs.jobs} pack of 2 slots over both nodes, "
               f"{limited_packs.to_last_result_s:.0f} s, queued {limited_packs.queued_s:.0f} s; the campaign as "
               f"one command: {refusal[:120]}"),
        Result(f"{step}: compare --baseline, packs against arrays", f"{sum(map(len, flagged))} of {2 * cells} cells "
               "flagged", "none", verdict(not any(flagged), "missed: " + "; ".join(f[:80] for fs in flagged
                                                                                    for f in fs[:2])),
               f"{cells} cells (both frameworks') idle, {cells} under the limit; a cell is flagged when its "
               "throughput changed by more than 5% and outside both sides' intervals"),
    ]
