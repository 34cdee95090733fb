"""The default command's flow: validate everything, then write the campaign, then submit, then report.

Nothing is written before every cell, the profile and the executor's requirements have been checked, so
bad input leaves no half-written campaign behind.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from orchestrator import DEFAULT_RESULTS_DIR
from orchestrator.errors import OrchestratorError, UsageError
from orchestrator.plan import campaign as campaigns
from orchestrator.plan import catalog, matrix
from orchestrator.plan.profile import ClusterProfile
from orchestrator.plan.render import render_scripts
from orchestrator.run import submit
from orchestrator.run.doctor import check_partition
from orchestrator.tables import format_table


@dataclass(frozen=True)
class LaunchRequest:
    benchmark: str
    use_case: int
    frameworks: list[str]
    models: list[str]
    batch_sizes: list[int]
    precisions: list[str]
    settings: matrix.RunSettings
    profile: ClusterProfile
    executor: str
    dry_run: bool
    wait: bool
    results_dir: Path
    scripts_dir: Path
    command: str
    rerun_completed: bool = False  # the same command again: also run the cells that have a result
    new_campaign: bool = False  # the same command again: plan a separate campaign instead


def launch(req: LaunchRequest, report: Callable[[str], None] = print) -> int:
    """Plan, render and (unless dry-run) submit one campaign. Returns the exit code."""
    cells = matrix.expand(req.benchmark, req.use_case, req.frameworks, req.models, req.batch_sizes,
                          req.precisions, req.settings)
    try:
        matrix.check_data(req.benchmark, req.settings, req.use_case)
    except UsageError as exc:
        if not req.dry_run:
            raise
        # A dry run only writes scripts, often on a machine other than the one with the data: say, don't stop.
        report(f"warning: {exc}; the jobs would fail as planned")
    check_partition(req.profile)
    if req.executor not in catalog.EXECUTORS:
        raise UsageError(f"unknown executor {req.executor!r}; choose from: {', '.join(catalog.EXECUTORS)}")
    if req.settings.world_size > 1 and req.executor != "slurm":
        raise UsageError(
            f"{req.settings.world_size} processes per cell are started by srun inside an sbatch allocation; "
            f"the {req.executor} executor cannot do that: use --executor slurm (or --dry-run to only write the scripts)"
        )
    if not req.dry_run:
        check_can_run(req, sorted({c.framework for c in cells}))

    same = None if req.dry_run or req.new_campaign else find_same(req, cells)
    campaign = same.name if same else campaigns.new_campaign_id(req.benchmark, req.use_case)
    campaign_dir = (req.results_dir / campaign).resolve()
    commit = campaigns.git_commit()
    created_at = campaigns.now_utc()
    scripts = render_scripts(cells, req.profile, campaign=campaign, campaign_dir=campaign_dir,
                             command=req.command, git_commit=commit, created_at=created_at)
    previous = campaigns.load_manifest(campaign_dir) if same else None
    # Planned again (the same command): scripts and specs are rewritten from this run's profile, so a
    # corrected time limit or memory applies to the cells submitted again.
    manifest = campaigns.write_campaign(
        campaign, campaign_dir, scripts, req.scripts_dir.resolve(), req.profile,
        command=req.command, commit=commit, executor="dry-run" if req.dry_run else req.executor,
        created_at=created_at, previous=previous,
    )
    if same:
        return resubmit_same(req, campaign_dir, report)
    for script in scripts:
        report(f"wrote {manifest['scripts'][script.framework]['path']} ({script.tasks} array tasks)")
    trials = f" x {req.settings.trials} trials" if req.settings.trials > 1 else ""
    report(f"campaign {campaign}: {len(cells)} cells{trials}, manifest {campaign_dir / campaigns.MANIFEST}")
    if req.dry_run:
        report(cell_table(manifest, {}))
        report("dry run: nothing was submitted")
        return 0

    try:
        submissions = submit_all(req, scripts, manifest, campaign_dir, report)
    except OrchestratorError as exc:
        # The manifest keeps what was submitted before the failure, and says why the rest was not.
        manifest["submission_error"] = str(exc)
        campaigns.save_manifest(campaign_dir, manifest)
        raise
    report(cell_table(manifest, {s.framework: s for s in submissions}))
    failed = [(s.framework, i, why) for s in submissions for i, why in s.failed.items()]
    for framework, index, why in failed:
        report(f"FAILED {framework} array task {index}: {why}")
    collect = "python main.py collect" + ("" if req.results_dir.resolve() == DEFAULT_RESULTS_DIR.resolve()
                                          else f" --results-dir {shlex.quote(str(req.results_dir))}")
    if req.executor == "slurm" and not req.wait:
        report(f"submitted; follow with squeue, then run: {collect}")
    else:
        tasks = sum(s.tasks for s in scripts)
        report(f"{tasks - len(failed)} of {tasks} array tasks finished; run: {collect}")
    return 1 if failed else 0


def find_same(req: LaunchRequest, cells: list[matrix.Cell]) -> Path | None:
    layout = sorted((c.framework, c.cell_id, trial) for c in cells for trial in range(c.settings.trials))
    return campaigns.find_same_campaign(req.results_dir, layout) if req.results_dir.is_dir() else None


def resubmit_same(req: LaunchRequest, campaign_dir: Path, report: Callable[[str], None]) -> int:
    """The same command run again: submit only the cells of its campaign that have no result."""
    from orchestrator.run.resubmit import resubmit

    report(f"campaign {campaign_dir.name} was planned by the same command before: submitting only the cells "
           f"without a result{' and, as asked, the completed ones again' if req.rerun_completed else ''} "
           "(--new-campaign plans a separate one)")
    done = resubmit(campaign_dir, executor=req.executor, rerun_completed=req.rerun_completed, wait=req.wait,
                    report=report)
    failed = [(r.framework, i, why) for r in done for i, why in r.failed.items()]
    for framework, index, why in failed:
        report(f"FAILED {framework} array task {index}: {why.splitlines()[0]}")
    return 1 if failed else 0


def check_can_run(req: LaunchRequest, frameworks: list[str]) -> None:
    """What submission needs, checked before anything is written: Slurm's commands and the environments."""
    if req.executor in ("slurm", "submitit"):
        submit.require_command("sbatch")
    for framework in frameworks:
        activate = req.profile.env_path(framework) / "bin" / "activate"
        if not activate.is_file():
            raise UsageError(
                f"the {framework} environment is missing ({activate} does not exist); "
                "create it with: python main.py envs"
            )


