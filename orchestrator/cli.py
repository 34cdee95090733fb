"""The command line: plan and submit (the default command), collect, list, envs.

Errors from the domain arrive as OrchestratorError and leave as one sentence on stderr with an exit code
(2 for usage errors); users never see a traceback for bad input.
"""

from __future__ import annotations

import shlex
import sys
from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer

from orchestrator import DEFAULT_RESULTS_DIR, DEFAULT_SCRIPTS_DIR
from orchestrator.errors import OrchestratorError, UsageError
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


class Executor(str, Enum):
    slurm = "slurm"
    submitit = "submitit"
    local = "local"


def fail(exc: OrchestratorError) -> typer.Exit:
    typer.echo(f"error: {exc}", err=True)
    return typer.Exit(code=exc.exit_code)


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
    if ctx.invoked_subcommand is not None:
        return
    if benchmark is None or use_case is None:
        typer.echo(ctx.get_help())
        typer.echo("\nerror: give --benchmark and --use-case, or a command such as `collect`", err=True)
        raise typer.Exit(code=2)
    from orchestrator.plan import matrix
    from orchestrator.plan.profile import load_profile
    from orchestrator.run.launch import LaunchRequest, launch

    try:
        bench = catalog.benchmark(benchmark)
        settings = matrix.RunSettings(
            epochs=epochs if epochs is not None else bench.default_epochs,
            learning_rate=learning_rate,
            optimizer=optimizer,
            seed=seed,
            warmup_steps=warmup_steps,
            # A batch search runs on synthetic data: memory depends on the shapes, not on the values.
            data_source="synthetic" if synthetic or find_max_batch else "real",
            data_dir=str(data_dir) if data_dir else None,
            synthetic_samples=synthetic_samples,
            device=device,
            clip_norm=clip_norm,
            noise_multiplier=noise_multiplier,
            loop_batch_size=loop_batch_size,
            nodes=nodes,
            tasks_per_node=tasks_per_node,
            model_variant=variant,
            timed_steps=timed_steps,
            min_duration_s=min_duration,
            trials=trials,
            paired=paired,
            torch_compile=torch_compile,
            channels_last=channels_last,
            batch_search=find_max_batch,
            batch_search_limit=max_batch_limit,
            memory_limit_bytes=matrix.parse_memory_size(memory_limit) if memory_limit else 0,
            trace_steps=trace_steps,
        )
        if memory_limit and not find_max_batch:
            raise UsageError("--memory-limit caps the tries of --find-max-batch; give --find-max-batch too")
        request = LaunchRequest(
            benchmark=benchmark,
            use_case=use_case,
            frameworks=matrix.parse_list(frameworks),
            models=matrix.parse_list(models),
            batch_sizes=matrix.parse_batch_sizes(batch_sizes),
            precisions=matrix.parse_list(precision),
            settings=settings,
            profile=load_profile(profile),
            executor=executor.value,
            dry_run=dry_run,
            wait=wait,
            results_dir=results_dir,
            scripts_dir=scripts_dir,
            command=shlex.join(["python", "main.py", *sys.argv[1:]]),
            rerun_completed=rerun_completed,
            new_campaign=new_campaign,
        )
        code = launch(request)
    except OrchestratorError as exc:
        raise fail(exc) from None
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
    from orchestrator.results.collect import (
        batch_search_table,
        comparison_tables,
        merge,
        missing_cells,
        scaling_table,
        summary_frame,
        write_failures,
    )
    from orchestrator.tables import format_table

    if not results_dir.is_dir():
        raise fail(OrchestratorError(f"results folder {results_dir} does not exist; nothing to collect"))
    output = output or results_dir / "merged.parquet"
    collected = merge(results_dir, output)
    for path, reason in collected.skipped:
        typer.echo(f"skipped {path}: {reason}", err=True)
    for path in collected.changed:
        typer.echo(f"re-read {path}: it changed since the last collect; its old rows were replaced", err=True)
    for path in collected.removed:
        typer.echo(f"dropped the rows of {path}: the file is gone", err=True)
    for older, newer in collected.superseded:
        typer.echo(f"left out {older}: the same cell of the same campaign ran again later, in {newer}; "
                   "the newer run is kept", err=True)
    how = "from scratch" if collected.from_scratch else f"{collected.read} new or changed"
    typer.echo(f"merged {collected.rows} rows from {collected.files} task files ({how}) into {collected.output}")
    missing = missing_cells(results_dir, log_lines)
    failures_path = write_failures(failures or results_dir / "failures.parquet", missing)
    if missing:
        typer.echo(f"\n{len(missing)} cells have no result (listed in {failures_path}):")
        typer.echo(format_table(["campaign", "framework", "index", "cell", "state", "reason"],
                                [[m["campaign"], m["framework"], m["array_index"], m["cell_id"], m["state"],
                                  m["reason"]] for m in missing]))
        for m in missing:
            if m["log_tail"]:
                typer.echo(f"--- {m['framework']} {m['array_index']} ({m['cell_id']}): end of {m['log']}:")
                typer.echo("\n".join(f"  | {line}" for line in m["log_tail"].splitlines()))
        typer.echo("submit only those again with: python main.py resubmit CAMPAIGN")
    summary = summary_frame(output)
    for device_model, table in comparison_tables(summary).items():
        typer.echo(f"\n{device_model}\n{table}")
    scaling = scaling_table(summary)
    if scaling:
        typer.echo(f"\nData-parallel scaling (same global batch as one process):\n{scaling}")
    searched = batch_search_table(summary)
    if searched:
        typer.echo(f"\nLargest batch that fits (each try a fresh process):\n{searched}")


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
    from orchestrator.run.validate import ValidateRequest, summary, validate_on_slurm
    from orchestrator.run.validate import validate as run_validate

    try:
        req = ValidateRequest(model=model, batch_size=batch_size, precision=precision, variant=variant, seed=seed,
                              device=device, profile=load_profile(profile), torch_compile=torch_compile,
                              channels_last=channels_last)
        say = lambda line: typer.echo(line, err=True)  # noqa: E731  progress on stderr, the verdict on stdout
        if executor == "local":
            result = run_validate(req, report=say)
        elif executor == "slurm":
            command = shlex.join(["python", "main.py", *sys.argv[1:]])
            result = validate_on_slurm(req, results_dir, command, report=say)
        else:
            raise UsageError(f"unknown executor {executor!r} for validate; choose from: local, slurm")
    except OrchestratorError as exc:
        raise fail(exc) from None
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
    from orchestrator.plan.profile import load_profile
    from orchestrator.run.envs import ensure_env

    try:
        chosen = parse_list(framework) or list(catalog.FRAMEWORKS)
        for name in chosen:
            catalog.check_framework(name)
        loaded = load_profile(profile)
        for name in chosen:
            ensure_env(name, loaded, report=typer.echo)
    except OrchestratorError as exc:
        raise fail(exc) from None


