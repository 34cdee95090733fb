"""--tune on the real local Slurm cluster, end to end: digits use cases 1 and 5, two configurations per cell and
framework. The tries run as their own campaign and are waited for, each framework's choice is recorded, the
campaign pairs out of the box with out of the box and tuned with tuned, and collect prints both speed-ups with their
intervals and both frameworks' ladders."""

import json

import pandas as pd
from helpers import BRIEF_TIMING_ARGS, REPO_ROOT, run_cli

BUDGET = 2
USE_CASES = (1, 5)


def test_tune_runs_the_tries_then_both_levels_paired_and_collect_shows_both_speed_ups(slurm_cluster, tmp_path):
    results = tmp_path / "results"
    proc = run_cli("--benchmark", "digits", "--use-case", ",".join(map(str, USE_CASES)), "--batch-sizes", "32",
                   "--epochs", "1", "--warmup-steps", "2", *BRIEF_TIMING_ARGS, "--device", "cpu",
                   "--tune", str(BUDGET), "--trials", "2", "--profile", str(REPO_ROOT / "profiles" / "local_slurm.toml"),
                   "--wait", "--results-dir", str(results), "--scripts-dir", str(tmp_path / "scripts"),
                   env=slurm_cluster.env, timeout=2400)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("Tuning ladder, ") == 2 * len(USE_CASES)  # said as soon as the tries are judged

    # The tries: their own campaign, in the hidden folder, every try of both frameworks with a result.
    (tries,) = (results / ".tuning").glob("*/manifest.json")
    assert len(list(tries.parent.glob("rows/*/*.parquet"))) == 2 * len(USE_CASES) * BUDGET
    # The campaign: its record of every try and the choice, the same budget for both frameworks.
    (campaign,) = results.glob("*/tuning.json")
    record = json.loads(campaign.read_text())
    assert record["budget"] == BUDGET and record["tries_campaign"] == tries.parent.name
    assert sorted((c["framework"], c["use_case"]) for c in record["cells"]) == sorted(
        (fw, uc) for fw in ("jax", "torch") for uc in USE_CASES)
    for cell in record["cells"]:
        assert len(cell["tries"]) == BUDGET and cell["tries"][0]["configuration"] == {}
        assert cell["chosen"] in [t["configuration"] for t in cell["tries"] if not t["dropped"]]

    collect = run_cli("collect", "--results-dir", str(results), env=slurm_cluster.env)
    assert collect.returncode == 0, collect.stdout + collect.stderr
    assert "without a result" not in collect.stdout
    # Both speed-ups of each cell side by side, each with its interval.
    table = collect.stdout.split("Equal effort: out of the box and tuned")[1].split("\n\n")[0]
    rows = [line for line in table.splitlines() if line.lstrip().startswith("CPU") or " digits " in line]
    assert len(rows) == len(USE_CASES), table
    assert all(line.count("x [") == 2 for line in rows), table
    assert collect.stdout.count("Tuning ladder, JAX") == collect.stdout.count("Tuning ladder, PyTorch") == len(USE_CASES)

    # Each tuned run ran the configuration its framework's tries chose, and recorded it with the budget.
    merged = pd.read_parquet(results / "merged.parquet", columns=["campaign", "framework", "use_case", "settings",
                                                                  "framework_options", "trial"])
    runs = merged.drop_duplicates(["campaign", "framework", "use_case", "settings", "trial"])
    assert set(runs["campaign"]) == {campaign.parent.name}  # the tries are not in the comparison
    chosen = {(c["framework"], c["use_case"]): c["chosen"] for c in record["cells"]}
    levels = runs["settings"].map(lambda s: json.loads(s)["tuning"])
    assert sorted(levels.value_counts().items()) == [("out_of_the_box", 8), ("tuned", 8)]  # 2 trials x 2 x 2
    for (_, run), level in zip(runs.iterrows(), levels):
        options = json.loads(run["framework_options"])
        if level == "tuned":
            assert options["tuning"] == {"level": "tuned", "budget": BUDGET}
            assert options["tuned"] == chosen[run["framework"], run["use_case"]]
        else:
            assert "tuning" not in options