def submit_all(req: LaunchRequest, scripts, manifest: dict, campaign_dir: Path,
               report: Callable[[str], None]) -> list[submit.Submission]:
    submissions = []
    log_dir = campaign_dir / "logs"
    pending_submitit = []
    max_array = submit.array_limit(req.profile) if req.executor in ("slurm", "submitit") else None
    for script in scripts:
        info = manifest["scripts"][script.framework]
        job_name = script.name.removesuffix(".sh")
        n = script.tasks
        if req.executor == "slurm":
            sub = submit.submit_sbatch(script.framework, Path(info["path"]), n, max_array)
        elif req.executor == "local":
            sub = submit.run_local(script.framework, Path(info["campaign_copy"]), n, log_dir, job_name, report)
        else:
            sub, jobs = submit.submit_submitit(script.framework, Path(info["campaign_copy"]), n,
                                               campaign_dir / "submitit" / script.framework, req.profile,
                                               job_name, log_dir, max_array)
            pending_submitit.append((sub, jobs))
        submissions.append(sub)
        # Recorded at once, so a failure to submit the next script does not lose this job id.
        manifest["submissions"][script.framework] = {"job_id": sub.job_id, "task_ids": sub.task_ids,
                                                     "submitted_at": campaigns.now_utc()}
        if len(sub.arrays) > 1:  # split to fit MaxArraySize: every part's job id, offset and size
            manifest["submissions"][script.framework]["arrays"] = sub.arrays
        campaigns.save_manifest(campaign_dir, manifest)
        if len(sub.arrays) > 1:
            report(f"{script.framework}: {n} tasks exceed the {max_array} an array may hold here; submitted as "
                   f"{len(sub.arrays)} array jobs {', '.join(sub.job_ids)}")
        else:
            report(f"{script.framework}: {'ran' if req.executor == 'local' else 'submitted'} as job {sub.job_id}")
    if req.executor == "slurm" and req.wait:
        report("waiting for the jobs to finish (polling squeue with back-off)")
        submit.wait_for_slurm(submissions, report=report)
    for sub, jobs in pending_submitit:
        if req.wait:
            report(f"waiting for submitit job {sub.job_id}")
            submit.wait_for_submitit(sub, jobs)
    if req.executor == "local" or req.wait:
        for sub in submissions:
            manifest["submissions"][sub.framework]["failed"] = {str(i): why for i, why in sub.failed.items()}
        campaigns.save_manifest(campaign_dir, manifest)
    return submissions


def cell_table(manifest: dict, submissions: dict[str, submit.Submission]) -> str:
    rows = []
    for cell in manifest["cells"]:
        sub = submissions.get(cell.get("script", cell["framework"]))  # a paired script runs both frameworks
        job = sub.task_ids[cell["array_index"]] if sub else "-"
        state = ""
        if sub and cell["array_index"] in sub.failed:
            state = "FAILED"
        rows.append([cell["framework"], cell["array_index"], cell.get("trial", 0), cell["model"], cell["batch_size"],
                     cell["precision"], cell["cell_id"], job, state])
    return format_table(["framework", "index", "trial", "model", "batch", "precision", "cell", "job", ""], rows)

