"""The command line: plan and submit (the default command), collect, report, campaigns, status and the rest.

Each command turns its options into one call of the module that owns the work, which reports through the
callbacks it is given (results to stdout, progress and warnings to stderr). Errors from the domain arrive as
OrchestratorError and leave as one sentence on stderr with an exit code: 2 for bad input (click's usage errors
too), 1 for a failure. Users never see a traceback or a page of help for bad input.
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer
from typer._click import exceptions as click_errors  # typer 0.29 (pinned) parses with its own copy of click
from typer.core import TyperGroup

from bench_contract.spec import DP_ENGINES, SAMPLINGS
from orchestrator import DEFAULT_RESULTS_DIR, DEFAULT_SCRIPTS_DIR
from orchestrator.errors import OrchestratorError, UsageError
from orchestrator.plan import catalog

# The panels of the default command's help, one per kind of option.
MATRIX = "Matrix: what runs (each axis a comma-separated list, or repeat the option)"
TRAINING = "Training"
PRIVACY = "DP-SGD (use cases 3 and 4)"
DATA = "Data"
SLURM = "Slurm: where and how the jobs run"
MEASUREMENT = "Measurement: repeats, trials, pairing, batch search, traces"



class PanelledHelp(TyperGroup):
    """Plain-text help with the options grouped under their panel's title. Typer draws panels only with rich, whose
    boxes cost `--help` 0.2 s (a third of a second in all, against the 0.3 s of bench/startup.py) and read badly
    in a log or a pipe."""

    def format_options(self, ctx, formatter) -> None:
        panels: dict[str, list[tuple[str, str]]] = {}
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is not None:
                panels.setdefault(getattr(param, "rich_help_panel", None) or "Options", []).append(record)
        for title, records in panels.items():
            with formatter.section(title):
                formatter.write_dl(records)
        self.format_commands(ctx, formatter)


app = typer.Typer(
    cls=PanelledHelp,
    context_settings={"help_option_names": ["-h", "--help"]},
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # plain text, fast; PanelledHelp draws the panels
    help="Plan, submit and collect fair JAX-vs-PyTorch benchmarks on Slurm.\n\n"
    "Run a campaign:  python main.py --benchmark digits --use-case 1\n\n"
    "Then merge the results:  python main.py collect",
)


def completes(names):
    """Shell completion of an option from a registry's names (the check of the value stays the registry's)."""
    return lambda incomplete: [name for name in names if name.startswith(incomplete)]


def show_version(value: bool) -> None:
    if value:
        from orchestrator.plan.campaign import git_commit, project_version

        typer.echo(f"jaxtorch-bench {project_version()} (git {git_commit()})")
        raise typer.Exit()


@contextmanager
def domain_errors() -> Iterator[None]:
    """An OrchestratorError leaves as one sentence on stderr and its exit code, never as a traceback."""
    try:
        yield
    except OrchestratorError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(code=exc.exit_code) from None


def warn(line: str) -> None:
    """Progress and warnings go to stderr; results to stdout."""
    typer.echo(line, err=True)


def command_line() -> str:
    """The command as typed (`python main.py ...` or `jaxtorch-bench ...`), recorded with what it planned."""
    program = ["python", "main.py"] if sys.argv[0].endswith("main.py") else [Path(sys.argv[0]).name]
    return shlex.join([*program, *sys.argv[1:]])


@app.callback(invoke_without_command=True)
def main(
    ctx: typer.Context,
    benchmark: Annotated[str | None, typer.Option("--benchmark", "-b", help="Benchmark to run (see `list`).", autocompletion=completes(catalog.BENCHMARKS), rich_help_panel=MATRIX)] = None,
    use_case: Annotated[int | None, typer.Option("--use-case", "-u", help="1 train, 2 multi-device train, 3 per-sample grads, 4 multi-device per-sample grads, 5 inference.", autocompletion=completes([str(n) for n in catalog.USE_CASES]), rich_help_panel=MATRIX)] = None,
    frameworks: Annotated[list[str] | None, typer.Option("--frameworks", help="jax,torch (default: both).", autocompletion=completes(catalog.FRAMEWORKS), rich_help_panel=MATRIX)] = None,
    models: Annotated[list[str] | None, typer.Option("--models", help="Models (default: the benchmark's).", autocompletion=completes(catalog.MODELS), rich_help_panel=MATRIX)] = None,
    batch_sizes: Annotated[list[str] | None, typer.Option("--batch-sizes", help="Batch sizes, e.g. 32,64 (default: the benchmark's).", rich_help_panel=MATRIX)] = None,
    precision: Annotated[list[str] | None, typer.Option("--precision", help="Precision policies (default: fp32).", autocompletion=completes(catalog.PRECISIONS), rich_help_panel=MATRIX)] = None,
    variant: Annotated[str, typer.Option("--variant", help="Model size: full, or tiny (fewer blocks, smaller inputs) for CPU tests.", autocompletion=completes(catalog.MODEL_VARIANTS), rich_help_panel=MATRIX)] = "full",
    torch_compile: Annotated[bool, typer.Option("--torch-compile", help="PyTorch cells use torch.compile instead of eager (in training the whole step); short for --torch-modes compiled.", rich_help_panel=MATRIX)] = False,
    torch_modes: Annotated[list[str] | None, typer.Option("--torch-modes", help="PyTorch modes, e.g. eager,compiled: JAX is compared with each (default: eager).", autocompletion=completes(catalog.TORCH_MODES), rich_help_panel=MATRIX)] = None,
    torch_compile_mode: Annotated[str, typer.Option("--torch-compile-mode", help="torch.compile's mode: default, reduce-overhead (CUDA graphs on a GPU) or max-autotune.", autocompletion=completes(catalog.TORCH_COMPILE_MODES), rich_help_panel=MATRIX)] = "default",
    channels_last: Annotated[bool, typer.Option("--channels-last", help="PyTorch CNNs run in channels_last memory format (inference).", rich_help_panel=MATRIX)] = False,
    epochs: Annotated[int | None, typer.Option(help="Training epochs (default: the benchmark's).", rich_help_panel=TRAINING)] = None,
    learning_rate: Annotated[float, typer.Option(help="Learning rate.", rich_help_panel=TRAINING)] = 0.01,
    optimizer: Annotated[str, typer.Option(help="Optimizer: sgd, momentum, adam, or adamw (decoupled weight decay); the same update in both frameworks (docs/measurement.md).", autocompletion=completes(catalog.OPTIMIZERS), rich_help_panel=TRAINING)] = "sgd",
    seed: Annotated[int, typer.Option(help="Seed of the shared initial weights and of the batch order.", rich_help_panel=TRAINING)] = 0,
    warmup_steps: Annotated[int, typer.Option(help="Steps run before timing starts.", rich_help_panel=TRAINING)] = 5,
    momentum: Annotated[float, typer.Option(help="Momentum of --optimizer momentum.", rich_help_panel=TRAINING)] = 0.9,
    nesterov: Annotated[bool, typer.Option("--nesterov", help="Nesterov momentum (--optimizer momentum).", rich_help_panel=TRAINING)] = False,
    weight_decay: Annotated[float, typer.Option(help="Weight decay: L2 added to the gradient (sgd, momentum, adam), decoupled (adamw).", rich_help_panel=TRAINING)] = 0.0,
    lr_schedule: Annotated[str, typer.Option(help="constant, or warmup_cosine: linear warm-up, then a cosine to 0.", autocompletion=completes(catalog.LR_SCHEDULES), rich_help_panel=TRAINING)] = "constant",
    lr_warmup_steps: Annotated[int, typer.Option(help="warmup_cosine: steps of the linear warm-up.", rich_help_panel=TRAINING)] = 0,
    lr_decay_steps: Annotated[int, typer.Option(help="warmup_cosine: steps of the cosine after the warm-up (then 0).", rich_help_panel=TRAINING)] = 1000,
    clip_norm: Annotated[float, typer.Option(help="Clip each per-example gradient to this L2 norm C.", rich_help_panel=PRIVACY)] = 1.0,
    noise_multiplier: Annotated[float | None, typer.Option(help="Gaussian noise of std sigma*C on the summed gradients (default 1.0); 0 for none (then JAX and PyTorch match step by step).", show_default=False, rich_help_panel=PRIVACY)] = None,
    sampling: Annotated[str | None, typer.Option(help="poisson (each example joins a step's batch with probability B/N; the default, what the privacy budget assumes) or shuffle (fixed-size batches: no guarantee).", autocompletion=completes(SAMPLINGS), show_default=False, rich_help_panel=PRIVACY)] = None,
    delta: Annotated[float | None, typer.Option(help="The delta of the privacy budget epsilon (default: 1/N, N the training samples).", show_default=False, rich_help_panel=PRIVACY)] = None,
    target_epsilon: Annotated[float | None, typer.Option(help="Derive the noise multiplier that spends this epsilon over the cell's steps (instead of --noise-multiplier).", show_default=False, rich_help_panel=PRIVACY)] = None,
    loop_batch_size: Annotated[int, typer.Option(help="Batch at which vmap and the naive per-example loop are timed; 0 (the default): the training batch of one device.", rich_help_panel=PRIVACY)] = 0,
    dp_engine: Annotated[list[str] | None, typer.Option("--dp-engine", help="PyTorch's DP-SGD engines, e.g. torchfunc,opacus (use cases 3 and 4): torch.func's vmap or Opacus's GradSampleModule; JAX (always jax.vmap) is compared with each (default: torchfunc).", autocompletion=completes(DP_ENGINES), rich_help_panel=PRIVACY)] = None,
    data_dir: Annotated[Path | None, typer.Option(help="Folder with the benchmark's real data files.", rich_help_panel=DATA)] = None,
    synthetic: Annotated[bool, typer.Option("--synthetic", help="Use synthetic data instead of real data.", rich_help_panel=DATA)] = False,
    synthetic_samples: Annotated[int, typer.Option(help="Size of the synthetic data set.", rich_help_panel=DATA)] = 2048,
    device: Annotated[str, typer.Option(help="auto (GPU if the framework sees one), cpu or gpu.", autocompletion=completes(("auto", "cpu", "gpu")), rich_help_panel=SLURM)] = "auto",
    nodes: Annotated[int, typer.Option(help="Nodes per cell (use cases 2 and 4); one process per device, started by srun.", rich_help_panel=SLURM)] = 1,
    tasks_per_node: Annotated[int, typer.Option(help="Processes (devices) per node (use cases 2 and 4).", rich_help_panel=SLURM)] = 1,
    executor: Annotated[str, typer.Option(help="slurm (sbatch), submitit, or local (run the scripts here).", autocompletion=completes(catalog.EXECUTORS), rich_help_panel=SLURM)] = "slurm",
    profile: Annotated[Path | None, typer.Option(help="Cluster profile (TOML); default: built-in.", rich_help_panel=SLURM)] = None,
    systems: Annotated[list[str] | None, typer.Option("--systems", help="The profile's systems (kinds of nodes) to run on, e.g. a100,h100: the matrix once per system, one array per framework each (default: the profile's default_system).", rich_help_panel=SLURM)] = None,
    collect_after: Annotated[bool, typer.Option("--collect-after", help="Also submit a small job (no GPU) that starts when every array has ended and runs collect and report of the campaign.", rich_help_panel=SLURM)] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Write the scripts and the campaign, submit nothing.", rich_help_panel=SLURM)] = False,
    wait: Annotated[bool, typer.Option("--wait", help="Wait until the submitted jobs have finished.", rich_help_panel=SLURM)] = False,
    rerun_completed: Annotated[bool, typer.Option("--rerun-completed", "--force", help="The same command again submits only the cells without a result; this also runs the completed ones again.", rich_help_panel=SLURM)] = False,
    new_campaign: Annotated[bool, typer.Option("--new-campaign", help="The same command again plans a separate campaign instead of completing the earlier one.", rich_help_panel=SLURM)] = False,
    results_dir: Annotated[Path, typer.Option(help="Where campaigns and results go.", rich_help_panel=SLURM)] = DEFAULT_RESULTS_DIR,
    scripts_dir: Annotated[Path, typer.Option(help="Where the sbatch scripts are written.", rich_help_panel=SLURM)] = DEFAULT_SCRIPTS_DIR,
    timed_steps: Annotated[int, typer.Option("--min-iterations", "--timed-steps", help="Inference and the per-sample vectorisation timing: time at least this many repeats of the step; training: the steps of the pipelined throughput.", rich_help_panel=MEASUREMENT)] = 50,
    min_duration: Annotated[float, typer.Option("--min-duration", help="With --min-iterations: keep timing until the timed steps add up to at least this many seconds.", rich_help_panel=MEASUREMENT)] = 1.0,
    trials: Annotated[int, typer.Option("--trials", help="Run each cell as this many independent trials, each in a fresh process.", rich_help_panel=MEASUREMENT)] = 1,
    paired: Annotated[bool, typer.Option("--paired", help="One job per JAX/PyTorch cell pair: both run alternately on one node, trials interleaved A B A B.", rich_help_panel=MEASUREMENT)] = False,
    find_max_batch: Annotated[bool, typer.Option("--find-max-batch", help="Instead of measuring, find the largest batch that fits in memory: doubling, then binary search, each try a fresh process on synthetic data; --batch-sizes gives the start (default 1).", rich_help_panel=MEASUREMENT)] = False,
    max_batch_limit: Annotated[int, typer.Option(help="Largest batch size --find-max-batch tries.", rich_help_panel=MEASUREMENT)] = 65536,
    memory_limit: Annotated[str | None, typer.Option(help="Artificial memory cap of each --find-max-batch try (its address space, like ulimit -v), e.g. 6G or 512M.", rich_help_panel=MEASUREMENT)] = None,
    trace_steps: Annotated[int, typer.Option(help="After measuring, run this many more steps under the framework's profiler and keep the trace (Perfetto/TensorBoard) beside the results; 0 for none.", rich_help_panel=MEASUREMENT)] = 0,
    version: Annotated[bool, typer.Option("--version", help="Print the version and the git commit, then exit.", callback=show_version, is_eager=True)] = False,
) -> None:
    """Plan a campaign from the benchmark matrix, render one sbatch array script per framework, and submit it."""
    options = {name: value for name, value in locals().items() if name not in ("ctx", "version")}  # every option
    if ctx.invoked_subcommand is not None:
        return
    if benchmark is None or use_case is None:
        # One sentence, not the page of help: the help is one -h away.
        typer.echo("error: give --benchmark and --use-case (see `python main.py -h`), or a command such as "
                   "`collect`", err=True)
        raise typer.Exit(code=2)
    from orchestrator.plan.rules import one_process_warning
    from orchestrator.run.launch import LaunchOptions, launch

    with domain_errors():
        catalog.check_executor(executor)
        note = one_process_warning(use_case, nodes, tasks_per_node)
        if note:
            warn(note)
        code = launch(LaunchOptions(**options).request(command_line()))
    raise typer.Exit(code=code)


CampaignArg = Annotated[str | None, typer.Argument(help="Campaign id or folder, as --campaign.", show_default=False)]
CampaignOption = Annotated[str | None, typer.Option("--campaign", "-c", help="Campaign id or folder (default: the newest that is not a dry run; see `campaigns`).")]
ResultsDirOption = Annotated[Path, typer.Option(help="Folder holding the campaigns.")]


def chosen_campaign(results_dir: Path, argument: str | None, option: str | None) -> str:
    """The campaign folder that status, watch and resubmit act on: the one named (as an argument or with
    --campaign), else the newest that is not a dry run."""
    from orchestrator.plan.campaign import campaign_folder, newest_campaign

    if argument and option and argument != option:
        raise UsageError(f"two campaigns named, {argument!r} and --campaign {option!r}; give one")
    name = option or argument
    return str(campaign_folder(results_dir, name) if name else newest_campaign(results_dir))


@app.command()
def campaigns(
    results_dir: ResultsDirOption = DEFAULT_RESULTS_DIR,
    dry_runs: Annotated[bool, typer.Option("--dry-runs", help="List the dry runs too.")] = False,
) -> None:
    """Every campaign of the results folder, oldest first: benchmark, use case, cells, submitted or not, where its
    cells stand, when it was planned. Dry runs are left out unless --dry-runs; * marks the default campaign."""
    from orchestrator.results.campaigns import list_campaigns

    with domain_errors():
        list_campaigns(results_dir, dry_runs, report=typer.echo)


@app.command()
def collect(
    results_dir: Annotated[list[Path] | None, typer.Option(help=f"Folder holding the campaigns (default: {DEFAULT_RESULTS_DIR}); repeat it to merge folders copied from other clusters, into the first one's merged.parquet.", show_default=False)] = None,
    campaign: Annotated[str | None, typer.Option("--campaign", "-c", help="Show this campaign's cells and comparison only, and write its rows to <results-dir>/merged-<campaign>.parquet (every campaign is merged all the same).")] = None,
    output: Annotated[Path | None, typer.Option(help="Merged Parquet dataset, a folder of parts (default: <results-dir>/merged.parquet).")] = None,
    failures: Annotated[Path | None, typer.Option(help="The cells without a result, with reasons and log ends (default: <results-dir>/failures.parquet).")] = None,
    log_lines: Annotated[int, typer.Option(help="Lines of the end of each failed task's log to show and keep.")] = 20,
    progress: Annotated[bool | None, typer.Option("--progress/--no-progress", help="A progress bar on stderr while task files are read (default: on a terminal, from 1,000 files to read).", show_default=False)] = None,
) -> None:
    """Merge every task's Parquet file into one dataset and print JAX vs PyTorch per GPU (or CPU) model.

    Incremental: only task files that are new or changed since the last collect are read. Every cell without
    a result is named with its reason, and listed apart from the measurements in failures.parquet. With several
    --results-dir, each campaign is merged once, and a table compares the device models side by side."""
    from orchestrator.results.collect import collect_and_report

    home, *others = results_dir or [DEFAULT_RESULTS_DIR]
    with domain_errors():
        collect_and_report(home, output, failures, log_lines, report=typer.echo, warn=warn, campaign=campaign,
                           others=others, progress=progress)


@app.command("list")
def list_catalog() -> None:
    """Benchmarks, use cases, models, precisions, and which combinations run."""
    from orchestrator.tables import format_table

    typer.echo("Use cases:")
    for case in catalog.USE_CASES.values():
        batches = f"  (default batch sizes {' '.join(map(str, case.default_batch_sizes))})" if case.default_batch_sizes else ""
        typer.echo(f"  {case.number}  {case.title}{batches}")
    typer.echo("\nPrecisions:")
    for p in catalog.PRECISIONS.values():
        typer.echo(f"  {p.name:<5} {p.description}{'' if p.implemented else '  (not implemented yet)'}")
    typer.echo("\nBenchmarks and models, with the use cases each combination runs today:")
    rows = []
    for bench in catalog.BENCHMARKS.values():
        for model in bench.models:
            runs = [str(n) for n, case in catalog.USE_CASES.items()
                    if catalog.skip_reason(bench, case, model, "fp32") is None]
            rows.append([bench.name, model, catalog.MODELS[model].description, ",".join(runs) or "none yet",
                         " ".join(str(b) for b in bench.default_batch_sizes)])
    typer.echo(format_table(["benchmark", "model", "description", "use cases", "default batches"], rows))


@app.command()
def validate(
    model: Annotated[str, typer.Option("--model", "-m", help="Model to check (see `list`).")],
    batch_size: Annotated[int, typer.Option("--batch-size", help="Samples in the input batch.")] = 2,
    precision: Annotated[str, typer.Option("--precision", help="Precision policy.")] = "fp32",
    variant: Annotated[str, typer.Option("--variant", help="full, or tiny (fewer blocks, smaller inputs).")] = "full",
    seed: Annotated[int, typer.Option(help="Seed of the weights and of the input batch.")] = 0,
    device: Annotated[str, typer.Option(help="auto (GPU if the framework sees one), cpu or gpu.")] = "auto",
    profile: Annotated[Path | None, typer.Option(help="Cluster profile (TOML): where the environments live.")] = None,
    torch_compile: Annotated[bool, typer.Option("--torch-compile", help="Check PyTorch under torch.compile instead of eager.")] = False,
    channels_last: Annotated[bool, typer.Option("--channels-last", help="Check PyTorch in channels_last memory format (CNNs).")] = False,
    executor: Annotated[str, typer.Option(help="local (run here) or slurm (one job on a node of the profile's partition, e.g. on the GPUs you will benchmark).")] = "local",
    results_dir: Annotated[Path, typer.Option(help="With --executor slurm: the shared folder the job writes to (under validate/).")] = DEFAULT_RESULTS_DIR,
) -> None:
    """Run one batch through the model in both frameworks from the same weights and compare the logits.

    Prints both parameter counts, the max abs and max relative error, and PASS (exit 0) or FAIL (exit 1)."""
    from orchestrator.plan.profile import load_profile
    from orchestrator.run.validate import ValidateRequest, summary, validate_with

    with domain_errors():
        req = ValidateRequest(model=model, batch_size=batch_size, precision=precision, variant=variant, seed=seed,
                              device=device, profile=load_profile(profile), torch_compile=torch_compile,
                              channels_last=channels_last)
        # Progress on stderr, the verdict on stdout.
        result = validate_with(executor, req, results_dir, command_line(), report=warn)
    for line in summary(req, result):
        typer.echo(line)
    raise typer.Exit(code=0 if result.passed else 1)


@app.command()
def envs(
    framework: Annotated[list[str] | None, typer.Option("--framework", help="jax, torch (default: both).")] = None,
    profile: Annotated[Path | None, typer.Option(help="Cluster profile (TOML): where environments live, JAX CPU or CUDA recipe.")] = None,
) -> None:
    """Create each framework's own environment from its pinned requirements (reused while they are unchanged)."""
    from orchestrator.plan.settings import parse_list
    from orchestrator.run.envs import ensure_envs

    with domain_errors():
        ensure_envs(parse_list(framework), profile, report=typer.echo)


