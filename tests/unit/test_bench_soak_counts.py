"""The soak's counts (bench/soak_counts.py) can fail: a cell run twice, submitted twice or by a job no manifest
records, merged from another run, or run by an array the product cancelled, is named; a campaign whose every cell
ran once, with a paired array in parts, a resubmission and a cancelled orphan, is counted clean."""

from pathlib import Path

from helpers import typed_manifest

from bench.soak_counts import count


def paired_campaign() -> dict:
    """Two pairs, two trials each, both frameworks: array index i covers 4 cells. Pair 0 ran as task 0 of job 10;
    pair 1's first array (job 11, at offset 1) was found after a lost answer and cancelled (an orphan), and
    resubmitted as job 12, numbered in order."""
    cells = [{"framework": fw, "script": "paired", "array_index": i, "cell_id": f"{fw}-{i}", "trial": t,
              "results": ""} for i in (0, 1) for fw in ("jax", "torch") for t in (0, 1)]
    arrays = [{"script": "paired", "offset": 0, "count": 1, "executor": "slurm", "job_id": "10", "state": "submitted"},
              {"script": "paired", "offset": 1, "count": 1, "executor": "slurm", "job_id": "11", "state": "cancelled"},
              {"script": "paired", "offset": 0, "count": 1, "executor": "slurm", "indices": [1], "numbering": "in order",
               "job_id": "12", "state": "submitted", "job_name": "paired:c:1:rerun1"}]
    return {"c": typed_manifest(Path("c"), cells, executor="slurm", arrays=arrays)}


# sacct -X -o JobID,JobName,Start,State, split at "|" (soak_counts.sacct_lines)
CLEAN_LINES = [["10_0", "paired:c:0", "2026-12-05T10:00:00", "COMPLETED"],
               ["11_0", "paired:c:1", "2026-12-05T10:00:01", "CANCELLED by 0"],
               ["12_0", "paired:c:1:rerun1", "2026-12-05T10:00:05", "COMPLETED"],
               ["99_0", "jax:another-campaign:0", "2026-12-05T10:00:00", "COMPLETED"]]


def ran_once() -> tuple[dict, dict]:
    """The ledger's runs and the merged dataset's jobs of every cell run once: pair 0 by job 10, pair 1 by 12."""
    runs, merged = {}, {}
    for i, job in ((0, "10"), (1, "12")):
        for fw in ("jax", "torch"):
            for t in (0, 1):
                runs[("c", f"{fw}-{i}", t)] = [{"run": f"{fw}{i}{t}", "slurm_job_id": job}]
                merged[("c", f"{fw}-{i}", t)] = {job}
    return runs, merged


NAMED = ("submitted_twice", "never_submitted", "started_twice", "never_started", "ran_twice", "never_ran",
         "not_merged", "merged_from_another_run", "unrecorded_jobs", "orphans_ran")


def test_every_cell_once_is_counted_clean():
    runs, merged = ran_once()
    counts = count(paired_campaign(), CLEAN_LINES, runs, merged)
    assert counts["cells"] == 8
    assert {name: counts[name] for name in NAMED} == dict.fromkeys(NAMED, [])
    assert counts["orphans"] == {"arrays cancelled": 1, "their tasks started": 1}


def test_a_cell_run_twice_is_named_though_its_result_file_holds_one_run():
    """Both runs of a cell write the same result file, so the merged dataset has one: the ledger has both."""
    runs, merged = ran_once()
    runs[("c", "torch-1", 0)].append({"run": "second", "slurm_job_id": "13"})
    lines = CLEAN_LINES + [["13_0", "paired:c:1", "2026-12-05T10:00:09", "COMPLETED"]]
    counts = count(paired_campaign(), lines, runs, merged)
    pair_1 = [("c", f"{fw}-1", t) for fw in ("jax", "torch") for t in (0, 1)]
    assert counts["ran_twice"] == [("c", "torch-1", 0)]
    assert counts["unrecorded_jobs"] == ["13_0 (paired:c:1)"]
    assert counts["submitted_twice"] == counts["started_twice"] == pair_1  # job 13 by its name: pair 1 again


def test_a_run_of_a_cancelled_orphan_and_a_row_from_another_run_are_named():
    runs, merged = ran_once()
    runs[("c", "jax-1", 1)] = [{"run": "orphan", "slurm_job_id": "11"}]
    merged[("c", "jax-0", 0)] = {"77"}
    counts = count(paired_campaign(), CLEAN_LINES, runs, merged)
    assert counts["orphans_ran"] == ["('c', 'jax-1', 1): job 11"]
    assert counts["merged_from_another_run"] == ["('c', 'jax-0', 0): merged from ['77'], ran as ['10']",
                                                 "('c', 'jax-1', 1): merged from ['12'], ran as ['11']"]


def test_a_cell_never_run_or_merged_is_named():
    runs, merged = ran_once()
    del runs[("c", "jax-0", 1)], merged[("c", "jax-0", 1)]
    lines = [line for line in CLEAN_LINES if not line[0].startswith("10_")]
    counts = count(paired_campaign(), lines, runs, merged)
    pair_0 = [("c", f"{fw}-0", t) for fw in ("jax", "torch") for t in (0, 1)]
    assert counts["never_submitted"] == counts["never_started"] == pair_0
    assert counts["never_ran"] == counts["not_merged"] == [("c", "jax-0", 1)]
