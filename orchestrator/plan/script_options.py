"""The sbatch options every rendered script writes itself (orchestrator.plan.render.sbatch_directives), each with what
sets it instead: a profile's extra_sbatch comes later in the script and would win, so it may not set them again."""

from __future__ import annotations

LOG = "status and collect read each task's log where the script's --output puts it"

# Option -> why the script owns it, and what sets it.
ALWAYS = {
    "job-name": "each array is found again in Slurm by the job name it is given",
    "array": "each array index is a cell, and the profile's array_parallelism sets the throttle",
    "output": LOG, "error": LOG, "open-mode": LOG,
    "signal": "the profile's warning_signal and warning_seconds set it",
    "requeue": "the profile's requeue sets it", "no-requeue": "the profile's requeue sets it",
    "nodes": "the command's --nodes sets it", "ntasks": "the command's --tasks-per-node sets it",
    "ntasks-per-node": "the command's --tasks-per-node sets it",
    "cpus-per-task": "the profile's cpus_per_task sets it, and the rows record it",
    "gres": "the profile's gpus_per_task and gpu_type set it", "gpus": "the profile's gpus_per_task sets it",
    "gpus-per-node": "the profile's gpus_per_task sets it", "gpus-per-task": "the profile's gpus_per_task sets it",
    "time": "the profile's time_limit (or --time) sets it",
    "wrap": "the rendered script is the job",
}
# Written where one of the profile keys is set: extra_sbatch may set them in its place (--qos has its own check).
# Slurm takes memory one way only, so either memory key owns both options.
MEMORY_KEYS = ("mem", "mem_per_gpu")
WHERE_SET = {"partition": ("partition",), "account": ("account",), "mem": MEMORY_KEYS, "mem-per-gpu": MEMORY_KEYS}


def owned_option(option: str, set_keys: set[str]) -> tuple[str, str] | None:
    """(the script's option, why) where an extra_sbatch `option` (--name or --name=value) sets one the script owns,
    the profile's keys `set_keys` being set; None otherwise. sbatch reads an unambiguous abbreviation of a long
    option as the option (getopt), so `--out=...` is --output: any prefix of an owned option counts."""
    name = option.removeprefix("--").partition("=")[0]
    owned = dict(ALWAYS)
    for full, keys in WHERE_SET.items():
        key = next((k for k in keys if k in set_keys), None)
        if key:
            owned[full] = f"the profile's {key} sets it"
    if name in owned:  # the option itself, before any it abbreviates (--mem, not --mem-per-gpu)
        return name, owned[name]
    return next(((full, why) for full, why in owned.items() if full.startswith(name)), None)