@app.command()
def report(
    merged: Annotated[Path | None, typer.Option(help="Merged dataset (default: <results-dir>/merged.parquet).")] = None,
    results_dir: Annotated[Path, typer.Option(help="Folder holding the campaigns.")] = DEFAULT_RESULTS_DIR,
    output_dir: Annotated[Path | None, typer.Option(help="Where the report goes (default: <results-dir>/report, or <results-dir>/report-<campaign>).")] = None,
    wandb_project: Annotated[str | None, typer.Option(help="Also export the results to this W&B project (W&B's own settings apply, e.g. WANDB_MODE=offline).")] = None,
    campaign: Annotated[str | None, typer.Option("--campaign", "-c", help="Report this campaign's rows only.")] = None,
    baseline: Annotated[str | None, typer.Option("--baseline", "-b", help="Also show each cell's throughput against this baseline (`baseline save NAME`), as `compare --baseline` does.")] = None,
    tolerance: Annotated[str, typer.Option(help="With --baseline: a change within this is never flagged: 5% or 0.05.")] = "5%",
) -> None:
    """Write the comparison as Markdown, LaTeX and CSV tables, plots, and one self-contained HTML page."""
    from orchestrator.results.campaigns import report_campaign
    from orchestrator.results.report import report_and_export

    with domain_errors():
        if campaign:
            report_campaign(results_dir, campaign, merged, output_dir, wandb_project, report=typer.echo,
                            baseline=baseline, tolerance=tolerance)
        else:
            report_and_export(results_dir, merged, output_dir, wandb_project, report=typer.echo, baseline=baseline,
                              tolerance=tolerance)


