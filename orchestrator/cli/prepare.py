"""The commands that prepare and check a campaign: list (the catalog), validate (one model in both frameworks),
envs (the framework environments), doctor (the setup), and data (fetch, check)."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Annotated

import typer

from orchestrator import DEFAULT_RESULTS_DIR
from orchestrator.cli.common import PanelledHelp, command_line, completes, domain_errors, warn
from orchestrator.cli.options import Account, GpusPerTask, Partition, Qos, Systems
from orchestrator.plan import catalog
from orchestrator.plan.settings import parse_list
from orchestrator.tables import format_table


def list_catalog() -> None:
    """Benchmarks, use cases, models, precisions, and which combinations run."""
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


def envs(
    framework: Annotated[list[str] | None, typer.Option("--framework", help="jax, torch (default: both).")] = None,
    profile: Annotated[Path | None, typer.Option(help="Cluster profile (TOML): where environments live, JAX CPU or CUDA recipe.")] = None,
) -> None:
    """Create each framework's own environment from its pinned requirements (reused while they are unchanged)."""
    from orchestrator.run.envs import ensure_envs

    with domain_errors():
        ensure_envs(parse_list(framework), profile, report=typer.echo)


def doctor(
    profile: Annotated[Path | None, typer.Option(help="Cluster profile (TOML) to check.")] = None,
    benchmark: Annotated[str, typer.Option(help="Benchmark whose data to check.")] = "digits",
    data_dir: Annotated[Path | None, typer.Option(help="Its data directory, where it needs one.")] = None,
    on_node: Annotated[bool, typer.Option("--on-node", help="Check the frameworks' devices in a short job (srun) on the profile's partition, with its GPUs.")] = False,
    partition: Partition = None,
    account: Account = None,
    qos: Qos = None,
    gpus_per_task: GpusPerTask = None,
    systems: Systems = None,
) -> None:
    """Check the setup: environments import their framework, devices, Slurm commands and accounting, data; with
    --on-node, where and as a job of each system would run (the same Slurm options as the launch)."""
    from orchestrator.run.doctor import check_setup

    options = {"--partition": partition, "--account": account, "--qos": qos, "--gpus-per-task": gpus_per_task}
    with domain_errors():
        code = check_setup(profile, benchmark, data_dir, report=typer.echo, on_node=on_node, options=options,
                           systems=parse_list(systems))
    raise typer.Exit(code=code)


data_app = typer.Typer(cls=PanelledHelp, no_args_is_help=True,
                       help="Data sets: fetch the canonical files on the login node, check a data directory.")


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
