"""Which cells ran beside which in a pack (orchestrator.results.neighbours), from the pack logs the driver writes,
and the verdict's flag on a pair whose two sides ran beside different cells."""

import json

from helpers import result_context

from orchestrator.results.neighbours import neighbours_of


def record(framework, cell, pair, start, end, job="9", exit_code=0, trial=0):
    return {"framework": framework, "cell_id": cell, "pair_key": pair, "trial": trial, "slot": 0, "job": job,
            "start": start, "end": end, "exit": exit_code, "step": f"{framework}:{cell}:t{trial}"}


def test_a_runs_neighbours_are_the_pairs_of_the_runs_of_its_job_that_overlapped_it():
    records = [record("jax", "j1", "p1", 0, 10), record("torch", "t1", "p1", 10, 20),
               record("jax", "j2", "p2", 5, 12, exit_code=143),  # stopped, but it ran beside both
               record("torch", "t3", "p3", 12, 30),
               record("jax", "j4", "p4", 0, 30, job="10")]  # another job: never a neighbour
    assert neighbours_of(records) == {("jax", "j1", 0): "p2", ("torch", "t1", 0): "p2,p3", ("torch", "t3", 0): "p1",
                                      ("jax", "j4", 0): ""}


def write_pair_runs(root, campaign, jax=2000.0, torch=1000.0):
    from bench_contract.results import ResultRows

    for framework, throughput in (("jax", jax), ("torch", torch)):
        ctx = result_context(framework=framework, benchmark="digits", use_case=1, model="mlp", batch_size=32,
                             precision="fp32", device_kind="cpu", device_model="CPU X", campaign=campaign,
                             cell_id=f"{framework}-cell", pair_key="p-cell", slurm_nodelist="n1")
        rows = ResultRows(ctx)
        rows.add("throughput", throughput, "samples/s")
        rows.add("step_time_cv", 0.01, "")
        rows.add("timed_duration", 2.0, "s")
        rows.write(root / campaign / "rows" / framework / f"{framework}-cell.parquet")


def write_pack_log(root, campaign, records):
    path = root / campaign / "packs" / "pack0_9.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def verdict_of(root):
    from orchestrator.results.collect import merge
    from orchestrator.results.neighbours import with_neighbours
    from orchestrator.results.verdict import verdicts
    from orchestrator.results.views import summary_frame, use_case_frame

    merge(root, root / "merged.parquet")
    summary = with_neighbours(summary_frame(root / "merged.parquet"), [root])
    (found,) = verdicts(use_case_frame(summary), summary)
    return found, summary


def test_a_pair_whose_sides_ran_beside_different_cells_is_not_reliable(tmp_path):
    """Three paired runs, each in a pack of its own campaign: in c0 the JAX run had pair p-other beside it and the
    PyTorch run nothing; in c1 and c2 both sides had the same neighbour."""
    for k in range(3):
        write_pair_runs(tmp_path, f"c{k}", jax=2000.0 + k)
    write_pack_log(tmp_path, "c0", [record("jax", "jax-cell", "p-cell", 0, 10), record("torch", "torch-cell",
                                    "p-cell", 10, 20), record("jax", "jax-other", "p-other", 0, 9)])
    for k in (1, 2):
        write_pack_log(tmp_path, f"c{k}", [record("jax", "jax-cell", "p-cell", 0, 10),
                                           record("torch", "torch-cell", "p-cell", 10, 20),
                                           record("jax", "jax-other", "p-other", 0, 20)])
    found, summary = verdict_of(tmp_path)
    assert set(summary["neighbours"]) == {"p-other", ""}
    assert not found.reliable
    assert "in 1 of 3 paired trials its JAX and PyTorch runs ran beside different cells in their pack" in found.text


def test_the_same_neighbours_on_both_sides_leave_the_row_reliable(tmp_path):
    for k in range(3):
        write_pair_runs(tmp_path, f"c{k}", jax=2000.0 + k)
        write_pack_log(tmp_path, f"c{k}", [record("jax", "jax-cell", "p-cell", 0, 10),
                                           record("torch", "torch-cell", "p-cell", 10, 20),
                                           record("jax", "jax-other", "p-other", 0, 20)])
    found, _ = verdict_of(tmp_path)
    assert found.reliable, found.text