@app.command()
def doctor(
    profile: Annotated[Path | None, typer.Option(help="Cluster profile (TOML) to check.")] = None,
    benchmark: Annotated[str, typer.Option(help="Benchmark whose data to check.")] = "digits",
    data_dir: Annotated[Path | None, typer.Option(help="Its data directory, where it needs one.")] = None,
    on_node: Annotated[bool, typer.Option("--on-node", help="Check the frameworks' devices in a short job (srun) on the profile's partition, with its GPUs.")] = False,
) -> None:
    """Check the setup: environments import their framework, devices, Slurm commands and accounting, data."""
    from orchestrator.run.doctor import check_setup

    with domain_errors():
        code = check_setup(profile, benchmark, data_dir, report=typer.echo, on_node=on_node)
    raise typer.Exit(code=code)


@app.command()
def status(
    campaign: CampaignArg = None,
    campaign_option: CampaignOption = None,
    results_dir: ResultsDirOption = DEFAULT_RESULTS_DIR,
    log_lines: Annotated[int, typer.Option(help="Lines of the end of each failed task's log to show.")] = 20,
) -> None:
    """The state of every cell of a campaign: pending, running, completed, failed, timed out, cancelled, no result,
    or unknown (squeue or sacct failed).

    A cell that ended without a readable result is named with its reason (Slurm's state, the task's failure
    row, a bad result file) and the end of its log. Exit 3 when some cells are unknown: the queue could not be
    read, so nothing may be concluded (nor resubmitted) from them."""
    from orchestrator.run.status import show_status

    with domain_errors():
        show_status(results_dir, chosen_campaign(results_dir, campaign, campaign_option), log_lines,
                    report=typer.echo)


