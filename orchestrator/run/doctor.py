"""`main.py doctor`: is this setup ready to run a campaign? Each check says what it found and how to fix it.

Framework checks run inside each framework's own environment (a subprocess), so the orchestrator still
never imports jax or torch.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from orchestrator import PROJECT_ROOT, suggest
from orchestrator.errors import OrchestratorError, UsageError
from orchestrator.plan import catalog, rules
from orchestrator.plan.discovery import partition_gpus, profile_for
from orchestrator.plan.profile import ClusterProfile
from orchestrator.plan.settings import RunSettings
from orchestrator.run import queue
from orchestrator.run.envs import check_container, check_runnable, check_site_environment, interpreter_command
from orchestrator.tables import format_table

# Printed as JSON by each environment's python: framework version, devices it sees, NVML's GPU names.
PROBES = {
    "jax": "import json, jax; from bench_contract.measure.device import nvml_gpu_names; "
           "print(json.dumps({'version': jax.__version__, "
           "'devices': [f'{d.platform}:{d.device_kind}' for d in jax.devices()], 'nvml': nvml_gpu_names()}))",
    "torch": "import json, torch; from bench_contract.measure.device import nvml_gpu_names; "
             "n = torch.cuda.device_count() if torch.cuda.is_available() else 0; "
             "print(json.dumps({'version': torch.__version__, "
             "'devices': [f'cuda:{torch.cuda.get_device_name(i)}' for i in range(n)] or ['cpu'], "
             "'nvml': nvml_gpu_names()}))",
}


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool | None  # None: the check could not run here, and says why (never a pass)
    detail: str

    @property
    def word(self) -> str:
        return {True: "ok", False: "FAIL", None: "not run"}[self.ok]


def no_gpu_cause(framework: str) -> str:
    """Why a framework that sees no GPU on a node with one does not, in words that say what to change; the envs
    command carries the profile doctor was given, whose recipe the user is told to change."""
    if framework == "jax":
        return (f"its environment has the CPU build of JAX; set jax_recipe = 'cuda12' or 'cuda13' in the profile "
                f"and run `{suggest.command('envs')}` again")
    return "its PyTorch build has no CUDA (or does not match the driver); check the torch wheel in " \
           "torch_backend/requirements.txt"


def check_environment(framework: str, profile: ClusterProfile, on_node: bool = False) -> list[Check]:
    """The environment imports its framework, and the framework sees the devices the profile asks for: here,
    or (on_node) in a short job on the profile's partition, with the profile's GPUs."""
    where = "on a compute node" if on_node else "here"
    python = profile.python_path(framework)
    site = profile.site_environment(framework)
    try:  # envs' own checks, in the sentences `envs`, validate and a launch say them in
        if site is None:
            check_runnable(framework, profile)
        elif not on_node:
            check_site_environment(framework, profile)
        elif site.container:  # the runtime and the image here; the job step imports the rest on the node
            check_container(framework, site)
    except OrchestratorError as exc:
        return [Check(f"{framework} environment", False, str(exc).removeprefix(f"{framework}: "))]
    command = interpreter_command(framework, profile, ["-c", PROBES[framework]])
    if on_node:
        command = [*srun_prefix(profile), *command]
    try:
        proc = subprocess.run(command, check=False, capture_output=True, text=True, timeout=600, cwd=PROJECT_ROOT,
                              env={**os.environ, "PYTHONPATH": str(PROJECT_ROOT)})
    except (OSError, subprocess.TimeoutExpired) as exc:
        return [Check(f"{framework} environment", None, f"could not run the check {where}: {exc}")]
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return [Check(f"{framework} environment", False, f"{python} cannot import {framework} {where}: {last}")]
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    kind = (f"container {site.container} ({site.runtime}), not locked" if site and site.container
            else f"site environment {python}, not locked" if site else f"{python.parent.parent}, built from its lock file")
    return [
        Check(f"{framework} environment", True, f"{framework} {found['version']} in {kind}"),
        device_check(framework, found, profile.gpus_per_task, on_node),
    ]


def device_check(framework: str, found: dict, gpus_per_task: int, on_node: bool) -> Check:
    """Does the framework see what the profile asks for? A GPU on the node that the framework cannot see fails
    with its cause; on a machine without GPUs (a login node), a GPU profile cannot be checked here."""
    name, seen = f"{framework} devices", ", ".join(found["devices"])
    gpus = found["nvml"]
    uses_gpu = any(not d.lower().startswith("cpu") for d in found["devices"])
    if not gpus_per_task:
        return Check(name, True, f"{seen}; the profile asks for no GPU (gpus_per_task = 0): both run on CPUs")
    if uses_gpu:
        return Check(name, True, f"{seen}; NVML GPUs: {', '.join(gpus) or 'none'}")
    if gpus:
        return Check(name, False, f"{catalog.FRAMEWORKS[framework]} sees no GPU on a node with {len(gpus)} GPU(s) "
                                  f"({', '.join(gpus)}): {no_gpu_cause(framework)}")
    if on_node:
        return Check(name, False, f"{catalog.FRAMEWORKS[framework]} sees only {seen} on a node of the profile's "
                                  f"partition, which asks for {gpus_per_task} GPU per task: NVML finds no GPU there")
    return Check(name, None, f"{seen}: no GPU on this machine (a login node?); run "
                             f"`{suggest.command('doctor', '--on-node')}` to check on a compute node")


def srun_prefix(profile: ClusterProfile) -> list[str]:
    """A short one-task job step on the profile's partition, of its kind of node, with its GPUs: the devices a task
    would see."""
    options = ["srun", "--nodes=1", "--ntasks=1", "--time=10", "--job-name=jaxtorch-doctor"]
    options += [f"--{o}={v}" for o, v in [*profile.queue_options(), *profile.task_options(profile.gpus_per_task)]]
    # A system's kind of node (its constraint, added to extra_sbatch by for_system): the node a job of it gets.
    return options + [o for o in profile.extra_sbatch if o.partition("=")[0] == "--constraint"]


def slurm_partitions() -> list[str] | None:
    """Partitions `sinfo` knows (the default one is marked '*' by sinfo, stripped here); None where it cannot say."""
    proc = queue.answered("sinfo", ["-h", "-o", "%P"], timeout_s=60)
    return None if proc is None else [p.strip().rstrip("*") for p in proc.stdout.split() if p.strip()]


def check_partition(profile: ClusterProfile) -> None:
    """Refuse a partition Slurm does not know, or one without GPUs for a plan that asks for them, where sinfo can
    tell (before anything is written)."""
    if profile.partition is None:
        return
    known = slurm_partitions()
    if known is not None and profile.partition not in known:
        raise UsageError(f"partition {profile.partition!r} is unknown to sinfo; known partitions: {', '.join(known)}")
    if profile.gpus_per_task and partition_gpus(profile.partition) == 0:
        raise UsageError(f"partition {profile.partition!r} has no GPU (sinfo shows no gpu GRES there), and the plan "
                         f"asks for {profile.gpus_per_task} per task: choose a partition with GPUs, or --gpus-per-task 0")


def check_slurm(profile: ClusterProfile) -> list[Check]:
    checks = []
    missing = [c for c in ("sbatch", "squeue", "sacct", "sinfo", "scancel") if shutil.which(c) is None]
    if missing:
        checks.append(Check("Slurm commands", False,
                            f"{', '.join(missing)} not on PATH: only --executor local or --dry-run will work here"))
        return checks
    checks.append(Check("Slurm commands", True, "sbatch, squeue, sacct, sinfo and scancel are on PATH"))
    partitions = slurm_partitions()
    if partitions is None:
        checks.append(Check("Slurm controller", False, "sinfo cannot reach the controller (is SLURM_CONF right?)"))
        return checks
    checks.append(Check("Slurm controller", True, f"partitions: {', '.join(partitions)}"))
    try:
        check_partition(profile)
        checks.append(Check("profile partition", True, profile.partition or "the cluster's default"))
    except UsageError as exc:
        checks.append(Check("profile partition", False, str(exc)))
    proc = queue.answered("sacct", ["-n", "-X", "-S", "now", "-o", "JobID"], timeout_s=60)
    accounting = proc is not None and queue.ACCOUNTING_OFF not in proc.stderr.lower()
    checks.append(Check("Slurm accounting", accounting,
                        "sacct answers: status reports final states" if accounting else
                        "sacct does not answer: status falls back to squeue and the result files"))
    return checks


def check_data(benchmark: str, data_dir: Path | None) -> Check:
    settings = RunSettings(epochs=1, learning_rate=0.01, optimizer="sgd", seed=0, warmup_steps=0,
                           data_source="real", data_dir=str(data_dir) if data_dir else None,
                           synthetic_samples=2048, device="auto")
    try:
        rules.check_data(benchmark, settings)
    except UsageError as exc:
        return Check(f"{benchmark} data", False, str(exc))
    where = str(data_dir) if catalog.BENCHMARKS[benchmark].needs_data_dir else "ships with its package"
    return Check(f"{benchmark} data", True, where)


def run_checks(profile: ClusterProfile, data: list[tuple[str, Path | None]], on_node: bool = False,
               systems: list[str] = ()) -> list[Check]:
    """Each framework's environment and Slurm's commands, as the jobs of each system (the profile's own values
    where it names none) would get them; then the data."""
    checks = []
    for name in profile.system_names(list(systems)):
        jobs = profile.for_system(name)
        found = [*(c for framework in catalog.FRAMEWORKS for c in check_environment(framework, jobs, on_node)),
                 *check_slurm(jobs)]
        checks += [replace(c, name=f"{c.name} ({name})") for c in found] if name else found
    checks += [check_data(benchmark, folder) for benchmark, folder in data]
    return checks


def check_setup(profile: Path | None, benchmark: str, data_dir: Path | None,
                report: Callable[[str], None] = print, on_node: bool = False,
                options: dict[str, object] | None = None, systems: list[str] = ()) -> int:
    """The doctor command: run every check for the profile (a TOML path, or the built-in one) with the command
    line's Slurm options over its values (plan.profile.OPTION_KEYS), on each of `systems` (default: the profile's
    default_system), and the benchmark's data, and report them as a table. Returns the exit code: 1 if any check
    failed."""
    catalog.benchmark(benchmark)
    loaded, discovered = profile_for(profile)
    checks = run_checks(loaded.with_options(options or {}), [(benchmark, data_dir)], on_node, systems)
    if discovered:  # what the plan would ask Slurm for without a profile, and why (plan.discovery)
        checks.insert(0, Check("profile", True, discovered))
    report(format_table(["check", "", "detail"], [[c.name, c.word, c.detail] for c in checks]))
    passed = [c for c in checks if c.ok]
    not_run = [c for c in checks if c.ok is None]
    report(f"{len(passed)} of {len(checks)} checks passed" + (f"; {len(not_run)} could not run here" if not_run else ""))
    return 1 if any(c.ok is False for c in checks) else 0
