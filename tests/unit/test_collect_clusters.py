"""collect of several results folders (copied from other clusters): each campaign once, incremental still, and a
view across device models that appears only when there are several."""

import json
import shutil

import pyarrow.parquet as pq
from helpers import result_context, run_cli, write_manifest

from orchestrator.results import collect
from orchestrator.results.collect import merge
from orchestrator.results.missing import missing_cells

CROSS_DEVICE_TITLE = "Across device models: JAX and PyTorch throughput, speed-up JAX/PyTorch [95% CI]"

STARTED = "2026-11-20T10:00:00+00:00"


def run_file(root, campaign, framework, batch, throughput, device):
    """One task's result file of `campaign`, as a backend writes it under root/<campaign>/rows/<framework>/."""
    from bench_contract.results import ResultRows

    ctx = result_context(framework=framework, benchmark="digits", use_case=1, model="mlp", batch_size=batch,
                         precision="fp32", device_model=device, cell_id=f"{framework}-{batch}", campaign=campaign,
                         started_at=STARTED)
    rows = ResultRows(ctx)
    rows.add("throughput", throughput, "samples/s")
    return rows.write(root / campaign / "rows" / framework / f"{framework}-{batch}.parquet")


def two_clusters(tmp_path):
    """Folder a: campaign c1 on GPU A. Folder b: campaign c2 on GPU B, and a copy of c1 (copied with a)."""
    a, b = tmp_path / "a", tmp_path / "b"
    for framework, throughput in (("jax", 2000.0), ("torch", 1000.0)):
        run_file(a, "c1", framework, 32, throughput, "GPU A")
        run_file(b, "c2", framework, 32, throughput * 3, "GPU B")
    shutil.copytree(a / "c1", b / "c1")
    return a, b


def throughputs(merged):
    table = pq.read_table(merged, filters=[("metric", "==", "throughput")])
    return sorted(zip(table["campaign"].to_pylist(), table["framework"].to_pylist(), table["value"].to_pylist()))


def test_two_folders_merge_each_campaign_once(tmp_path):
    a, b = two_clusters(tmp_path)
    collected = merge(a, a / "merged.parquet", others=[b])
    assert collected.files == 4 and len(collected.copies) == 2 and not collected.superseded
    assert throughputs(a / "merged.parquet") == [("c1", "jax", 2000.0), ("c1", "torch", 1000.0),
                                                 ("c2", "jax", 6000.0), ("c2", "torch", 3000.0)]
    assert {older.parent.parent.parent.parent for older, _ in collected.copies} == {b}  # paths as a reader writes them


def test_the_collect_command_takes_several_folders_and_compares_the_device_models(tmp_path):
    a, b = two_clusters(tmp_path)
    one_device_model_has_no_cross_device_view(a)
    proc = run_cli("collect", "--results-dir", str(a), "--results-dir", str(b))
    assert proc.returncode == 0, proc.stderr
    assert f"merged 4 rows from 4 task files (4 new or changed) into {a / 'merged.parquet'}" in proc.stdout
    assert "left out 2 copies of runs merged from another file" in proc.stderr
    assert "Training on GPU A" in proc.stdout and "Training on GPU B" in proc.stdout
    across = proc.stdout.split(CROSS_DEVICE_TITLE)[1].splitlines()
    line = next(line for line in across if line.startswith("digits"))
    one_run = "[n/a (1 run)]".split()  # one run a side: no interval, and the cell says why
    assert line.split() == ["digits", "1", "mlp", "32", "fp32", "2,000", "1,000", "2.00x", *one_run, "6,000", "3,000",
                            "2.00x", *one_run]
    report = run_cli("report", "--results-dir", str(a))
    assert report.returncode == 0, report.stderr
    assert f"## {CROSS_DEVICE_TITLE}" in (a / "report" / "report.md").read_text()
    page = (a / "report" / "report.html").read_text()
    assert "<h2>Across device models</h2>" in page and "GPU B<br>JAX samples/s" in page


def one_device_model_has_no_cross_device_view(a):
    proc = run_cli("collect", "--results-dir", str(a))
    assert proc.returncode == 0, proc.stderr
    assert "Training on GPU A" in proc.stdout and CROSS_DEVICE_TITLE not in proc.stdout
    assert run_cli("report", "--results-dir", str(a)).returncode == 0
    assert CROSS_DEVICE_TITLE not in (a / "report" / "report.md").read_text()
    assert "Across device models" not in (a / "report" / "report.html").read_text()


def test_a_second_collect_of_two_folders_reads_only_the_new_file(tmp_path, monkeypatch):
    a, b = two_clusters(tmp_path)
    out = a / "merged.parquet"
    assert merge(a, out, others=[b]).from_scratch
    seen = []
    real = collect.read_task_file
    monkeypatch.setattr(collect, "read_task_file", lambda path, *rest: (seen.append(path), real(path, *rest))[1])
    assert merge(a, out, others=[b]).read == 0 and seen == []
    new = run_file(b, "c2", "jax", 64, 500.0, "GPU B")
    collected = merge(a, out, others=[b])
    assert collected.read == 1 and not collected.from_scratch and collected.files == 5
    assert [p.resolve() for p in seen] == [new.resolve()]


def write_local_manifest(folder, campaign, results):
    """A campaign manifest (local executor) whose cells' results were written where the campaign ran."""
    cells = [{"framework": "jax", "array_index": i, "cell_id": f"jax-{i}", "results": path}
             for i, path in enumerate(results)]
    write_manifest(folder, cells, campaign=campaign,
                   submissions={"jax": {"job_id": "local", "task_ids": [f"local_{i}" for i in range(len(cells))]}})


def test_a_campaign_copied_into_two_folders_lists_its_missing_cells_once(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    ran_at = "/cluster-x/results/c9/rows/jax"  # where the campaign ran: not on this machine
    for folder in (a, b):
        write_local_manifest(folder / "c9", "c9", [f"{ran_at}/jax-0.parquet", f"{ran_at}/jax-1.parquet"])
        (folder / "c9" / "rows" / "jax").mkdir(parents=True)
        shutil.copy(run_file(tmp_path / "made", "c9", "jax", 0, 10.0, "GPU A"), folder / "c9/rows/jax/jax-0.parquet")
    missing = missing_cells(a, others=[b])
    assert [(m["campaign"], m["cell_id"], m["state"]) for m in missing] == [("c9", "jax-1", "no result")]
    assert "the campaign ran elsewhere" in missing[0]["reason"]