@app.command()
def resubmit(
    campaign: CampaignArg = None,
    campaign_option: CampaignOption = None,
    results_dir: ResultsDirOption = DEFAULT_RESULTS_DIR,
    executor: Annotated[str | None, typer.Option(help="slurm, submitit or local (default: the campaign's).", autocompletion=completes(catalog.EXECUTORS))] = None,
    rerun_completed: Annotated[bool, typer.Option("--rerun-completed", "--force", help="Also run the cells that have a result again; each new result replaces the old one.")] = False,
    wait: Annotated[bool, typer.Option("--wait", help="Wait until the submitted jobs have finished.")] = False,
) -> None:
    """Submit again only the cells of a campaign that have no result (failed, timed out, cancelled, no result),
    one array per framework with only their indices. Cells still queued or running are left alone; a bad
    result file is moved aside first; nothing is submitted while the queue cannot be read."""
    from orchestrator.run.resubmit import resubmit_and_report

    with domain_errors():
        if executor is not None:
            catalog.check_executor(executor)
        folder = Path(chosen_campaign(results_dir, campaign, campaign_option))
        code = resubmit_and_report(folder, executor=executor, rerun_completed=rerun_completed, wait=wait,
                                   report=typer.echo, warn=warn)
    raise typer.Exit(code=code)


