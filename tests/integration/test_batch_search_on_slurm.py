"""The largest batch that fits, found on the real local Slurm cluster under an artificial memory cap: each try
is a fresh process whose address space is capped (like `ulimit -v`), and out-of-memory tries are data."""

import pandas as pd
from helpers import BRIEF_TIMING_ARGS, REPO_ROOT, metric, run_cli

CAP = "4G"  # each framework starts in well under this; the CIFAR-10 CNN's batches then run out of it


def test_both_frameworks_find_a_limit_and_record_the_out_of_memory_tries(slurm_cluster, tmp_path):
    results = tmp_path / "results"
    proc = run_cli("--benchmark", "cifar10", "--use-case", "1", *BRIEF_TIMING_ARGS, "--find-max-batch",
                   "--memory-limit", CAP,
                   "--batch-sizes", "128", "--max-batch-limit", "16384",
                   "--profile", str(REPO_ROOT / "profiles" / "local_slurm.toml"), "--wait",
                   "--results-dir", str(results), "--scripts-dir", str(tmp_path / "scripts"),
                   env=slurm_cluster.env, timeout=1800)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    collect = run_cli("collect", "--results-dir", str(results), env=slurm_cluster.env)
    assert collect.returncode == 0, collect.stderr
    assert "Largest batch that fits" in collect.stdout and "4 GiB" in collect.stdout
    merged = pd.read_parquet(results / "merged.parquet")
    for framework in ("jax", "torch"):
        rows = merged[merged.framework == framework]
        assert rows.slurm_job_id.iloc[0] != ""
        largest, failed = metric(rows, "max_batch_size"), metric(rows, "min_batch_size_out_of_memory")
        assert 128 <= largest < failed <= 16384  # a limit was found below the search's own ceiling
        assert failed - largest <= largest // 32
        attempts = rows[rows.metric == "batch_search_attempt"].sort_values("step")["value"].to_list()
        fits = rows[rows.metric == "batch_search_attempt_fits"].sort_values("step")["value"].to_list()
        assert attempts[0] == 128  # the search starts where it was told to
        assert metric(rows, "out_of_memory_attempts") == fits.count(0) >= 1
        assert largest in [a for a, ok in zip(attempts, fits) if ok]
        assert metric(rows, "memory_limit") == 4 * 2**30
