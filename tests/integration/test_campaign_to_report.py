"""Two benchmarks in both frameworks on the real cluster: submitted, watched to the end, collected, reported."""

import json

import pandas as pd
from helpers import BRIEF_TIMING_ARGS, REPO_ROOT, run_cli


def test_two_benchmarks_submitted_watched_collected_and_reported(slurm_cluster, tmp_path):
    results = tmp_path / "results"
    common = ["--use-case", "1", *BRIEF_TIMING_ARGS, "--epochs", "2",
              "--profile", str(REPO_ROOT / "profiles" / "local_slurm.toml"),
              "--results-dir", str(results), "--scripts-dir", str(tmp_path / "s")]
    campaigns = []
    for benchmark in (["--benchmark", "digits", "--batch-sizes", "32"],
                      ["--benchmark", "mnist", "--synthetic", "--synthetic-samples", "640", "--batch-sizes", "64"]):
        proc = run_cli(*benchmark, *common, env=slurm_cluster.env)
        assert proc.returncode == 0, proc.stderr
        campaigns.append(proc.stdout.split("campaign ", 1)[1].split(":", 1)[0])
    for campaign in campaigns:
        watched = run_cli("watch", campaign, "--interval", "1", "--results-dir", str(results),
                          env=slurm_cluster.env, timeout=900)
        assert watched.returncode == 0, watched.stdout + watched.stderr
        assert "2/2 ended (2 completed)" in watched.stdout
    assert run_cli("collect", "--results-dir", str(results), env=slurm_cluster.env).returncode == 0
    merged = pd.read_parquet(results / "merged.parquet")
    assert set(merged.benchmark) == {"digits", "mnist"} and set(merged.framework) == {"jax", "torch"}

    proc = run_cli("report", "--results-dir", str(results), env=slurm_cluster.env)
    assert proc.returncode == 0, proc.stderr
    report = results / "report"
    md = (report / "report.md").read_text()
    assert "| digits | mlp | 32 | JAX |" in md and "| mnist | mlp | 64 | JAX |" in md
    # one CPU model: the training table, and the roofline bounds a real run records
    assert (report / "report.tex").read_text().count(r"\toprule") == 2  # one per table (a header nests a tabular)
    assert len((report / "report.csv").read_text().splitlines()) == 3
    assert len(list((report / "plots").glob("curves_*.png"))) == 2
    html = (report / "report.html").read_text()
    assert html.count("<img") == len(list((report / "plots").glob("*.png")))  # each also as SVG and PDF, not embedded
    for campaign in campaigns:
        assert campaign in html
        manifest = json.loads((results / campaign / "manifest.json").read_text())
        assert manifest["submissions"]["jax"]["job_id"] in html  # provenance names the Slurm jobs
