"""The command line: plan and submit (the default command), collect, list, envs.

Each command turns its options into one call of the module that owns the work, which reports through the
callbacks it is given (results to stdout, progress and warnings to stderr). Errors from the domain arrive as
OrchestratorError and leave as one sentence on stderr with an exit code (2 for usage errors); users never see
a traceback for bad input.
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer

from orchestrator import DEFAULT_RESULTS_DIR, DEFAULT_SCRIPTS_DIR
from orchestrator.errors import OrchestratorError
from orchestrator.plan import catalog

MATRIX = "Matrix (each axis: a comma-separated list, or repeat the option)"
TRAINING = "Training and data"
PRIVACY = "DP-SGD (use cases 3 and 4)"
PARALLEL = "Data parallelism (use cases 2 and 4)"
SUBMISSION = "Submission"
MEASUREMENT = "Measurement: repeats, trials, pairing"

app = typer.Typer(
    context_settings={"help_option_names": ["-h", "--help"]},
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    help="Plan, submit and collect fair JAX-vs-PyTorch benchmarks on Slurm.\n\n"
    "Run a campaign:  python main.py --benchmark digits --use-case 1\n\n"
    "Then merge the results:  python main.py collect",
)


Executor = Enum("Executor", {name: name for name in catalog.EXECUTORS}, type=str)  # the choices of --executor


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
    """The command as typed, recorded with what it planned."""
    return shlex.join(["python", "main.py", *sys.argv[1:]])


@app.callback(invoke_without_command=True)
def main(
    ctx: typer.Context,
    benchmark: Annotated[Optional[str], typer.Option("--benchmark", "-b", help="Benchmark to run (see `list`).")] = None,
    use_case: Annotated[Optional[int], typer.Option("--use-case", "-u", help="1 train, 2 multi-device train, 3 per-sample grads, 4 multi-device per-sample grads, 5 inference.")] = None,
    frameworks: Annotated[Optional[list[str]], typer.Option("--frameworks", help="jax,torch (default: both).", rich_help_panel=MATRIX)] = None,
    models: Annotated[Optional[list[str]], typer.Option("--models", help="Models (default: the benchmark's).", rich_help_panel=MATRIX)] = None,
    batch_sizes: Annotated[Optional[list[str]], typer.Option("--batch-sizes", help="Batch sizes, e.g. 32,64 (default: the benchmark's).", rich_help_panel=MATRIX)] = None,
    precision: Annotated[Optional[list[str]], typer.Option("--precision", help="Precision policies (default: fp32).", rich_help_panel=MATRIX)] = None,
    variant: Annotated[str, typer.Option("--variant", help="Model size: full, or tiny (fewer blocks, smaller inputs) for CPU tests.", rich_help_panel=MATRIX)] = "full",
    torch_compile: Annotated[bool, typer.Option("--torch-compile", help="PyTorch cells use torch.compile instead of eager (inference).", rich_help_panel=MATRIX)] = False,
    channels_last: Annotated[bool, typer.Option("--channels-last", help="PyTorch CNNs run in channels_last memory format (inference).", rich_help_panel=MATRIX)] = False,
    find_max_batch: Annotated[bool, typer.Option("--find-max-batch", help="Instead of measuring, find the largest batch that fits in memory: doubling, then binary search, each try a fresh process on synthetic data; --batch-sizes gives the start (default 1).", rich_help_panel=MATRIX)] = False,
    max_batch_limit: Annotated[int, typer.Option(help="Largest batch size --find-max-batch tries.", rich_help_panel=MATRIX)] = 65536,
    memory_limit: Annotated[Optional[str], typer.Option(help="Artificial memory cap of each --find-max-batch try (its address space, like ulimit -v), e.g. 6G or 512M.", rich_help_panel=MATRIX)] = None,
    trace_steps: Annotated[int, typer.Option(help="After measuring, run this many more steps under the framework's profiler and keep the trace (Perfetto/TensorBoard) beside the results; 0 for none.", rich_help_panel=MATRIX)] = 0,
    epochs: Annotated[Optional[int], typer.Option(help="Training epochs (default: the benchmark's).", rich_help_panel=TRAINING)] = None,
    learning_rate: Annotated[float, typer.Option(help="Learning rate.", rich_help_panel=TRAINING)] = 0.01,
    optimizer: Annotated[str, typer.Option(help="Optimizer: sgd.", rich_help_panel=TRAINING)] = "sgd",
    seed: Annotated[int, typer.Option(help="Seed of the shared initial weights and of the batch order.", rich_help_panel=TRAINING)] = 0,
    warmup_steps: Annotated[int, typer.Option(help="Steps run before timing starts.", rich_help_panel=TRAINING)] = 5,
    timed_steps: Annotated[int, typer.Option("--min-iterations", "--timed-steps", help="Inference and the per-sample vectorisation timing: time at least this many repeats of the step.", rich_help_panel=MEASUREMENT)] = 50,
    min_duration: Annotated[float, typer.Option("--min-duration", help="With --min-iterations: keep timing until the timed steps add up to at least this many seconds.", rich_help_panel=MEASUREMENT)] = 1.0,
    trials: Annotated[int, typer.Option("--trials", help="Run each cell as this many independent trials, each in a fresh process.", rich_help_panel=MEASUREMENT)] = 1,
    paired: Annotated[bool, typer.Option("--paired", help="One job per JAX/PyTorch cell pair: both run alternately on one node, trials interleaved A B A B.", rich_help_panel=MEASUREMENT)] = False,
    data_dir: Annotated[Optional[Path], typer.Option(help="Folder with the benchmark's real data files.", rich_help_panel=TRAINING)] = None,
    synthetic: Annotated[bool, typer.Option("--synthetic", help="Use synthetic data instead of real data.", rich_help_panel=TRAINING)] = False,
    synthetic_samples: Annotated[int, typer.Option(help="Size of the synthetic data set.", rich_help_panel=TRAINING)] = 2048,
    device: Annotated[str, typer.Option(help="auto (GPU if the framework sees one), cpu or gpu.", rich_help_panel=TRAINING)] = "auto",
    clip_norm: Annotated[float, typer.Option(help="Clip each per-example gradient to this L2 norm C.", rich_help_panel=PRIVACY)] = 1.0,
    noise_multiplier: Annotated[float, typer.Option(help="Gaussian noise of std sigma*C on the summed gradients; 0 for none (then JAX and PyTorch match step by step).", rich_help_panel=PRIVACY)] = 1.0,
    loop_batch_size: Annotated[int, typer.Option(help="Batch at which the naive per-example loop is timed against vmap.", rich_help_panel=PRIVACY)] = 8,
    nodes: Annotated[int, typer.Option(help="Nodes per cell; one process per device, started by srun.", rich_help_panel=PARALLEL)] = 1,
    tasks_per_node: Annotated[int, typer.Option(help="Processes (devices) per node.", rich_help_panel=PARALLEL)] = 1,
    executor: Annotated[Executor, typer.Option(help="slurm (sbatch), submitit, or local (run the scripts here).", rich_help_panel=SUBMISSION)] = Executor.slurm,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Write the scripts and the campaign, submit nothing.", rich_help_panel=SUBMISSION)] = False,
    wait: Annotated[bool, typer.Option("--wait", help="Wait until the submitted jobs have finished.", rich_help_panel=SUBMISSION)] = False,
    rerun_completed: Annotated[bool, typer.Option("--rerun-completed", "--force", help="The same command again submits only the cells without a result; this also runs the completed ones again.", rich_help_panel=SUBMISSION)] = False,
    new_campaign: Annotated[bool, typer.Option("--new-campaign", help="The same command again plans a separate campaign instead of completing the earlier one.", rich_help_panel=SUBMISSION)] = False,
    profile: Annotated[Optional[Path], typer.Option(help="Cluster profile (TOML); default: built-in.", rich_help_panel=SUBMISSION)] = None,
    results_dir: Annotated[Path, typer.Option(help="Where campaigns and results go.", rich_help_panel=SUBMISSION)] = DEFAULT_RESULTS_DIR,
    scripts_dir: Annotated[Path, typer.Option(help="Where the sbatch scripts are written.", rich_help_panel=SUBMISSION)] = DEFAULT_SCRIPTS_DIR,
) -> None:
    """Plan a campaign from the benchmark matrix, render one sbatch array script per framework, and submit it."""
    options = {name: value for name, value in locals().items() if name != "ctx"}  # every option, by its name
    if ctx.invoked_subcommand is not None:
        return
    if benchmark is None or use_case is None:
        typer.echo(ctx.get_help())
        typer.echo("\nerror: give --benchmark and --use-case, or a command such as `collect`", err=True)
        raise typer.Exit(code=2)
    from orchestrator.run.launch import LaunchOptions, launch

    with domain_errors():
        code = launch(LaunchOptions(**{**options, "executor": executor.value}).request(command_line()))
    raise typer.Exit(code=code)


@app.command()
def collect(
    results_dir: Annotated[Path, typer.Option(help="Folder holding the campaigns.")] = DEFAULT_RESULTS_DIR,
    output: Annotated[Optional[Path], typer.Option(help="Merged Parquet dataset, a folder of parts (default: <results-dir>/merged.parquet).")] = None,
    failures: Annotated[Optional[Path], typer.Option(help="The cells without a result, with reasons and log ends (default: <results-dir>/failures.parquet).")] = None,
    log_lines: Annotated[int, typer.Option(help="Lines of the end of each failed task's log to show and keep.")] = 20,
) -> None:
    """Merge every task's Parquet file into one dataset and print JAX vs PyTorch per GPU (or CPU) model.

    Incremental: only task files that are new or changed since the last collect are read. Every cell without
    a result is named with its reason, and listed apart from the measurements in failures.parquet."""
    from orchestrator.results.collect import collect_and_report

    with domain_errors():
        collect_and_report(results_dir, output, failures, log_lines, report=typer.echo, warn=warn)


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
    profile: Annotated[Optional[Path], typer.Option(help="Cluster profile (TOML): where the environments live.")] = None,
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
    framework: Annotated[Optional[list[str]], typer.Option("--framework", help="jax, torch (default: both).")] = None,
    profile: Annotated[Optional[Path], typer.Option(help="Cluster profile (TOML): where environments live, JAX CPU or CUDA recipe.")] = None,
) -> None:
    """Create each framework's own environment from its pinned requirements (reused while they are unchanged)."""
    from orchestrator.plan.matrix import parse_list
    from orchestrator.run.envs import ensure_envs

    with domain_errors():
        ensure_envs(parse_list(framework), profile, report=typer.echo)