@app.command()
def report(
    merged: Annotated[Optional[Path], typer.Option(help="Merged dataset (default: <results-dir>/merged.parquet).")] = None,
    results_dir: Annotated[Path, typer.Option(help="Folder holding the campaigns.")] = DEFAULT_RESULTS_DIR,
    output_dir: Annotated[Optional[Path], typer.Option(help="Where the report goes (default: <results-dir>/report).")] = None,
    wandb_project: Annotated[Optional[str], typer.Option(help="Also export the results to this W&B project (W&B's own settings apply, e.g. WANDB_MODE=offline).")] = None,
) -> None:
    """Write the comparison as Markdown, LaTeX and CSV tables, plots, and one self-contained HTML page."""
    from orchestrator.results.report import write_report

    merged = merged or results_dir / "merged.parquet"
    if not merged.exists():
        raise fail(OrchestratorError(f"{merged} does not exist; run `python main.py collect` first"))
    try:
        written = write_report(merged, output_dir or results_dir / "report")
    except OrchestratorError as exc:
        raise fail(exc) from None
    for kind, path in written.tables.items():
        typer.echo(f"{kind}: {path}")
    typer.echo(f"{len(written.plots)} plots in {written.folder / 'plots'}")
    typer.echo(f"html: {written.html}")
    if wandb_project:
        import pandas as pd

        from orchestrator.results.compare import comparison_frame
        from orchestrator.results.export_wandb import export

        df = pd.read_parquet(merged)
        try:
            run_dir = export(df, comparison_frame(df), wandb_project, written.folder)  # W&B adds its own wandb/
        except OrchestratorError as exc:
            raise fail(exc) from None
        typer.echo(f"W&B run written to {run_dir}")


@app.command()
def doctor(
    profile: Annotated[Optional[Path], typer.Option(help="Cluster profile (TOML) to check.")] = None,
    benchmark: Annotated[str, typer.Option(help="Benchmark whose data to check.")] = "digits",
    data_dir: Annotated[Optional[Path], typer.Option(help="Its data directory, where it needs one.")] = None,
) -> None:
    """Check the setup: environments import their framework, devices, Slurm commands and accounting, data."""
    from orchestrator.plan.profile import load_profile
    from orchestrator.run.doctor import run_checks
    from orchestrator.tables import format_table

    try:
        catalog.benchmark(benchmark)
        checks = run_checks(load_profile(profile), [(benchmark, data_dir)])
    except OrchestratorError as exc:
        raise fail(exc) from None
    typer.echo(format_table(["check", "", "detail"], [[c.name, "ok" if c.ok else "FAIL", c.detail] for c in checks]))
    failed = [c for c in checks if not c.ok]
    typer.echo(f"{len(checks) - len(failed)} of {len(checks)} checks passed")
    raise typer.Exit(code=1 if failed else 0)


