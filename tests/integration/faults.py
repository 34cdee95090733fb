"""Shared steps of the fault tests on the real local Slurm cluster: launch a tiny JAX campaign (digits, MLP,
use case 1), wait for states, and check that resubmit + collect end with the complete matrix, each cell once."""

from __future__ import annotations

import contextlib
import datetime
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest
from helpers import BRIEF_TIMING_ARGS, REPO_ROOT, run_cli, wait_until

LOCAL_PROFILE = REPO_ROOT / "profiles" / "local_slurm.toml"


class Campaign:
    """One campaign in tmp_path, driven through the real CLI against the cluster in env."""

    def __init__(self, tmp_path: Path, env: dict, profile_extra: str = "") -> None:
        self.tmp_path, self.env = tmp_path, env
        self.results, self.scripts = tmp_path / "results", tmp_path / "scripts"
        self.profile = tmp_path / "profile.toml"
        self.write_profile(profile_extra)

    def write_profile(self, extra: str) -> None:
        """The local cluster's profile, with the keys set in `extra` (TOML lines) replaced."""
        keys = {line.split("=")[0].strip() for line in extra.splitlines() if "=" in line}
        base = [line for line in LOCAL_PROFILE.read_text().splitlines() if line.split("=")[0].strip() not in keys]
        self.profile.write_text("\n".join(base) + "\n" + extra)

    def cli(self, *args: str, timeout: float = 900):
        return run_cli(*args, "--results-dir", str(self.results), env=self.env, timeout=timeout)

    def launch_args(self, *args: str) -> list[str]:
        """The arguments of `python main.py --benchmark digits --use-case 1 --frameworks jax ARGS` with this
        campaign's profile and folders: the same command each time, as a user runs it again."""
        return ["--benchmark", "digits", "--use-case", "1", *BRIEF_TIMING_ARGS, "--frameworks", "jax", *args,
                "--profile", str(self.profile), "--results-dir", str(self.results), "--scripts-dir", str(self.scripts)]

    def launch(self, *args: str, env: dict | None = None, timeout: float = 900):
        """The launch command (launch_args), in this campaign's environment or `env`."""
        return run_cli(*self.launch_args(*args), env=env or self.env, timeout=timeout)

    @property
    def folder(self) -> Path:
        (manifest,) = self.results.glob("*/manifest.json")
        return manifest.parent

    @property
    def manifest(self) -> dict:
        return json.loads((self.folder / "manifest.json").read_text())

    def task(self, index: int, framework: str = "jax") -> str:
        return self.manifest["submissions"][framework]["task_ids"][index]

    def result(self, index: int, framework: str = "jax") -> Path:
        return Path(next(c["results"] for c in self.manifest["cells"]
                         if c["framework"] == framework and c["array_index"] == index))

    def failure(self, index: int, framework: str = "jax") -> dict | None:
        from bench_contract.run.failure import failure_path, read_failure

        return read_failure(failure_path(self.result(index, framework)))

    def wait_until(self, condition, what: str, timeout_s: float = 600, poll_s: float = 0.5):
        """helpers.wait_until with the cluster's pace: Slurm's state changes take seconds, not milliseconds."""
        return wait_until(condition, seconds=timeout_s, what=what, poll_s=poll_s)

    def squeue_field(self, task_id: str, field: str) -> str:
        """One field of the task as squeue prints it (`-o FIELD`); empty once the task has left the queue."""
        return subprocess.run(["squeue", "-h", "-r", "-j", task_id, "-o", field], capture_output=True, text=True,
                              env=self.env).stdout.strip()

    def slurm_state(self, task_id: str) -> str:
        return self.squeue_field(task_id, "%T")

    def node_of(self, task_id: str) -> str:
        return self.squeue_field(task_id, "%N")

    def start_time(self, task_id: str) -> datetime.datetime:
        """When Slurm started the task, in this machine's local time (as squeue prints it)."""
        start = subprocess.run(["squeue", "-h", "-r", "-j", task_id, "-o", "%S"], capture_output=True, text=True,
                               env=self.env, check=True).stdout.strip()
        return datetime.datetime.fromisoformat(start)

    def jobs_on(self, node: str) -> list[str]:
        return subprocess.run(["squeue", "-h", "-r", "-w", node, "-o", "%i"], capture_output=True, text=True,
                              env=self.env).stdout.split()

    @contextlib.contextmanager
    def node_set_down(self, task_id: str) -> Iterator[str]:
        """The task's node set down for the block (Slurm fails the jobs on it), then resumed and back. Skips the
        test where the node also runs another job: the cluster is shared, and only the test's own task may fail."""
        node = self.node_of(task_id)
        others = [job for job in self.jobs_on(node) if job != task_id]
        if others:
            pytest.skip(f"node {node} also runs {', '.join(others)}; not taking it down")
        subprocess.run(["scontrol", "update", f"nodename={node}", "state=down", "reason=fault test"], check=True,
                       env=self.env)
        try:
            yield node
        finally:
            # ReturnToService=2 may have brought it back already (its slurmd still answers): resume is then refused.
            subprocess.run(["scontrol", "update", f"nodename={node}", "state=resume"], env=self.env)
            self.wait_until(lambda: subprocess.run(["sinfo", "-h", "-n", node, "-o", "%T"], capture_output=True,
                                                   text=True, env=self.env).stdout.strip() in
                            ("idle", "mixed", "allocated"), f"node {node} back", timeout_s=60)

    def wait_running(self, index: int, framework: str = "jax") -> str:
        """Wait until the cell's task runs."""
        task_id = self.task(index, framework)
        self.wait_until(lambda: self.slurm_state(task_id) == "RUNNING", f"task {task_id} running")
        return task_id

    def wait_training(self, index: int, framework: str = "jax") -> str:
        """Wait until the cell's task runs and its heartbeat says it has begun training: the task is then past its
        imports, its data and the initial weights, and compiling its step or training (a signal then finds it in
        the training loop's hands, however loaded the machine)."""
        from bench_contract.run.progress import heartbeat_path

        task_id = self.wait_running(index, framework)
        heartbeat = heartbeat_path(self.result(index, framework))
        self.wait_until(lambda: heartbeat.is_file() and json.loads(heartbeat.read_text()).get("phase") == "training",
                        f"task {task_id} training (its heartbeat {heartbeat})")
        return task_id

    def watch(self) -> subprocess.CompletedProcess:
        """Until every cell has ended; exit 1 when some ended without a result."""
        return self.cli("watch", "--interval", "1")

    def status(self) -> str:
        proc = self.cli("status")
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    def check_complete_after_resubmit(self) -> pd.DataFrame:
        """resubmit --wait, then collect: every cell of the campaign has one run in the merged dataset, and
        no cell is missing."""
        resubmitted = self.cli("resubmit", "--wait")
        assert resubmitted.returncode == 0, resubmitted.stdout + resubmitted.stderr
        return self.check_complete()

    def check_complete_after_same_command(self, args: tuple[str, ...], resubmitted: list[int]) -> pd.DataFrame:
        """The same `launch` command again, waiting: it submits only the cells `resubmitted` (array indices), and
        collect then has every cell once. Returns the merged results."""
        again = self.launch(*args, "--wait")
        assert again.returncode == 0, again.stdout + again.stderr
        assert "planned by the same command before" in again.stdout
        assert [r["indices"] for r in self.manifest["resubmissions"]] == [resubmitted]
        return self.check_complete()

    def check_complete(self) -> pd.DataFrame:
        collected = self.cli("collect")
        assert collected.returncode == 0, collected.stderr
        assert "have no result" not in collected.stdout, collected.stdout
        assert pq.read_table(self.results / "failures.parquet").num_rows == 0
        merged = pd.read_parquet(self.results / "merged.parquet")
        cells = {c["cell_id"] for c in self.manifest["cells"]}
        assert set(merged.cell_id) == cells
        # Each cell exactly once: one run (one start, one Slurm job) per cell.
        runs = merged.groupby("cell_id")[["started_at", "slurm_job_id"]].nunique()
        assert (runs == 1).all().all(), runs
        assert (merged.metric == "throughput").sum() == len(cells)
        return merged