@app.command()
def report(
    merged: Annotated[Optional[Path], typer.Option(help="Merged dataset (default: <results-dir>/merged.parquet).")] = None,
    results_dir: Annotated[Path, typer.Option(help="Folder holding the campaigns.")] = DEFAULT_RESULTS_DIR,
    output_dir: Annotated[Optional[Path], typer.Option(help="Where the report goes (default: <results-dir>/report).")] = None,
    wandb_project: Annotated[Optional[str], typer.Option(help="Also export the results to this W&B project (W&B's own settings apply, e.g. WANDB_MODE=offline).")] = None,
) -> None:
    """Write the comparison as Markdown, LaTeX and CSV tables, plots, and one self-contained HTML page."""
    from orchestrator.results.report import report_and_export

    with domain_errors():
        report_and_export(results_dir, merged, output_dir, wandb_project, report=typer.echo)


@app.command()
def doctor(
    profile: Annotated[Optional[Path], typer.Option(help="Cluster profile (TOML) to check.")] = None,
    benchmark: Annotated[str, typer.Option(help="Benchmark whose data to check.")] = "digits",
    data_dir: Annotated[Optional[Path], typer.Option(help="Its data directory, where it needs one.")] = None,
    on_node: Annotated[bool, typer.Option("--on-node", help="Check the frameworks' devices in a short job (srun) on the profile's partition, with its GPUs.")] = False,
) -> None:
    """Check the setup: environments import their framework, devices, Slurm commands and accounting, data."""
    from orchestrator.run.doctor import check_setup

    with domain_errors():
        code = check_setup(profile, benchmark, data_dir, report=typer.echo, on_node=on_node)
    raise typer.Exit(code=code)


