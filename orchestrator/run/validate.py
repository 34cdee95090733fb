"""`main.py validate`: does the JAX model compute the same function as the PyTorch one?

One set of weights and one input batch; each backend runs the forward pass in its own environment (a
subprocess with the profile's environment python) and writes its logits to a file; this side, which never
imports jax or torch, compares them. The PyTorch side runs first and writes the weights file; the JAX side
then checks it against its own parameter list before loading it.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bench_contract.run.inference import num_classes, sample_shape, synthetic_inputs
from bench_contract.run.parity import Comparison, ParitySpec, compare
from orchestrator import PROJECT_ROOT
from orchestrator.errors import OrchestratorError, UsageError
from orchestrator.plan import campaign, catalog
from orchestrator.plan.manifest import now_utc
from orchestrator.plan.profile import ClusterProfile
from orchestrator.plan.render import _environment, environment_entry, sbatch_directives
from orchestrator.run import sbatch_call
from orchestrator.run.envs import check_runnable, interpreter_command
from orchestrator.run.executors.base import log_tail
from orchestrator.run.executors.slurm import submit_sbatch
from orchestrator.run.wait import wait_for_slurm

ORDER = ("torch", "jax")  # PyTorch first: its report is the reference


@dataclass(frozen=True)
class ValidateRequest:
    model: str
    batch_size: int
    precision: str
    variant: str
    seed: int
    device: str
    profile: ClusterProfile
    torch_compile: bool = False
    channels_last: bool = False


@dataclass(frozen=True)
class ValidateResult:
    parameter_counts: dict[str, int]
    comparison: Comparison
    logits_shape: tuple[int, ...]
    same_parameter_list: bool  # names, shapes and init rules, as each backend derived them

    @property
    def passed(self) -> bool:
        return self.comparison.passed and self.same_parameter_list and len(set(self.parameter_counts.values())) == 1


def check_request(req: ValidateRequest) -> None:
    if req.model not in catalog.MODELS:
        raise UsageError(f"unknown model {req.model!r}; choose from: {', '.join(catalog.built_models())}")
    if req.model not in catalog.built_models():
        raise UsageError(f"model {req.model!r} is declared but not built by the backends yet; "
                         f"validate one of: {', '.join(catalog.built_models())}")
    if req.model not in catalog.inference_models():
        raise UsageError(f"validate compares the inference forward pass, which model {req.model!r} does not run; "
                         "its two frameworks are compared on training steps by tests/backends/test_training_models.py")
    catalog.check_precision(req.precision)
    precision = catalog.PRECISIONS[req.precision]
    # validate runs the inference forward pass: a precision of training only (tf32) is refused here, not on the node.
    usable = [p.name for p in catalog.PRECISIONS.values() if p.implemented_for(catalog.USE_CASES[catalog.INFERENCE])]
    if req.precision not in usable:
        why = precision.elsewhere if precision.implemented else "it is declared but not implemented yet"
        raise UsageError(f"validate compares the inference forward pass, which precision {req.precision!r} does not "
                         f"run ({why}); choose from: {', '.join(usable)}")
    catalog.check_variant(req.variant)
    if req.batch_size < 1:
        raise UsageError(f"--batch-size must be a positive integer, got {req.batch_size}")
    if req.channels_last and not catalog.MODELS[req.model].convolutional:
        raise UsageError(f"--channels-last is for convolutional networks; {req.model} is not one")
    if req.device not in catalog.DEVICES:
        raise UsageError(f"unknown device {req.device!r}; choose from: {', '.join(catalog.DEVICES)}")
    for framework in ORDER:
        check_runnable(framework, req.profile)


def write_inputs(req: ValidateRequest, work: Path) -> tuple[ParitySpec, Path]:
    """The parity spec and the input batch in `work`; the backends write the weights, logits and reports there."""
    bench = catalog.home_benchmark(req.model)
    shape = sample_shape(bench.name, req.variant)
    spec = ParitySpec(model=req.model, variant=req.variant, benchmark=bench.name, sample_shape=shape,
                      num_classes=num_classes(bench.name), batch_size=req.batch_size, precision=req.precision,
                      seed=req.seed, device=req.device, weights_path=str(work / "weights.npz"),
                      input_path=str(work / "input.npy"), output_dir=str(work),
                      torch_compile=req.torch_compile, channels_last=req.channels_last,
                      xla_flags=req.profile.xla_flags.get(req.model, ""))
    np.save(spec.input_path, synthetic_inputs(req.batch_size, shape, req.seed))
    spec_path = work / "spec.json"
    spec_path.write_text(spec.to_json())
    return spec, spec_path


def validate(req: ValidateRequest, report: Callable[[str], None] = print) -> ValidateResult:
    check_request(req)
    with tempfile.TemporaryDirectory(prefix=f"validate-{req.model}-") as tmp:
        spec, spec_path = write_inputs(req, Path(tmp))
        for framework in ORDER:
            report(f"running the {catalog.FRAMEWORKS[framework]} forward pass in {req.profile.python_path(framework)}")
            run_backend(framework, spec_path, req.profile)
        return read_result(spec)


def read_result(spec: ParitySpec) -> ValidateResult:
    """Compare what the two backends wrote for one ParitySpec."""
    reports = {fw: json.loads(spec.report_path(fw).read_text()) for fw in ORDER}
    jax_logits, torch_logits = np.load(spec.logits_path("jax")), np.load(spec.logits_path("torch"))
    return ValidateResult(
        parameter_counts={fw: r["parameter_count"] for fw, r in reports.items()},
        comparison=compare(jax_logits, torch_logits, spec.precision),
        logits_shape=tuple(torch_logits.shape),
        same_parameter_list=reports["jax"]["param_specs"] == reports["torch"]["param_specs"],
    )


def run_backend(framework: str, spec_path: Path, profile: ClusterProfile) -> None:
    env = {**os.environ, "PYTHONPATH": str(PROJECT_ROOT)}
    proc = subprocess.run(interpreter_command(framework, profile, ["-m", f"{framework}_backend.parity", str(spec_path)]),
                          capture_output=True, text=True, env=env, cwd=PROJECT_ROOT, stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        tail = "\n".join(proc.stderr.strip().splitlines()[-8:])
        raise OrchestratorError(f"the {framework} forward pass failed (exit {proc.returncode}):\n{tail}")


def summary(req: ValidateRequest, result: ValidateResult) -> list[str]:
    c = result.comparison
    counts = result.parameter_counts
    lines = [
        f"model {req.model} ({req.variant}), batch {req.batch_size}, {req.precision}, seed {req.seed}, "
        f"PyTorch {'torch.compile' if req.torch_compile else 'eager'}{', channels_last' if req.channels_last else ''}, "
        f"logits {'x'.join(map(str, result.logits_shape))}",
        f"  parameters  PyTorch {counts['torch']:,}   JAX {counts['jax']:,}"
        + ("   (equal)" if counts["torch"] == counts["jax"] else "   (DIFFERENT)"),
        f"  parameter lists (names, shapes, init)  {'equal' if result.same_parameter_list else 'DIFFERENT'}",
        f"  max abs error       {c.max_abs_error:.3e}",
        f"  max relative error  {c.max_relative_error:.3e}  (max |JAX - PyTorch| / max |PyTorch logit|; "
        f"tolerance {c.tolerance:.0e})",
    ]
    lines.append("PASS" if result.passed else "FAIL")
    return lines


def validate_with(executor: str, req: ValidateRequest, results_dir: Path, command: str,
                  report: Callable[[str], None] = print) -> ValidateResult:
    """The validate command's executor: local (run here) or slurm (one job on the profile's partition). validate
    runs one job of its own, not a campaign's arrays, so it has its own two ways rather than the campaigns'
    executors (orchestrator.run.executors)."""
    ways = {"local": lambda: validate(req, report=report),
            "slurm": lambda: validate_on_slurm(req, results_dir, command, report=report)}
    if executor not in ways:
        raise UsageError(f"unknown executor {executor!r} for validate; choose from: {', '.join(ways)}")
    return ways[executor]()


# --- the same check as one job on the cluster ----------------------------------------------------------

def render_script(req: ValidateRequest, spec_path: Path, work: Path, command: str) -> str:
    name = f"validate_{req.model}"
    mounts = [PROJECT_ROOT, work.resolve(), spec_path.parent.resolve()]  # what a container must see (its spec, weights)
    return _environment().get_template("validate.sh.j2").render(
        script_name=f"{name}.sh", model=req.model, variant=req.variant, batch_size=req.batch_size,
        precision=req.precision, work_dir=work, command=command, git_commit=campaign.git_commit(),
        created_at=now_utc(),
        # One task: the two frameworks run one after the other on the same node and GPU, the ones to be benchmarked.
        directives=sbatch_directives(req.profile, name, 1, work),
        setup_lines=list(req.profile.setup_lines), profile_name=req.profile.name, project_root=PROJECT_ROOT,
        cpus_per_task=req.profile.cpus_per_task, spec_path=spec_path,
        environments=[(fw, environment_entry(fw, req.profile, mounts)) for fw in ORDER],
    )


def validate_on_slurm(req: ValidateRequest, results_dir: Path, command: str,
                      report: Callable[[str], None] = print) -> ValidateResult:
    """Submit the check as one Slurm job, wait for it, and compare what it wrote (the folder must be shared)."""
    check_request(req)
    sbatch_call.require_command("sbatch")
    stamp = now_utc().replace(":", "").replace("+0000", "")
    work = (results_dir / "validate" / f"{req.model}-{req.variant}-bs{req.batch_size}-{stamp}").resolve()
    work.mkdir(parents=True, exist_ok=False)
    spec, spec_path = write_inputs(req, work)
    script = work / f"validate_{req.model}.sh"
    script.write_text(render_script(req, spec_path, work, command))
    sub = submit_sbatch("parity", script, 1)
    report(f"submitted {script} as job {sub.job_id}; waiting for it")
    wait_for_slurm([sub], report=report)
    logs = sorted(work.glob("*.out"))
    missing = [fw for fw in ORDER if not spec.logits_path(fw).is_file()]
    if sub.failed or missing:
        tail = log_tail(logs[-1]) if logs else f"(no log in {work})"
        raise OrchestratorError(f"the parity job {sub.job_id} did not finish both forward passes "
                                f"(missing: {', '.join(missing) or 'none'}); its log ends with:\n{tail}")
    return read_result(spec)