@app.command()
def watch(
    campaign: CampaignArg = None,
    campaign_option: CampaignOption = None,
    results_dir: ResultsDirOption = DEFAULT_RESULTS_DIR,
    interval: Annotated[float, typer.Option(help="Seconds between the first polls; it backs off to a minute.")] = 5.0,
) -> None:
    """Show live progress until every cell of the campaign has ended, each running cell's from its heartbeat;
    exit 1 if any ended without a result, 3 if the queue stayed unreadable for 10 minutes."""
    from orchestrator.run.status import watch_campaign

    with domain_errors():
        code = watch_campaign(results_dir, chosen_campaign(results_dir, campaign, campaign_option), interval,
                              report=typer.echo, warn=warn)
    raise typer.Exit(code=code)


# The words for pydantic's error types, which typer 0.29 raises for an option value of the wrong type.
data_app = typer.Typer(cls=PanelledHelp, no_args_is_help=True,
                       help="Data sets: fetch the canonical files on the login node, check a data directory.")
app.add_typer(data_app, name="data")


@data_app.command("fetch")
def data_fetch(
    benchmark: Annotated[str, typer.Argument(help="mnist or cifar10.", autocompletion=completes(("mnist", "cifar10")))],
    data_dir: Annotated[Path, typer.Option("--data-dir", help="Where the files go (created if needed); give the same folder to --data-dir when you run.")],
    mirror: Annotated[list[str] | None, typer.Option("--mirror", help="A base URL (http(s):// or file://) tried before the profile's [data_mirrors] and the published mirrors; repeat for several.")] = None,
    profile: Annotated[Path | None, typer.Option(help="Cluster profile (TOML) whose [data_mirrors] to try.")] = None,
) -> None:
    """Download the benchmark's canonical files, check their published checksums and unpack them as the readers
    expect. Nothing half-done stays: a partial or corrupt download is removed and named."""
    from orchestrator.data.fetch import fetch
    from orchestrator.plan.profile import load_profile

    with domain_errors():
        mirrors = (*(mirror or ()), *load_profile(profile).data_mirrors.get(benchmark, ()))
        root = fetch(benchmark, data_dir, mirrors, report=warn)
    typer.echo(f"{benchmark} is ready in {root}: run with --benchmark {benchmark} --data-dir {shlex.quote(str(root))}")