CampaignArg = Annotated[Optional[str], typer.Argument(help="Campaign id or folder (default: the newest).")]
ResultsDirOption = Annotated[Path, typer.Option(help="Folder holding the campaigns.")]


@app.command()
def status(
    campaign: CampaignArg = None,
    results_dir: ResultsDirOption = DEFAULT_RESULTS_DIR,
    log_lines: Annotated[int, typer.Option(help="Lines of the end of each failed task's log to show.")] = 20,
) -> None:
    """The state of every cell of a campaign: pending, running, completed, failed, timed out, cancelled, no result.

    A cell that ended without a result is named with its reason (Slurm's state, the task's failure row) and
    the end of its log."""
    from orchestrator.run.status import campaign_status, find_campaign, log_tail, progress_bar
    from orchestrator.tables import format_table

    try:
        folder = find_campaign(results_dir, campaign)
    except OrchestratorError as exc:
        raise fail(exc) from None
    cells = campaign_status(folder)
    typer.echo(f"campaign {folder.name}")
    typer.echo(format_table(["framework", "index", "cell", "task", "state", "detail"],
                            [[c.framework, c.array_index, c.cell_id, c.task_id, c.state, c.detail] for c in cells]))
    typer.echo(progress_bar(cells))
    for c in cells:
        if c.ended_without_result and log_lines > 0:
            tail = log_tail(c.log, log_lines)
            typer.echo(f"\n--- {c.framework} {c.array_index} ({c.cell_id}): {c.state}: {c.detail}")
            typer.echo(f"  end of {c.log}:" if tail else "  (no log)")
            for line in tail:
                typer.echo(f"  | {line}")
    missing = sum(c.ended_without_result for c in cells)
    if missing:
        resubmit_cmd = "python main.py resubmit" + ("" if results_dir == DEFAULT_RESULTS_DIR else
                                                    f" --results-dir {shlex.quote(str(results_dir))}")
        typer.echo(f"\n{missing} cells ended without a result; submit only those again with: {resubmit_cmd} {folder.name}")


@app.command()
def resubmit(
    campaign: CampaignArg = None,
    results_dir: ResultsDirOption = DEFAULT_RESULTS_DIR,
    executor: Annotated[Optional[Executor], typer.Option(help="slurm, submitit or local (default: the campaign's).")] = None,
    rerun_completed: Annotated[bool, typer.Option("--rerun-completed", "--force", help="Also run the cells that have a result again; each new result replaces the old one.")] = False,
    wait: Annotated[bool, typer.Option("--wait", help="Wait until the submitted jobs have finished.")] = False,
) -> None:
    """Submit again only the cells of a campaign that have no result (failed, timed out, cancelled, no result),
    one array per framework with only their indices. Cells still queued or running are left alone."""
    from orchestrator.run.resubmit import resubmit as run_resubmit
    from orchestrator.run.status import find_campaign

    try:
        folder = find_campaign(results_dir, campaign)
        done = run_resubmit(folder, executor=executor.value if executor else None, rerun_completed=rerun_completed,
                            wait=wait, report=typer.echo)
    except OrchestratorError as exc:
        raise fail(exc) from None
    failed = [(r.framework, i, why) for r in done for i, why in r.failed.items()]
    for framework, index, why in failed:
        typer.echo(f"FAILED {framework} array task {index}: {why.splitlines()[0]}", err=True)
    raise typer.Exit(code=1 if failed else 0)


@app.command()
def watch(
    campaign: CampaignArg = None,
    results_dir: ResultsDirOption = DEFAULT_RESULTS_DIR,
    interval: Annotated[float, typer.Option(help="Seconds between the first polls; it backs off to a minute.")] = 5.0,
) -> None:
    """Show live progress until every cell of the campaign has ended; exit 1 if any ended without a result."""
    import time

    from orchestrator.run.status import campaign_status, find_campaign, is_active, progress_bar

    if interval <= 0:
        raise fail(OrchestratorError("--interval must be positive"))
    try:
        folder = find_campaign(results_dir, campaign)
    except OrchestratorError as exc:
        raise fail(exc) from None
    typer.echo(f"campaign {folder.name}")
    delay = interval
    while True:
        cells = campaign_status(folder)  # one sacct (and squeue) call per poll for the whole campaign
        typer.echo(progress_bar(cells))
        if not is_active(cells):
            break
        time.sleep(delay)
        delay = min(delay * 1.5, 60.0)
    unfinished = [c for c in cells if c.state != "completed"]
    for c in unfinished:
        typer.echo(f"{c.framework} {c.array_index} ({c.cell_id}): {c.state}: {c.detail}", err=True)
    raise typer.Exit(code=1 if unfinished else 0)


def run() -> None:
    app()
