"""Trials and paired runs, as planned and rendered: every trial has its own spec line and result file, and a
paired script runs JAX and PyTorch alternately, each in its own environment. Nothing is submitted here."""

import json
import os
import shlex
import subprocess
from pathlib import Path

from helpers import driver_passthrough, fake_tools, read_manifest, run_cli

from bench_contract.spec import JobSpec


def logging_env(env_dir: Path, framework: str, log: Path) -> None:
    """An environment whose activate marks it, and whose `python` appends which environment ran it, with what. The
    mark adds to any mark already there ("jax+torch"), so a run that inherited another environment says so."""
    bin_dir = env_dir / framework / "bin"
    fake_tools(bin_dir, python=f'{driver_passthrough()}'
                               f'echo "$ACTIVE_ENV $$ ${{XLA_PYTHON_CLIENT_PREALLOCATE:-unset}} $*" >> '
                               f'{shlex.quote(str(log))}\n')
    (bin_dir / "activate").write_text(f'export PATH={shlex.quote(str(bin_dir))}:"$PATH"\n'
                                      f'export ACTIVE_ENV="${{ACTIVE_ENV:+$ACTIVE_ENV+}}{framework}"\n')


def logged_dry_run(tmp_path: Path, *args: str):
    env_dir, log = tmp_path / "envs", tmp_path / "runs.log"
    if not env_dir.exists():
        for fw in ("jax", "torch"):
            logging_env(env_dir, fw, log)
    profile = tmp_path / "p.toml"
    # A time limit of its own: the rule's time budget (test_sequential_trials) counts from it.
    profile.write_text(f"env_dir = {json.dumps(str(env_dir))}\ntime_limit = \"00:30:00\"\n")
    proc = run_cli("--benchmark", "digits", "--use-case", "1", "--batch-sizes", "16,32", "--dry-run",
                   "--profile", str(profile), "--results-dir", str(tmp_path / "results"),
                   "--scripts-dir", str(tmp_path / "scripts"), *args)
    return proc, log


def test_each_trial_is_its_own_array_task_spec_and_result_file(tmp_path):
    proc, _ = logged_dry_run(tmp_path, "--trials", "3")
    assert proc.returncode == 0, proc.stderr
    script = (tmp_path / "scripts" / "jax_digits_1.sh").read_text()
    assert "#SBATCH --array=0-5" in script  # 2 cells x 3 trials
    cells = [c for c in read_manifest(tmp_path / "results")["cells"] if c["framework"] == "jax"]
    assert [(c["array_index"], c["trial"]) for c in cells] == [(i, i % 3) for i in range(6)]
    specs = next((tmp_path / "results").glob("*/specs/jax.jsonl"))
    read = [JobSpec.read(specs, i) for i in range(6)]
    assert [s.trial for s in read] == [0, 1, 2, 0, 1, 2] and {s.trials for s in read} == {3}
    assert read[0].cell_id == read[2].cell_id != read[3].cell_id
    paths = [s.results_path for s in read]
    assert len(set(paths)) == 6 and paths[1].endswith(f"{read[1].cell_id}-trial1.parquet")
    assert [c["results"] for c in cells] == paths


def test_a_paired_script_runs_both_frameworks_alternately_each_in_its_own_environment(tmp_path):
    proc, log = logged_dry_run(tmp_path, "--paired", "--trials", "2")
    assert proc.returncode == 0, proc.stderr
    scripts = sorted(p.name for p in (tmp_path / "scripts").iterdir())
    assert scripts == ["paired_digits_1.sh"]  # one script for both frameworks, not one per framework
    path = tmp_path / "scripts" / "paired_digits_1.sh"
    text = path.read_text()
    assert "#SBATCH --array=0-1" in text  # one task per cell pair
    subprocess.run(["bash", "-n", str(path)], check=True)
    run = subprocess.run(["bash", str(path)], capture_output=True, text=True, cwd=tmp_path,
                         env={**os.environ, "SLURM_ARRAY_TASK_ID": "1"})
    assert run.returncode == 0, run.stderr
    runs = [line.split() for line in log.read_text().splitlines()]
    # Pair 1, trials 0 and 1: lines 2 and 3 of each specs file, JAX then PyTorch, then PyTorch then JAX (the order
    # alternates, so that a position effect within a pair falls on both).
    assert [(env, args[-1]) for env, _, _, *args in runs] == [("jax", "2"), ("torch", "2"), ("torch", "3"), ("jax", "3")]
    assert [args[:2] for _, _, _, *args in runs] == [["-m", f"{fw}_backend.run"] for fw in ("jax", "torch", "torch", "jax")]
    assert len({pid for _, pid, _, *_ in runs}) == 4  # each run its own process
    # Each run entered its own environment only (the paired job's driver runs in JAX's, and starts every run from the
    # job's environment as it was before), and JAX's export is set in JAX's runs only.
    assert [prealloc for _, _, prealloc, *_ in runs] == ["false", "unset", "unset", "false"]
    assert "JAX then PyTorch in even trials, the other way round in odd ones" in run.stdout
    for env, _, _, *args in runs:
        spec = JobSpec.read(args[2], int(args[3]))
        assert spec.framework == env and spec.paired and spec.trial == int(args[3]) - 2
    cells = read_manifest(tmp_path / "results")["cells"]
    assert {c["script"] for c in cells} == {"paired"}
    assert sorted((c["framework"], c["array_index"], c["trial"]) for c in cells) == sorted(
        (fw, pair, trial) for fw in ("jax", "torch") for pair in (0, 1) for trial in (0, 1))


