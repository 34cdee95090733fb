"""The default command's flow: validate everything, then write the campaign, then submit, then report.

Nothing is written before every cell, the profile and the executor's requirements have been checked, so
bad input leaves no half-written campaign behind.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from pathlib import Path

from orchestrator import DEFAULT_RESULTS_DIR, suggest
from orchestrator.errors import OrchestratorError, UsageError
from orchestrator.plan import campaign as campaigns
from orchestrator.plan import catalog, known_issues, matrix, render, rules, sizing, tuning
from orchestrator.plan.campaign_config import configuration_text
from orchestrator.plan.campaign_folders import find_same_campaign
from orchestrator.plan.discovery import NodeShape, discovered_profile
from orchestrator.plan.manifest import (
    DRY_RUN,
    MANIFEST,
    SUBMITTED,
    CollectJob,
    Manifest,
    ScriptSubmission,
    load_manifest,
    now_utc,
    save_manifest,
)
from orchestrator.plan.profile import OPTION_KEYS, ClusterProfile
from orchestrator.plan.render import RenderedScript, collect_script_name, render_collect, render_scripts
from orchestrator.plan.settings import (
    RunSettings,
    check_output_folder,
    data_source,
    parse_batch_sizes,
    parse_list,
    parse_use_cases,
    privacy_settings,
    trial_settings,
)
from orchestrator.run import sbatch_call, waiting_times
from orchestrator.run.doctor import check_partition
from orchestrator.run.envs import check_runnable
from orchestrator.run.executors import Executor, ScriptJob, Submission, Submitting, executor
from orchestrator.run.executors.base import failure_lines
from orchestrator.run.limits import check_submit_limits
from orchestrator.run.record import record_failed, recorder, submitting
from orchestrator.run.resubmit import resubmit_and_report
from orchestrator.run import tuning as tried
from orchestrator.run.wait import OutputsWritten, task_outputs
from orchestrator.tables import format_table


@dataclass(frozen=True)
class LaunchRequest:
    benchmark: str
    use_case: int  # the first use case asked for (--use-case 3,5 plans both, `plans`)
    frameworks: list[str]
    models: list[str]
    batch_sizes: list[int]
    precisions: list[str]
    settings: RunSettings
    profile: ClusterProfile
    executor: str
    dry_run: bool
    wait: bool
    results_dir: Path
    scripts_dir: Path
    command: str
    rerun_completed: bool = False  # the same command again: also run the cells that have a result
    new_campaign: bool = False  # the same command again: plan a separate campaign instead
    systems: tuple[str, ...] = ()  # the profile's systems to run on (--systems); none: its default
    torch_modes: list[str] | None = None  # the PyTorch modes compared with JAX (matrix.expand); None: settings'
    dp_engines: list[str] | None = None  # PyTorch's DP-SGD engines compared with JAX (matrix.expand); None: torchfunc
    parallelisms: list[str] | None = None  # use case 2's state layouts, ddp and fsdp (matrix.expand); None: ddp
    collect_after: bool = False  # chain a collect job after the arrays (--collect-after)
    # Every use case asked for, each with its settings, which differ in the DP-SGD fields (privacy_settings);
    # empty: `use_case` alone, with `settings`.
    use_case_settings: tuple[tuple[int, RunSettings], ...] = ()
    # Without --profile: what Slurm said it has, and so what the plan asks for (plan.discovery); "" with a profile.
    discovered: str = ""
    node: NodeShape | None = None  # and the shape of the nodes of the partition it found, where sinfo showed it
    gpus_option: int | None = None  # --gpus-per-task as typed (None: not given), for the advice of a refusal
    # The campaign's configuration file (plan.campaign_config), written beside its manifest; "" writes none.
    configuration: str = ""

    @property
    def plans(self) -> tuple[tuple[int, RunSettings], ...]:
        """Each use case of the campaign with its settings, in the order asked."""
        return self.use_case_settings or ((self.use_case, self.settings),)

    @property
    def run_by(self) -> Executor:
        """The executor named by `executor`; an unknown name is bad input."""
        return executor(self.executor)


@dataclass(frozen=True)
class LaunchOptions:
    """The default command's options as typed (None where not given): the matrix's axes, how trials run, where
    and how the jobs run, and `given`, the settings of the cell's configuration the user gave (cli.options).
    `request` applies the defaults and the rules that tie options together, and checks what can be checked before
    the matrix is expanded."""

    benchmark: str
    use_case: list[str]  # one or several, as a comma-separated list or repeated (settings.parse_use_cases)
    frameworks: list[str] | None
    models: list[str] | None
    batch_sizes: list[str] | None
    precision: list[str] | None
    trials: str  # a whole number, or "auto" (settings.trial_settings)
    executor: str
    dry_run: bool
    wait: bool
    rerun_completed: bool
    new_campaign: bool
    profile: Path | None
    results_dir: Path | None  # None: the profile's results_dir, else DEFAULT_RESULTS_DIR
    scripts_dir: Path
    given: dict = field(default_factory=dict)  # setting -> value, only those given (bench_contract.config)
    systems: list[str] | None = None
    collect_after: bool = False
    torch_modes: list[str] | None = None
    dp_engine: list[str] | None = None  # --dp-engine as typed
    parallelism: list[str] | None = None  # --parallelism as typed
    target_interval: str | None = None  # with --trials auto: "5%" or "0.05"
    max_trials: int | None = None
    # The Slurm options that replace the profile's values (profile.OPTION_KEYS); None: the profile's.
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    gpus_per_task: int | None = None
    time: str | None = None
    mem: str | None = None
    array_parallelism: int | None = None

    def slurm_options(self) -> dict[str, object]:
        """The Slurm options by name (--time), as ClusterProfile.with_options takes them."""
        return {option: getattr(self, option.removeprefix("--").replace("-", "_")) for option in OPTION_KEYS}

    def request(self, command: str) -> LaunchRequest:
        bench = catalog.benchmark(self.benchmark)
        # Each use case gets the settings, and the refusals, it would get alone.
        plans = tuple((number, self.settings(bench, number)) for number in parse_use_cases(self.use_case))
        # A pack's script asks sbatch for its slots (#SBATCH --ntasks-per-node) and starts each run as a step of
        # its own: the executor must run the script as sbatch does, in an allocation where srun starts steps (the
        # local executor has none; submitit reads no #SBATCH line and runs the script inside a step of its own).
        if plans[0][1].pack and not executor(self.executor).starts_several_processes:
            raise UsageError(f"--pack makes each run a job step of its own (srun) in an allocation that sbatch gives "
                             f"the script; the {self.executor} executor gives none: use --executor slurm, or leave "
                             "--pack out")
        # Without --profile, Slurm is asked what it has (plan.discovery); the local executor runs on this machine.
        profile, found = discovered_profile(self.profile, ask_slurm=executor(self.executor).on_slurm,
                                            partition=self.partition, gpus_per_task=self.gpus_per_task)
        profile = profile.with_options(self.slurm_options())  # the command's Slurm options over the profile's
        settings = plans[0][1]
        refused = sizing.slots_refusal(settings.pack_slots, settings.pack_nodes, profile, found.node if found else None)
        if refused:
            raise UsageError(refused)
        return LaunchRequest(
            benchmark=self.benchmark,
            use_case=plans[0][0],
            frameworks=parse_list(self.frameworks),
            models=parse_list(self.models),
            batch_sizes=parse_batch_sizes(self.batch_sizes),
            precisions=parse_list(self.precision),
            settings=plans[0][1],
            profile=profile,
            discovered=found.said if found else "",
            node=found.node if found else None,
            gpus_option=self.gpus_per_task,
            executor=self.executor,
            dry_run=self.dry_run,
            wait=self.wait,
            # A site's profile may put campaigns on scratch; --results-dir replaces it.
            results_dir=self.results_dir or profile.results_folder() or DEFAULT_RESULTS_DIR,
            scripts_dir=self.scripts_dir,
            command=command,
            rerun_completed=self.rerun_completed,
            new_campaign=self.new_campaign,
            systems=tuple(parse_list(self.systems)),
            collect_after=self.collect_after,
            torch_modes=parse_list(self.torch_modes) or None,
            dp_engines=parse_list(self.dp_engine) or None,
            parallelisms=parse_list(self.parallelism) or None,
            use_case_settings=plans,
            configuration=self.configuration(plans[0][1], command),
        )

    def configuration(self, settings: RunSettings, command: str) -> str:
        """The campaign file's text: the request's matrix as parsed, its trials, and the resolved settings."""
        matrix = {"benchmark": self.benchmark, "use_case": [int(n) for n in parse_use_cases(self.use_case)],
                  "frameworks": parse_list(self.frameworks), "models": parse_list(self.models),
                  "batch_sizes": parse_batch_sizes(self.batch_sizes), "precision": parse_list(self.precision),
                  "torch_modes": parse_list(self.torch_modes), "dp_engine": parse_list(self.dp_engine),
                  "parallelism": parse_list(self.parallelism), "systems": parse_list(self.systems),
                  "trials": str(self.trials), "target_interval": self.target_interval, "max_trials": self.max_trials}
        return configuration_text(matrix, settings.settings(), self.given, command)

    def settings(self, bench: catalog.Benchmark, use_case: int) -> RunSettings:
        """The configuration of this use case's cells: the settings given, and where not given the defaults the plan
        derives (the benchmark's epochs, the data source of a search, DP-SGD's sampling, the trials' fields)."""
        given = dict(self.given)
        search = given.get("batch_search", False)
        if given.get("data_dir"):
            given["data_dir"] = str(given["data_dir"])
        return RunSettings(**{
            **given,
            "epochs": given.get("epochs", bench.default_epochs),
            "data_source": data_source(given.get("data_source") == "synthetic", search),
            **privacy_settings(use_case, given.get("sampling"), given.get("noise_multiplier"), given.get("delta"),
                               given.get("target_epsilon"), search),
            # --tune runs the winners as paired trials (bench_contract.tuning), as --trials auto pairs its trials.
            **trial_settings(str(self.trials), given.get("paired", False) or bool(given.get("tune")),
                             self.target_interval, self.max_trials),
        })


def launch(req: LaunchRequest, report: Callable[[str], None] = print) -> int:
    """Plan, render and (unless dry-run) submit one campaign. Returns the exit code.

    Planning and submission hold the results folder's lock (record.submitting): the same command started twice at
    once, or a resubmit meanwhile, refuses the second, naming the first, instead of submitting everything twice.
    Waiting for the jobs (--wait) holds it no longer."""
    cells = [cell for use_case, settings in req.plans
             for cell in matrix.expand(req.benchmark, use_case, req.frameworks, req.models, req.batch_sizes,
                                       req.precisions, settings, req.torch_modes, req.dp_engines, req.parallelisms)]
    cells = on_systems(cells, req.profile.system_names(list(req.systems)))
    if req.settings.tune:
        return tune_and_launch(req, cells, report)
    return launch_cells(req, cells, report)


def tune_and_launch(req: LaunchRequest, cells: list[matrix.Cell], report: Callable[[str], None]) -> int:
    """--tune K (orchestrator.plan.tuning): the tries, each framework's K configurations of every cell, as a
    campaign of their own in the results folder's TRIES_FOLDER, waited for; then the choice of each framework's
    fastest configuration whose results are out of the box's (orchestrator.run.tuning); then the campaign, every
    cell out of the box and tuned, paired, with the record of the tries and the choice beside its manifest."""
    for use_case, _ in req.plans:
        tuning.check_tuning(use_case, req.torch_modes)
    pairs = tuning.try_cells(cells)
    budget = req.settings.tune
    tries_req = replace(req, results_dir=req.results_dir / tuning.TRIES_FOLDER, wait=True, collect_after=False,
                        settings=pairs[0][1].settings)  # one unpaired trial each
    report(f"tuning: {budget} configurations per cell and framework, {len(pairs)} tries, each measured once by the "
           f"cell's stopping rule, in {tries_req.results_dir}")
    folders: dict[str, Path] = {}
    launch_cells(tries_req, [attempt for _, attempt in pairs], report,
                 on_planned=lambda folder: folders.setdefault("tries", folder))
    if req.dry_run:
        report("dry run: the tuned campaign is planned from the tries' results, once they have run")
        return 0
    judged = tried.judge_tries(folders["tries"], pairs)
    for line in tried.ladder_lines([(budget, tuned) for tuned in judged]):
        report(line)
    campaign = tuning.campaign_cells(cells, {tuned.cell_id: tuned.chosen for tuned in judged})
    return launch_cells(req, campaign, report, on_planned=lambda folder: tried.write_record(
        folder, budget, folders["tries"].name, judged))


def launch_cells(req: LaunchRequest, cells: list[matrix.Cell], report: Callable[[str], None],
                 on_planned: Callable[[Path], object] | None = None) -> int:
    """Check, size, plan and (unless dry-run) submit `cells` as one campaign; `on_planned` is given its folder once
    it is written, before anything is submitted."""
    rules.check_campaign_size(len(cells), req.settings.trials)
    rules.check_device_has_gpus(req.settings.device, req.profile, req.run_by.on_slurm, req.discovered,
                                req.gpus_option)
    if req.discovered:
        report(f"cluster: {req.discovered}")
    check_request(req, cells, report)
    cells, packed = with_pack(req, cells)
    # Each system's time limit where neither the profile nor --time gives one, estimated from its cells' work: the
    # scripts, the manifest and submitit's parameters all read it from the profile.
    sized = sizing.size(req.profile, cells, req.node)
    if packed:
        report(packed)
        sized = replace(sized, notes={system: [*lines, packed] for system, lines in sized.notes.items()})
    for warning in sized.warnings + sizing.tiny_cells(cells, req.profile, req.node):
        report(f"warning: {warning}")
    req = replace(req, profile=sized.profile)
    with ExitStack() as held:
        if not req.dry_run:
            held.enter_context(submitting(req.results_dir, f"`{req.command}`"))
        return plan_and_submit(req, cells, report, release=held.close, sized=sized, on_planned=on_planned)


def with_pack(req: LaunchRequest, cells: list[matrix.Cell]) -> tuple[list[matrix.Cell], str]:
    """The cells with their --pack settled: the command's, else the plan's choice (plan.sizing.default_pack) where
    the executor runs packs, else none; and the sentence on the plan's choice, if it made one."""
    settings = cells[0].settings if cells else None
    if settings is None or settings.pack is not None:
        return cells, ""
    pack, said = (sizing.default_pack(req.profile, cells, req.node) if req.run_by.starts_several_processes
                  else (0, ""))
    settled = {}  # one settled copy of each settings object (a use case's), which its cells share
    for cell in cells:
        if id(cell.settings) not in settled:
            settled[id(cell.settings)] = replace(cell.settings, pack=pack)
    return [replace(cell, settings=settled[id(cell.settings)]) for cell in cells], said


def on_systems(cells: list[matrix.Cell], systems: list[str]) -> list[matrix.Cell]:
    """Every cell once per system, system after system; with no named system ([""]) the cells as they are."""
    return [replace(cell, system=system) if system else cell for system in systems for cell in cells]


def plan_and_submit(req: LaunchRequest, cells: list[matrix.Cell], report: Callable[[str], None],
                    release: Callable[[], None], sized: sizing.Sized | None = None,
                    on_planned: Callable[[Path], object] | None = None) -> int:
    """Plan and submit under the lock, then `release` it before anything is waited for."""
    same = None if req.dry_run or req.new_campaign else find_same(req, cells)
    limited = not same and not req.dry_run and req.run_by.on_slurm
    campaign_dir, scripts, manifest = write_planned(req, cells, same, sized, check_limits=limited)
    if on_planned is not None:
        on_planned(campaign_dir)
    if same:
        release()  # resubmit takes it again and reads the manifest just written; nothing can slip in between
        return resubmit_same(req, campaign_dir, report)  # which first reconciles arrays whose fate is unknown
    for script in scripts:
        report(f"wrote {manifest.scripts[script.key].path} ({script.tasks} array tasks)")
    trials = f" x {req.settings.trials} trials" if req.settings.trials > 1 else ""
    report(f"campaign {campaign_dir.name}: {len(cells)} cells{trials}, manifest {campaign_dir / MANIFEST}")
    if req.dry_run:
        report(cell_table(manifest, {}))
        report("dry run: nothing was submitted")
        return 0
    try:
        submissions = submit_all(req, scripts, manifest, campaign_dir, report)
    except (OrchestratorError, OSError) as exc:
        # The manifest keeps what was submitted before the failure, and says why the rest was not.
        error = exc if isinstance(exc, OrchestratorError) else OrchestratorError(
            f"{exc} after submitting {submitted_ids(manifest)}; their ids are in {campaign_dir / MANIFEST}")
        manifest.submission_error = str(error)
        try:
            save_manifest(campaign_dir, manifest)
        except OSError:
            pass  # the error names every job id already; a manifest that cannot be written said so
        raise error from None
    if req.collect_after:
        chain_collect(req, campaign_dir, manifest, submissions, report)
    release()
    if req.wait and not req.run_by.runs_here:
        wait_for_jobs(req, campaign_dir, submissions, report)
    return report_submitted(req, scripts, manifest, submissions, report)


def chain_collect(req: LaunchRequest, campaign_dir: Path, manifest: Manifest, submissions: list[Submission],
                  report: Callable[[str], None]) -> None:
    """--collect-after: a job on the profile's partition, without a GPU, that collects the campaign and writes its
    report once every array job has ended (afterany: failed tasks too), so that nobody waits on the login node."""
    import sys

    after = [job_id for sub in submissions for job_id in sub.job_ids]
    name = collect_script_name(campaign_dir.name)
    text = render_collect(req.profile, campaign=campaign_dir.name, campaign_dir=campaign_dir,
                          results_dir=req.results_dir.resolve(), python=sys.executable, command=req.command,
                          git_commit=manifest.git_commit, created_at=now_utc())
    script = campaigns.write_collect_script(campaign_dir, name, text)
    try:
        job_id = sbatch_call.sbatch(script, options=(f"--dependency=afterany:{':'.join(after)}",))
    except OrchestratorError as exc:
        collect = suggest.command("collect", results_dir=req.results_dir)
        raise OrchestratorError(f"{exc}; the campaign's arrays were submitted ({', '.join(after)}): run "
                                f"`{collect}` when they have ended") from None
    manifest.collect_job = CollectJob(job_id, str(script), after, now_utc())
    save_manifest(campaign_dir, manifest)
    report(f"collect: submitted as job {job_id}, to start after jobs {', '.join(after)}; it collects the campaign "
           f"into {req.results_dir} and writes its report there (log: {campaign_dir / 'logs'}/collect_{job_id}.out)")


def wait_for_jobs(req: LaunchRequest, campaign_dir: Path, submissions: list[Submission],
                  report: Callable[[str], None]) -> None:
    """--wait: until every job has ended (the executor's wait, woken early once every task has written its
    output), then record each failed task (record.record_failed)."""
    scripts = {sub.framework for sub in submissions}
    cells = load_manifest(campaign_dir).cells_of(scripts)
    req.run_by.wait(submissions, OutputsWritten(task_outputs(c.results for c in cells)), report)
    record_failed(campaign_dir, {s.framework: {i: (s.task_ids[i], why) for i, why in s.failed.items()}
                                        for s in submissions}, f"`{req.command}`")


def submitted_ids(manifest: Manifest) -> str:
    ids = [a.job_id for a in manifest.arrays if a.state == SUBMITTED]
    return f"job{'s' if len(ids) != 1 else ''} {', '.join(ids)}" if ids else "no job"


def check_request(req: LaunchRequest, cells: list[matrix.Cell], report: Callable[[str], None]) -> None:
    """Everything that can be checked before a campaign is written: the folders it goes to, the data, the
    partition, the executor."""
    check_output_folder(req.results_dir, "--results-dir")
    check_output_folder(req.scripts_dir, "--scripts-dir")
    problems = []
    for use_case, settings in req.plans:  # imagenet's training needs a train/ split, its inference does not
        try:
            rules.check_data(req.benchmark, settings, use_case)
        except UsageError as exc:
            if not req.dry_run:
                raise
            problems.append(str(exc))
    for problem in dict.fromkeys(problems):  # one folder's problem once, whichever use cases it stops
        # A dry run only writes scripts, often on a machine other than the one with the data: say, don't stop.
        report(f"warning: {problem}; the jobs would fail as planned")
    for known in known_issues.warnings(cells, req.profile):
        report(f"warning: {known}")
    unpinned = (render.unpinned_image(framework, req.profile.for_system(system).site_environment(framework))
                for system, framework in {(c.system, c.framework) for c in cells})
    for warning in sorted(set(filter(None, unpinned))):  # systems sharing an image: said once
        report(f"warning: {warning}")
    for system in dict.fromkeys(c.system for c in cells):
        check_partition(req.profile.for_system(system))
    req.run_by.check(req.results_dir, req.settings.world_size, req.collect_after,
                     suggest.command("collect", results_dir=req.results_dir))
    if not req.dry_run:
        check_can_run(req, sorted({c.framework for c in cells}))


def write_planned(req: LaunchRequest, cells: list[matrix.Cell], same: Path | None,
                  sized: sizing.Sized | None = None,
                  check_limits: bool = False) -> tuple[Path, list[RenderedScript], Manifest]:
    """Render the scripts and write the campaign (the one planned before by the same command, or a new one).
    With `check_limits`, a campaign over the cluster's submit limits (counted from the scripts: pairs, packs and
    trials as they will be submitted) is refused before anything is written. Returns the campaign folder, the
    scripts and the manifest."""
    label = catalog.use_cases_label(use_case for use_case, _ in req.plans)
    campaign = same.name if same else campaigns.new_campaign_id(req.benchmark, label)
    campaign_dir = (req.results_dir / campaign).resolve()
    commit = campaigns.git_commit()
    created_at = now_utc()
    scripts = render_scripts(cells, req.profile, campaign=campaign, campaign_dir=campaign_dir,
                             command=req.command, git_commit=commit, created_at=created_at, sized=sized)
    if check_limits:
        check_submit_limits(req.profile, scripts)
    previous = load_manifest(campaign_dir) if same else None
    # Planned again (the same command): scripts and specs are rewritten from this run's profile, so a
    # corrected time limit or memory applies to the cells submitted again.
    manifest = campaigns.write_campaign(
        campaign, campaign_dir, scripts, req.scripts_dir.resolve(), req.profile,
        command=req.command, commit=commit, executor=DRY_RUN if req.dry_run else req.executor,
        created_at=created_at, previous=previous, configuration=req.configuration,
    )
    return campaign_dir, scripts, manifest


def report_submitted(req: LaunchRequest, scripts, manifest: Manifest, submissions: list[Submission],
                     report: Callable[[str], None]) -> int:
    """The cells with their jobs, each failed task, and what to do next. Returns the exit code."""
    report(cell_table(manifest, {s.framework: s for s in submissions}))
    failed = failure_lines(submissions)
    for line in failed:
        report(line)
    collect = suggest.command("collect", results_dir=req.results_dir)
    if not req.run_by.runs_here and not req.wait and req.collect_after:  # its collect job runs collect itself
        watch = suggest.command("watch", results_dir=req.results_dir)
        report(f"submitted; follow with: {watch}; the collect job writes the report")
    elif not req.run_by.runs_here and not req.wait:  # the tasks may still be queued
        report(f"submitted; follow with squeue, then run: {collect}")
    else:
        tasks = sum(s.tasks for s in scripts)
        report(f"{tasks - len(failed)} of {tasks} array tasks finished; run: {collect}")
    return 1 if failed else 0


def find_same(req: LaunchRequest, cells: list[matrix.Cell]) -> Path | None:
    layout = sorted((c.framework, c.cell_id, trial) for c in cells for trial in range(c.settings.trials))
    return find_same_campaign(req.results_dir, layout) if req.results_dir.is_dir() else None


def resubmit_same(req: LaunchRequest, campaign_dir: Path, report: Callable[[str], None]) -> int:
    """The same command run again: submit only the cells of its campaign that have no result."""
    report(f"campaign {campaign_dir.name} was planned by the same command before: submitting only the cells "
           f"without a result{' and, as asked, the completed ones again' if req.rerun_completed else ''} "
           "(--new-campaign plans a separate one)")
    return resubmit_and_report(campaign_dir, executor=req.executor, rerun_completed=req.rerun_completed,
                               wait=req.wait, report=report, warn=report)


def check_can_run(req: LaunchRequest, frameworks: list[str]) -> None:
    """What submission needs, checked before anything is written: the waiting times, Slurm's commands, and the
    environments."""
    waiting_times.check_all()
    if req.run_by.on_slurm:
        sbatch_call.require_command("sbatch")
    for framework in frameworks:
        check_runnable(framework, req.profile)


def submit_all(req: LaunchRequest, scripts: list[RenderedScript], manifest: Manifest, campaign_dir: Path,
               report: Callable[[str], None]) -> list[Submission]:
    """Submit (or, with an executor that runs them here, run) every script with the request's executor. Slurm's
    arrays are recorded in the manifest as each is submitted; tasks run here are recorded once they have run."""
    run_by = req.run_by
    how = Submitting(req.profile, run_by.array_limit(req.profile), recorder(campaign_dir, manifest), report)
    submissions = []
    for script in scripts:
        job = ScriptJob(script.key, Path(manifest.scripts[script.key].campaign_copy), script.tasks,
                        manifest.scripts[script.key].job_name, script.system, campaign_dir)
        sub = run_by.submit(job, how)
        submissions.append(sub)
        if run_by.runs_here:  # ran here, under the lock
            manifest.submissions[script.key] = ScriptSubmission(sub.job_id, sub.task_ids, now_utc(),
                                                                failed=dict(sub.failed))
            save_manifest(campaign_dir, manifest)
        if len(sub.arrays) > 1:
            report(f"{script.key}: {script.tasks} tasks exceed the {how.max_array} an array may hold here; submitted "
                   f"as {len(sub.arrays)} array jobs {', '.join(sub.job_ids)}")
        else:
            report(f"{script.key}: {'ran' if run_by.runs_here else 'submitted'} as job {sub.job_id}")
    return submissions


def cell_table(manifest: Manifest, submissions: dict[str, Submission]) -> str:
    rows = []
    systems = any(cell.system for cell in manifest.cells)  # a column only where systems are named
    for cell in manifest.cells:
        sub = submissions.get(cell.script)  # a paired script runs both frameworks
        job = sub.task_ids[cell.array_index] if sub else "-"
        state = "FAILED" if sub and cell.array_index in sub.failed else ""
        rows.append([cell.framework, *([cell.system] if systems else []), cell.array_index, cell.trial, cell.model,
                     cell.batch_size, cell.precision, cell.cell_id, job, state])
    return format_table(["framework", *(["system"] if systems else []), "index", "trial", "model", "batch",
                         "precision", "cell", "job", ""], rows)

