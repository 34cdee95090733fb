"""The default command: plan a campaign from the benchmark matrix, render its scripts and submit them."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from bench_contract.spec import DP_ENGINES, PARALLELISMS, SAMPLINGS
from orchestrator import DEFAULT_RESULTS_DIR, DEFAULT_SCRIPTS_DIR
from orchestrator.cli.common import command_line, completes, domain_errors, warn
from orchestrator.plan import catalog

# The panels of the default command's help, one per kind of option.
MATRIX = "Matrix: what runs (each axis a comma-separated list, or repeat the option)"
TRAINING = "Training"
PRIVACY = "DP-SGD (use cases 3 and 4)"
DATA = "Data"
SLURM = "Slurm: where and how the jobs run"
MEASUREMENT = "Measurement: repeats, trials, pairing, batch search, traces"


def show_version(value: bool) -> None:
    if value:
        from orchestrator.plan.campaign import git_commit, project_version

        typer.echo(f"jaxtorch-bench {project_version()} (git {git_commit()})")
        raise typer.Exit()


def main(
    ctx: typer.Context,
    benchmark: Annotated[str | None, typer.Option("--benchmark", "-b", help="Benchmark to run (see `list`).", autocompletion=completes(catalog.BENCHMARKS), rich_help_panel=MATRIX)] = None,
    use_case: Annotated[list[str] | None, typer.Option("--use-case", "-u", help="1 train, 2 multi-device train, 3 per-sample grads, 4 multi-device per-sample grads, 5 inference; several, e.g. 3,5, plan one campaign.", autocompletion=completes([str(n) for n in catalog.USE_CASES]), rich_help_panel=MATRIX)] = None,
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
    delta: Annotated[float | None, typer.Option(help="The delta of the privacy budget epsilon (default: the largest power of ten below 1/N, N the training samples).", show_default=False, rich_help_panel=PRIVACY)] = None,
    target_epsilon: Annotated[float | None, typer.Option(help="Derive the noise multiplier that spends this epsilon over the cell's steps (instead of --noise-multiplier).", show_default=False, rich_help_panel=PRIVACY)] = None,
    loop_batch_size: Annotated[int, typer.Option(help="Batch at which vmap and the naive per-example loop are timed; 0 (the default): the training batch of one device.", rich_help_panel=PRIVACY)] = 0,
    dp_engine: Annotated[list[str] | None, typer.Option("--dp-engine", help="PyTorch's DP-SGD engines, e.g. torchfunc,opacus (use cases 3 and 4): torch.func's vmap or Opacus's GradSampleModule; JAX (always jax.vmap) is compared with each (default: torchfunc).", autocompletion=completes(DP_ENGINES), rich_help_panel=PRIVACY)] = None,
    data_dir: Annotated[Path | None, typer.Option(help="Folder with the benchmark's real data files.", rich_help_panel=DATA)] = None,
    synthetic: Annotated[bool, typer.Option("--synthetic", help="Use synthetic data instead of real data.", rich_help_panel=DATA)] = False,
    synthetic_samples: Annotated[int, typer.Option(help="Size of the synthetic data set.", rich_help_panel=DATA)] = 2048,
    device: Annotated[str, typer.Option(help="auto (GPU if the framework sees one), cpu or gpu.", autocompletion=completes(("auto", "cpu", "gpu")), rich_help_panel=SLURM)] = "auto",
    nodes: Annotated[int, typer.Option(help="Nodes per cell (use cases 2 and 4); one process per device, started by srun.", rich_help_panel=SLURM)] = 1,
    tasks_per_node: Annotated[int, typer.Option(help="Processes (devices) per node (use cases 2 and 4).", rich_help_panel=SLURM)] = 1,
    parallelism: Annotated[list[str] | None, typer.Option("--parallelism", help="Use case 2's state: ddp (replicated on every device: DDP, JAX replicated) and/or fsdp (sharded, FSDP in both: FSDP2's fully_shard, JAX's shard_map step), e.g. ddp,fsdp (default: ddp).", autocompletion=completes(PARALLELISMS), rich_help_panel=SLURM)] = None,
    executor: Annotated[str, typer.Option(help="slurm (sbatch), submitit, or local (run the scripts here).", autocompletion=completes(catalog.EXECUTORS), rich_help_panel=SLURM)] = "slurm",
    profile: Annotated[Path | None, typer.Option(help="Cluster profile (TOML); default: built-in.", rich_help_panel=SLURM)] = None,
    partition: Annotated[str | None, typer.Option(
        help="Slurm partition (default: the profile's partition, else the cluster's default).",
        show_default=False, rich_help_panel=SLURM)] = None,
    account: Annotated[str | None, typer.Option(
        help="Slurm account to charge (default: the profile's).",
        show_default=False, rich_help_panel=SLURM)] = None,
    qos: Annotated[str | None, typer.Option(
        help="Slurm QOS (default: the profile's, else the account's default).",
        show_default=False, rich_help_panel=SLURM)] = None,
    gpus_per_task: Annotated[int | None, typer.Option(
        help="GPUs per task, rendered as --gres=gpu:N (default: the profile's); GPUs need a profile with a "
             "CUDA jax_recipe.",
        show_default=False, rich_help_panel=SLURM)] = None,
    time: Annotated[str | None, typer.Option(
        help="Time limit per array task, e.g. 02:00:00 or 1-00:00:00 (default: the profile's time_limit).",
        show_default=False, rich_help_panel=SLURM)] = None,
    mem: Annotated[str | None, typer.Option(
        help="Memory per node, e.g. 64G (default: the profile's, else the partition's).",
        show_default=False, rich_help_panel=SLURM)] = None,
    array_parallelism: Annotated[int | None, typer.Option(
        help="Run at most N tasks of each array at once (Slurm's --array=0-K%N; default: the profile's "
             "array_parallelism, else no limit).",
        show_default=False, rich_help_panel=SLURM)] = None,
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
    trials: Annotated[str, typer.Option("--trials", help="Run each cell as this many independent trials, each in a fresh process; `auto`: paired trials until the speed-up's 95% interval is within --target-interval (Stein's two-stage rule: 5 trials, then as many as they say), at most --max-trials.", rich_help_panel=MEASUREMENT)] = "1",
    target_interval: Annotated[str | None, typer.Option("--target-interval", help="With --trials auto: the interval's half-width to reach, relative to the speed-up, e.g. 5% or 0.05 (default 5%).", rich_help_panel=MEASUREMENT)] = None,
    max_trials: Annotated[int | None, typer.Option("--max-trials", help="With --trials auto: the most trials a pair runs (default 20); fewer where the job's --time would not hold them at the first 5 trials' pace.", rich_help_panel=MEASUREMENT)] = None,
    paired: Annotated[bool, typer.Option("--paired", help="One job per JAX/PyTorch cell pair: both run alternately on one node, trials interleaved A B A B.", rich_help_panel=MEASUREMENT)] = False,
    find_max_batch: Annotated[bool, typer.Option("--find-max-batch", help="Instead of measuring, find the largest batch that fits in memory: doubling, then binary search, each try a fresh process on synthetic data; --batch-sizes gives the start (default 1).", rich_help_panel=MEASUREMENT)] = False,
    max_batch_limit: Annotated[int, typer.Option(help="Largest batch size --find-max-batch tries.", rich_help_panel=MEASUREMENT)] = 65536,
    memory_limit: Annotated[str | None, typer.Option(help="Artificial memory cap of each --find-max-batch try, e.g. 6G or 512M: on a GPU its device memory (the framework's allocator limit), on a CPU its address space (like ulimit -v).", rich_help_panel=MEASUREMENT)] = None,
    trace_steps: Annotated[int, typer.Option(help="After measuring, run this many more steps under the framework's profiler and keep the trace (Perfetto/TensorBoard) beside the results; 0 for none.", rich_help_panel=MEASUREMENT)] = 0,
    version: Annotated[bool, typer.Option("--version", help="Print the version and the git commit, then exit.", callback=show_version, is_eager=True)] = False,
) -> None:
    """Plan a campaign from the benchmark matrix, render one sbatch array script per framework, and submit it."""
    options = {name: value for name, value in locals().items() if name not in ("ctx", "version")}  # every option
    if ctx.invoked_subcommand is not None:
        return
    if benchmark is None or not use_case:
        # One sentence, not the page of help: the help is one -h away.
        typer.echo("error: give --benchmark and --use-case (see `python main.py -h`), or a command such as "
                   "`collect`", err=True)
        raise typer.Exit(code=2)
    from orchestrator.plan.rules import one_process_warning
    from orchestrator.plan.settings import parse_use_cases
    from orchestrator.run.launch import LaunchOptions, launch

    with domain_errors():
        catalog.check_executor(executor)
        for number in parse_use_cases(use_case):  # each use case warns as it would alone
            note = one_process_warning(number, nodes, tasks_per_node)
            if note:
                warn(note)
        code = launch(LaunchOptions(**options).request(command_line()))
    raise typer.Exit(code=code)