def test_a_failed_run_does_not_stop_the_pair_but_fails_the_task(tmp_path):
    proc, log = logged_dry_run(tmp_path, "--paired", "--trials", "2")
    assert proc.returncode == 0, proc.stderr
    python = tmp_path / "envs" / "jax" / "bin" / "python"
    python.write_text(python.read_text() + "exit 3\n")
    run = subprocess.run(["bash", str(tmp_path / "scripts" / "paired_digits_1.sh")], capture_output=True,
                         text=True, env={**os.environ, "SLURM_ARRAY_TASK_ID": "0"})
    assert run.returncode == 1 and "2 run(s) of pair 0 failed" in run.stderr
    assert [line.split()[0] for line in log.read_text().splitlines()] == ["jax", "torch", "torch", "jax"]


def test_pairing_needs_both_frameworks_and_one_process_per_cell(tmp_path):
    proc, _ = logged_dry_run(tmp_path, "--paired", "--frameworks", "jax")
    assert proc.returncode == 2 and "--paired runs JAX and PyTorch alternately" in proc.stderr
    proc = run_cli("--benchmark", "digits", "--use-case", "2", "--paired", "--nodes", "2", "--dry-run",
                   "--results-dir", str(tmp_path / "r2"), "--scripts-dir", str(tmp_path / "s2"))
    assert proc.returncode == 2 and "cannot be paired" in proc.stderr
    assert not (tmp_path / "s2").exists()
    proc, _ = logged_dry_run(tmp_path, "--trials", "0")
    assert proc.returncode == 2 and "--trials must be at least 1" in proc.stderr


def test_collect_still_merges_result_files_written_before_trials_and_pairing(tmp_path):
    import pandas as pd
    import pyarrow.parquet as pq
    from helpers import task_file

    from bench_contract.results import read_task_table

    old = task_file(tmp_path, "jax", 32, 2000.0)
    table = read_task_table(old)  # the wide table, written back below as a file of the wide layout
    pq.write_table(table.drop_columns(["trial", "pair_order"]), old)  # as a backend wrote it before
    task_file(tmp_path, "torch", 32, 1000.0)
    proc = run_cli("collect", "--results-dir", str(tmp_path))
    assert proc.returncode == 0 and "skipped" not in proc.stderr, proc.stderr
    merged = pd.read_parquet(tmp_path / "merged.parquet")
    assert len(merged[merged.framework == "jax"]) == table.num_rows
    assert (merged.trial == 0).all() and (merged.pair_order == "").all()  # ran once, unpaired


def test_a_merged_dataset_from_before_the_new_columns_is_rebuilt_from_the_task_files(tmp_path):
    import pandas as pd
    from helpers import task_file

    task_file(tmp_path, "jax", 32, 2000.0)
    assert run_cli("collect", "--results-dir", str(tmp_path)).returncode == 0
    index_path = tmp_path / "merged.parquet" / "_index.json"
    index = json.loads(index_path.read_text())
    del index["columns"]  # an index written by the collect of before, whose parts lack trial and pair_order
    index_path.write_text(json.dumps(index))
    task_file(tmp_path, "torch", 32, 1000.0)
    proc = run_cli("collect", "--results-dir", str(tmp_path))
    assert proc.returncode == 0 and "from scratch" in proc.stdout, proc.stdout + proc.stderr
    merged = pd.read_parquet(tmp_path / "merged.parquet")
    assert set(merged.framework) == {"jax", "torch"} and "trial" in merged


def test_a_paired_script_quotes_hostile_paths_and_runs_only_the_backends(tmp_path):
    base = tmp_path / "a b'c$(touch PWNED);`touch PWNED2`"
    base.mkdir()
    proc, log = logged_dry_run(base, "--paired")
    assert proc.returncode == 0, proc.stderr
    path = base / "scripts" / "paired_digits_1.sh"
    subprocess.run(["bash", "-n", str(path)], check=True)
    run = subprocess.run(["bash", str(path)], capture_output=True, text=True, cwd=tmp_path,
                         env={**os.environ, "SLURM_ARRAY_TASK_ID": "0"})
    assert run.returncode == 0, run.stderr
    assert not list(tmp_path.rglob("PWNED*")), "a value in the script was executed"
    runs = log.read_text().splitlines()
    assert [line.split()[0] for line in runs] == ["jax", "torch"]
    for line, framework in zip(runs, ("jax", "torch")):
        specs = line.split(" -m ")[1].removeprefix(f"{framework}_backend.run ").rsplit(" ", 1)[0]
        assert Path(specs).is_file() and Path(specs).is_relative_to(base)
