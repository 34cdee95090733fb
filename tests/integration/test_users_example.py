"""The user's own example, `main.py --benchmark cifar10 --use-case 3`, on the real local Slurm cluster.

Only what a cluster user must add is added: where the data is, the cluster profile, and --wait; and a brief
repeated measurement (BRIEF_TIMING_ARGS: 5 timed steps, no minimum duration), which took 95 of the two cells' 120 s
of CPU at the defaults (50 pipelined steps, 50 of each per-sample timing) and is not what this test is about. The
data is CIFAR-10's python batches in the real file format (random pixels: the point here is the path, not accuracy).
"""

import json

import pandas as pd
from helpers import BRIEF_TIMING_ARGS, REPO_ROOT, metric, run_cli, write_cifar10_folder


def test_cifar10_dp_sgd_renders_submits_and_collects(slurm_cluster, tmp_path):
    data = write_cifar10_folder(tmp_path / "cifar10", per_batch=200)  # 900 training images after validation
    results, scripts = tmp_path / "results", tmp_path / "slurm_scripts"
    proc = run_cli("--benchmark", "cifar10", "--use-case", "3", "--data-dir", str(data),
                   "--profile", str(REPO_ROOT / "profiles" / "local_slurm.toml"), "--wait", *BRIEF_TIMING_ARGS,
                   "--results-dir", str(results), "--scripts-dir", str(scripts), env=slurm_cluster.env, timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert sorted(p.name for p in scripts.glob("*.sh")) == ["jax_cifar10_3.sh", "torch_cifar10_3.sh"]
    manifest = json.loads(next(results.glob("*/manifest.json")).read_text())

    collect = run_cli("collect", "--results-dir", str(results), env=slurm_cluster.env)
    assert collect.returncode == 0, collect.stderr
    assert "cifar10    3         cnn    128" in collect.stdout
    merged = pd.read_parquet(results / "merged.parquet")
    assert set(merged.framework) == {"jax", "torch"} and (merged.use_case == 3).all()
    assert merged.init_weights_sha256.nunique() == 1
    for framework, submission in manifest["submissions"].items():
        rows = merged[merged.framework == framework]
        assert set(rows.slurm_array_job_id) == {submission["job_id"]}
        assert metric(rows, "clip_norm") == 1.0 and metric(rows, "noise_multiplier") == 1.0
        assert metric(rows, "vectorization_speedup") > 0 and metric(rows, "throughput") > 0
        assert len(rows[rows.metric == "train_loss"]) == 900 // 128
        # The budget was planned for the 900 images the folder holds (counted at plan time), so the rows carry it, at
        # delta 1e-3: the largest power of ten below 1/900.
        assert 0 < metric(rows, "privacy_epsilon") < float("inf") and metric(rows, "privacy_delta") == 1e-3