@data_app.command("check")
def data_check(
    benchmark: Annotated[str, typer.Argument(help="The benchmark whose data to check (see `list`).", autocompletion=completes(catalog.BENCHMARKS))],
    data_dir: Annotated[Path, typer.Option("--data-dir", help="The data directory, as given to --data-dir when you run.")],
) -> None:
    """The readers' checks without running anything: one line per problem (exit 1 if any), then what was found."""
    from orchestrator.data.check import check

    with domain_errors():
        catalog.benchmark(benchmark)
        found = check(benchmark, data_dir)
    for problem in found.problems:
        typer.echo(f"problem: {problem}")
    for fact in found.facts:
        typer.echo(fact)
    typer.echo(f"{benchmark} data in {data_dir}: " + (f"{len(found.problems)} problem(s)" if found.problems else "ok"))
    raise typer.Exit(code=1 if found.problems else 0)


baseline_app = typer.Typer(cls=PanelledHelp, no_args_is_help=True,
                           help="Baselines: keep campaigns' numbers under a name; `compare --baseline` checks later ones.")
app.add_typer(baseline_app, name="baseline")


@baseline_app.command("save")
def baseline_save(
    name: Annotated[str, typer.Argument(help="The baseline's name (letters, digits, . _ -), e.g. jax-0.10.")],
    results_dir: ResultsDirOption = DEFAULT_RESULTS_DIR,
    campaign: Annotated[list[str] | None, typer.Option("--campaign", "-c", help="Campaigns to keep (default: every collected one); repeat for several.")] = None,
    merged: Annotated[Path | None, typer.Option(help="Merged dataset (default: <results-dir>/merged.parquet).")] = None,
) -> None:
    """Keep the median throughput, its interval, the runs and the versions of each cell and framework as
    <results-dir>/baselines/NAME.json (replaced if it exists)."""
    from orchestrator.results import baseline
    from orchestrator.results.store import MERGED

    with domain_errors():
        path, entries = baseline.save(results_dir, merged or results_dir / MERGED, name, tuple(campaign or ()))
    typer.echo(f"baseline {name}: {entries} cell and framework entries in {path}")


