"""The default command: plan a campaign from the benchmark matrix, render its scripts and submit them."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from bench_contract.config import MATRIX, MEASUREMENT, PRIVACY, SLURM
from bench_contract.spec import DP_ENGINES, PARALLELISMS
from orchestrator import DEFAULT_SCRIPTS_DIR
from orchestrator.cli.common import command_line, completes, completes_executors, domain_errors, warn
from orchestrator.cli.options import (
    Account,
    GpusPerTask,
    Partition,
    Qos,
    Systems,
    command_line_sources,
    given_settings,
    with_setting_options,
)
from orchestrator.plan import catalog
from orchestrator.plan.profile import DEFAULT_ARRAY_PARALLELISM
from orchestrator.plan.settings import parse_use_cases


def show_version(value: bool) -> None:
    if value:
        from orchestrator.plan.campaign import git_commit, project_version

        typer.echo(f"jaxtorch-bench {project_version()} (git {git_commit()})")
        raise typer.Exit()


@with_setting_options  # and an option per setting of the cell's configuration (bench_contract.config)
def main(
    ctx: typer.Context,
    *,
    config: Annotated[Path | None, typer.Option("--config", help="A campaign's configuration file (TOML), such as the campaign.toml every campaign writes beside its manifest: plans its cells again; options given beside it override it.", rich_help_panel=MATRIX)] = None,
    preset: Annotated[str | None, typer.Option("--preset", help="A named configuration under --config and the options: paper (paired trials, as many as the interval needs: --paired --trials auto).", autocompletion=completes(("paper",)), rich_help_panel=MATRIX)] = None,
    benchmark: Annotated[str | None, typer.Option("--benchmark", "-b", help="Benchmark to run (see `list`).", autocompletion=completes(catalog.BENCHMARKS), rich_help_panel=MATRIX)] = None,
    use_case: Annotated[list[str] | None, typer.Option("--use-case", "-u", help=f"{', '.join(f'{c.number} {c.short}' for c in catalog.USE_CASES.values())}; several, e.g. 3,5, plan one campaign.", autocompletion=completes([str(n) for n in catalog.USE_CASES]), rich_help_panel=MATRIX)] = None,
    frameworks: Annotated[list[str] | None, typer.Option("--frameworks", help="jax,torch (default: both).", autocompletion=completes(catalog.FRAMEWORKS), rich_help_panel=MATRIX)] = None,
    models: Annotated[list[str] | None, typer.Option("--models", help="Models (default: the benchmark's).", autocompletion=completes(catalog.MODELS), rich_help_panel=MATRIX)] = None,
    batch_sizes: Annotated[list[str] | None, typer.Option("--batch-sizes", help="Batch sizes, e.g. 32,64 (default: the benchmark's).", rich_help_panel=MATRIX)] = None,
    precision: Annotated[list[str] | None, typer.Option("--precision", help="Precision policies (default: fp32).", autocompletion=completes(catalog.PRECISIONS), rich_help_panel=MATRIX)] = None,
    torch_modes: Annotated[list[str] | None, typer.Option("--torch-modes", help="PyTorch modes, e.g. eager,compiled: JAX is compared with each (default: eager).", autocompletion=completes(catalog.TORCH_MODES), rich_help_panel=MATRIX)] = None,
    dp_engine: Annotated[list[str] | None, typer.Option("--dp-engine", help="PyTorch's DP-SGD engines, e.g. torchfunc,opacus (use cases 3 and 4): torch.func's vmap or Opacus's GradSampleModule; JAX (always jax.vmap) is compared with each (default: torchfunc).", autocompletion=completes(DP_ENGINES), rich_help_panel=PRIVACY)] = None,
    parallelism: Annotated[list[str] | None, typer.Option("--parallelism", help="Use case 2's state: ddp (replicated on every device: DDP, JAX replicated) and/or fsdp (sharded, FSDP in both: FSDP2's fully_shard, JAX's shard_map step), e.g. ddp,fsdp (default: ddp).", autocompletion=completes(PARALLELISMS), rich_help_panel=SLURM)] = None,
    executor: Annotated[str, typer.Option(help="slurm (sbatch), submitit, or local (run the scripts here).", autocompletion=completes_executors, rich_help_panel=SLURM)] = "slurm",
    profile: Annotated[Path | None, typer.Option(help="Cluster profile (TOML); default: built-in.", rich_help_panel=SLURM)] = None,
    partition: Partition = None,
    account: Account = None,
    qos: Qos = None,
    gpus_per_task: GpusPerTask = None,
    time: Annotated[str | None, typer.Option(
        help="Time limit per array task, e.g. 02:00:00 or 1-00:00:00 (default: the profile's time_limit, else "
             "estimated from the cells' work and said in each script's header).",
        show_default=False, rich_help_panel=SLURM)] = None,
    mem: Annotated[str | None, typer.Option(
        help="Memory per node, e.g. 64G (default: the profile's mem or mem_per_gpu; without a profile, each GPU's "
             "share of a node, else the partition's).",
        show_default=False, rich_help_panel=SLURM)] = None,
    array_parallelism: Annotated[int | None, typer.Option(
        help="Run at most N tasks of each array at once (Slurm's --array=0-K%N; default: the profile's "
             f"array_parallelism, else {DEFAULT_ARRAY_PARALLELISM} where an array holds more).",
        show_default=False, rich_help_panel=SLURM)] = None,
    systems: Systems = None,
    collect_after: Annotated[bool, typer.Option("--collect-after", help="Also submit a small job (no GPU) that starts when every array has ended and runs collect and report of the campaign.", rich_help_panel=SLURM)] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Write the scripts and the campaign, submit nothing.", rich_help_panel=SLURM)] = False,
    wait: Annotated[bool, typer.Option("--wait", help="Wait until the submitted jobs have finished.", rich_help_panel=SLURM)] = False,
    rerun_completed: Annotated[bool, typer.Option("--rerun-completed", "--force", help="The same command again submits only the cells without a result; this also runs the completed ones again.", rich_help_panel=SLURM)] = False,
    new_campaign: Annotated[bool, typer.Option("--new-campaign", help="The same command again plans a separate campaign instead of completing the earlier one.", rich_help_panel=SLURM)] = False,
    results_dir: Annotated[Path | None, typer.Option(help="Where campaigns, their results and task logs go (default: the profile's results_dir, else results/ in the checkout).", show_default=False, rich_help_panel=SLURM)] = None,
    scripts_dir: Annotated[Path, typer.Option(help="Where the sbatch scripts are written.", rich_help_panel=SLURM)] = DEFAULT_SCRIPTS_DIR,
    trials: Annotated[str, typer.Option("--trials", help="Run each cell as this many independent trials, each in a fresh process; `auto`: paired trials until the speed-up's 95% interval is within --target-interval (Stein's two-stage rule: 5 trials, then as many as they say), at most --max-trials.", rich_help_panel=MEASUREMENT)] = "1",
    target_interval: Annotated[str | None, typer.Option("--target-interval", help="With --trials auto: the interval's half-width to reach, relative to the speed-up, e.g. 5% or 0.05 (default 5%).", rich_help_panel=MEASUREMENT)] = None,
    max_trials: Annotated[int | None, typer.Option("--max-trials", help="With --trials auto: the most trials a pair runs (default 20); fewer where the job's --time would not hold them at the first 5 trials' pace.", rich_help_panel=MEASUREMENT)] = None,
    version: Annotated[bool, typer.Option("--version", help="Print the version and the git commit, then exit.", callback=show_version, is_eager=True)] = False,
    **settings,  # an option per setting of the cell's configuration (with_setting_options)
) -> None:
    """Plan a campaign from the benchmark matrix, render one sbatch array script per framework, and submit it."""
    options = {name: value for name, value in locals().items()
               if name not in ("ctx", "version", "settings", "config", "preset")}
    if ctx.invoked_subcommand is not None:
        return

    with domain_errors():
        file_settings = from_campaign_file(config, preset, options, command_line_sources(ctx, options))
    if options["benchmark"] is None or not options["use_case"]:
        # One sentence, not the page of help: the help is one -h away.
        typer.echo("error: give --benchmark and --use-case (see `python main.py -h`), or a command such as "
                   "`collect`", err=True)
        raise typer.Exit(code=2)
    from orchestrator.plan.rules import one_process_warning
    from orchestrator.run.executors import executor
    from orchestrator.run.launch import LaunchOptions, launch

    with domain_errors():
        executor(options["executor"])  # an unknown name is refused before anything else is read
        given = {**file_settings, **given_settings(ctx, settings)}  # the command line over the file
        for number in parse_use_cases(options["use_case"]):  # each use case warns as it would alone
            note = one_process_warning(number, given.get("nodes", 1), given.get("tasks_per_node", 1))
            if note:
                warn(note)
        code = launch(LaunchOptions(**options, given=given).request(command_line()))
    raise typer.Exit(code=code)


def from_campaign_file(path: Path | None, preset: str | None, options: dict, typed: set[str]) -> dict:
    """Fill `options` the command line left at their defaults from the campaign file at `path` over the named
    preset (plan.campaign_config; either may be None); return their settings, the file's over the preset's."""
    from orchestrator.plan import campaign_config

    preset_matrix, preset_settings = campaign_config.preset(preset)
    matrix, file_settings = campaign_config.load(path) if path else ({}, {})
    options.update({key: value for key, value in {**preset_matrix, **matrix}.items() if key not in typed})
    return {**preset_settings, **file_settings}