CampaignArg = Annotated[Optional[str], typer.Argument(help="Campaign id or folder (default: the newest).")]
ResultsDirOption = Annotated[Path, typer.Option(help="Folder holding the campaigns.")]


@app.command()
def status(
    campaign: CampaignArg = None,
    results_dir: ResultsDirOption = DEFAULT_RESULTS_DIR,
    log_lines: Annotated[int, typer.Option(help="Lines of the end of each failed task's log to show.")] = 20,
) -> None:
    """The state of every cell of a campaign: pending, running, completed, failed, timed out, cancelled, no result,
    or unknown (squeue or sacct failed).

    A cell that ended without a readable result is named with its reason (Slurm's state, the task's failure
    row, a bad result file) and the end of its log."""
    from orchestrator.run.status import show_status

    with domain_errors():
        show_status(results_dir, campaign, log_lines, report=typer.echo)


@app.command()
def resubmit(
    campaign: CampaignArg = None,
    results_dir: ResultsDirOption = DEFAULT_RESULTS_DIR,
    executor: Annotated[Optional[Executor], typer.Option(help="slurm, submitit or local (default: the campaign's).")] = None,
    rerun_completed: Annotated[bool, typer.Option("--rerun-completed", "--force", help="Also run the cells that have a result again; each new result replaces the old one.")] = False,
    wait: Annotated[bool, typer.Option("--wait", help="Wait until the submitted jobs have finished.")] = False,
) -> None:
    """Submit again only the cells of a campaign that have no result (failed, timed out, cancelled, no result),
    one array per framework with only their indices. Cells still queued or running are left alone; a bad
    result file is moved aside first; nothing is submitted while the queue cannot be read."""
    from orchestrator.run.resubmit import resubmit_and_report
    from orchestrator.run.status import find_campaign

    with domain_errors():
        folder = find_campaign(results_dir, campaign)
        code = resubmit_and_report(folder, executor=executor.value if executor else None,
                                   rerun_completed=rerun_completed, wait=wait, report=typer.echo, warn=warn)
    raise typer.Exit(code=code)


@app.command()
def watch(
    campaign: CampaignArg = None,
    results_dir: ResultsDirOption = DEFAULT_RESULTS_DIR,
    interval: Annotated[float, typer.Option(help="Seconds between the first polls; it backs off to a minute.")] = 5.0,
) -> None:
    """Show live progress until every cell of the campaign has ended; exit 1 if any ended without a result."""
    from orchestrator.run.status import watch_campaign

    with domain_errors():
        code = watch_campaign(results_dir, campaign, interval, report=typer.echo, warn=warn)
    raise typer.Exit(code=code)


def run() -> None:
    app()