@app.command()
def compare(
    baseline_name: Annotated[str, typer.Option("--baseline", "-b", help="The baseline to compare with (`baseline save NAME`).")],
    results_dir: ResultsDirOption = DEFAULT_RESULTS_DIR,
    campaign: Annotated[list[str] | None, typer.Option("--campaign", "-c", help="Campaigns to judge (default: every collected campaign the baseline was not made of).")] = None,
    tolerance: Annotated[str, typer.Option(help="A change within this is never flagged: 5% or 0.05.")] = "5%",
    fail_on_regression: Annotated[bool, typer.Option("--fail-on-regression", help="Exit 1 when a cell regressed (for CI).")] = False,
    merged: Annotated[Path | None, typer.Option(help="Merged dataset (default: <results-dir>/merged.parquet).")] = None,
) -> None:
    """Each cell's throughput against the baseline: flagged as a regression or an improvement when it changed
    by more than the tolerance and outside both sides' intervals, with the versions that changed."""
    from orchestrator.results import baseline
    from orchestrator.results.store import MERGED

    with domain_errors():
        limit = baseline.parse_tolerance(tolerance)
        saved = baseline.load(results_dir, baseline_name)
        verdicts = baseline.judge_campaigns(saved, merged or results_dir / MERGED, tuple(campaign or ()), limit)
    typer.echo(baseline.verdict_table(verdicts))
    regressed = baseline.regressions(verdicts)
    typer.echo(baseline.verdict_summary(baseline_name, verdicts, limit))
    raise typer.Exit(code=1 if regressed and fail_on_regression else 0)


