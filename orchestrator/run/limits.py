"""What the cluster lets a campaign hold: tasks per array job (MaxArraySize, or the profile's cap) and jobs queued
at once (MaxJobCount, the association's and the QOS's submit limits), read from scontrol and sacctmgr where they
answer; a limit that cannot be read is no limit."""

from __future__ import annotations

import getpass
import os

from orchestrator.errors import UsageError
from orchestrator.plan.profile import ClusterProfile
from orchestrator.plan.render import PAIRED, RenderedScript, pack_jobs
from orchestrator.run import queue


def cluster_max_array_size() -> int | None:
    """The cluster's MaxArraySize (array indices run from 0 to MaxArraySize-1); None when scontrol cannot say."""
    found = cluster_config().get("MaxArraySize", "")
    return int(found) if found.isdigit() else None


def array_limit(profile: ClusterProfile) -> int | None:
    """Most tasks one array job may hold here: the cluster's MaxArraySize, or the profile's cap if smaller."""
    limits = [n for n in (cluster_max_array_size(), profile.max_array_size) if n is not None]
    return min(limits) if limits else None


def cluster_config() -> dict[str, str]:
    """`scontrol show config` as {name: value}; {} when scontrol is absent, slow or refuses."""
    proc = queue.answered("scontrol", ["show", "config"], timeout_s=30)
    pairs = (line.split("=", 1) for line in (proc.stdout if proc else "").splitlines() if "=" in line)
    return {name.strip(): value.strip() for name, value in pairs}


def sacctmgr_rows(*args: str) -> list[list[str]]:
    """`sacctmgr -n -P show ARGS` as rows of fields; [] when sacctmgr is absent, slow or refuses."""
    proc = queue.answered("sacctmgr", ["-n", "-P", "show", *args], timeout_s=30)
    return [line.split("|") for line in proc.stdout.splitlines() if line.strip()] if proc else []


def profile_qos(profile: ClusterProfile) -> str | None:
    """The QOS the profile asks for (its qos, or --qos=NAME in its extra sbatch options), if any."""
    if profile.qos:
        return profile.qos
    for option in profile.extra_sbatch:
        if option.startswith("--qos="):
            return option.split("=", 1)[1]
    return None


def submit_limits(profile: ClusterProfile, user: str | None = None) -> list[tuple[str, int]]:
    """The limits on how many jobs (each array task counts as one) may be queued, where they can be read:
    the controller's MaxJobCount, the user's association's MaxSubmitJobs and GrpSubmitJobs, and the QOS's
    MaxSubmitJobsPerUser and GrpSubmitJobs (the profile's --qos, else the association's default QOS)."""
    limits = []
    max_jobs = cluster_config().get("MaxJobCount", "")
    if max_jobs.isdigit():
        limits.append(("the controller's MaxJobCount", int(max_jobs)))
    who = user or os.environ.get("USER") or getpass.getuser()
    where = [f"user={who}"] + ([f"account={profile.account}"] if profile.account else [])
    qos = profile_qos(profile)
    for account, max_submit, grp_submit, default_qos in (
            row[:4] for row in sacctmgr_rows("assoc", "where", *where, "format=Account,MaxSubmit,GrpSubmit,DefaultQOS")
            if len(row) >= 4):
        for value, name in ((max_submit, "MaxSubmitJobs"), (grp_submit, "GrpSubmitJobs")):
            if value.isdigit():
                limits.append((f"{name} of your association with account {account}", int(value)))
        qos = qos or default_qos or None
    qos = qos or "normal"
    for row in sacctmgr_rows("qos", "where", f"name={qos}", "format=Name,MaxSubmitPU,GrpSubmit"):
        if len(row) >= 3:
            for value, name in ((row[1], "MaxSubmitJobsPerUser"), (row[2], "GrpSubmitJobs")):
                if value.isdigit():
                    limits.append((f"{name} of QOS {row[0]}", int(value)))
    return limits


def check_submit_limits(profile: ClusterProfile, scripts: list[RenderedScript]) -> None:
    """Refuse, before anything is written, a campaign with more array tasks than a known limit lets be queued; the
    sentence says the --pack that would fit, where the campaign runs both frameworks."""
    tasks = sum(script.tasks for script in scripts)
    over = [(name, limit) for name, limit in submit_limits(profile) if tasks > limit]
    if over:
        name, limit = min(over, key=lambda item: item[1])
        pairs = pairs_per_script(scripts)
        pack = pack_that_fits(pairs, limit)
        jobs = sum(pack_jobs(count, pack) for count in pairs) if pack else 0
        packed = f", pair them into fewer jobs (--paired{f' --pack {pack}' if pack > 1 else ''}: {jobs})" if pack else ""
        raise UsageError(
            f"the campaign has {tasks} array tasks and Slurm counts each as a job, but {name} is {limit}: plan at "
            f"most {limit} (fewer models, batch sizes, precisions or trials per command){packed}, or ask for a "
            "higher limit")


def pairs_per_script(scripts: list[RenderedScript]) -> list[int]:
    """The JAX/PyTorch pairs each paired script would hold: a paired script's own, or where the campaign has one
    script per framework, the JAX script's cells (its PyTorch script holds the same); none without both frameworks."""
    if any(script.framework == PAIRED for script in scripts):
        return [len(script.cells) // 2 for script in scripts if script.framework == PAIRED]
    frameworks = {script.framework for script in scripts}
    return [len(script.cells) for script in scripts if script.framework == "jax"] if frameworks == {"jax", "torch"} else []


def pack_that_fits(pairs: list[int], limit: int) -> int | None:
    """The smallest --pack N whose jobs (each paired script's pairs in packs of N) number at most `limit`; None where
    none does (more scripts than the limit) or there are no pairs."""
    for size in range(1, max(pairs, default=0) + 1):
        if sum(pack_jobs(count, size) for count in pairs) <= limit:
            return size
    return None