VALUE_KINDS = {"int_parsing": "a whole number", "int_from_float": "a whole number", "float_parsing": "a number",
               "bool_parsing": "true or false"}


def usage_sentence(exc: click_errors.UsageError) -> str:
    """Click's usage error as one sentence: a value of the wrong type is named with the option and what it takes,
    in our words rather than pydantic's."""
    errors = getattr(exc.__cause__, "errors", None)
    param = getattr(exc, "param", None)
    if callable(errors) and param is not None and errors():
        first = errors()[0]
        name = next((opt for opt in param.opts if opt.startswith("--")), param.name)
        return f"{name} takes {VALUE_KINDS.get(first['type'], 'another kind of value')}, not {first['input']!r}"
    return exc.format_message().rstrip(".")


def run() -> None:
    """The entry point of `python main.py` and of the `jaxtorch-bench` command. Click's own usage errors (an
    unknown option, a value of the wrong type, a missing value) leave as one sentence and exit 2, as the
    domain's bad input does, instead of a box of help."""
    try:
        code = app(standalone_mode=False)
    except click_errors.UsageError as exc:
        where = f" (see `{exc.ctx.command_path} -h`)" if exc.ctx is not None else ""
        typer.echo(f"error: {usage_sentence(exc)}{where}", err=True)
        sys.exit(2)
    except click_errors.ClickException as exc:
        typer.echo(f"error: {exc.format_message()}", err=True)
        sys.exit(exc.exit_code)
    except typer.Abort:
        typer.echo("aborted", err=True)
        sys.exit(1)
    sys.exit(code if isinstance(code, int) else 0)
