"""The numerical parity check: one set of weights, one input batch, the forward pass in each framework.

The orchestrator writes a ParitySpec and the input batch; `python -m <framework>_backend.parity SPEC.json`
runs in that framework's own environment and writes its logits (.npy) and a small report (JSON) beside
them; the orchestrator compares the two. Weights are made with every constant tensor drawn at random
(see weights.make_initial_weights), so that a swapped batch-norm mean and variance cannot pass.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from bench_contract.models import vision
from bench_contract.models.weights import ParamSpec, load_or_create
from bench_contract.run.inference import InferenceOps
from bench_contract.spec import INFERENCE_USE_CASE, write_text_atomic
from bench_contract.tuning import TunedExecution

# Largest accepted |JAX - PyTorch| over the largest |PyTorch logit|, per precision.
# bf16 keeps 8 bits of mantissa (a relative rounding of 2**-9 per value), and the two frameworks round after
# different operations (fused or not): agreement is to a few percent of the logit scale, not to 1e-4.
# fp16 keeps 11 bits of mantissa (2**-12 relative rounding per value), but both frameworks round after
# different fused operations too, over dozens of layers.
TOLERANCES = {"fp32": 1e-4, "bf16": 5e-2, "fp16": 1e-2}


@dataclass(frozen=True)
class ParitySpec(TunedExecution):
    model: str
    variant: str
    benchmark: str
    sample_shape: tuple[int, ...]
    num_classes: int
    batch_size: int
    precision: str
    seed: int
    device: str
    weights_path: str
    input_path: str
    output_dir: str
    torch_compile: bool = False  # PyTorch options, as in the job spec: check the code path that is benchmarked
    channels_last: bool = False
    xla_flags: str = ""  # the profile's XLA flags for this model, as in the job spec: the JAX side checks under them
    torch_compile_mode: str = "default"
    tuned: dict = field(default_factory=dict)  # a tuned configuration's knobs (bench_contract.tuning), as a job spec's

    @property
    def use_case(self) -> int:  # a parity check is a forward pass: the inference use case's precision policies
        return INFERENCE_USE_CASE

    @property
    def model_variant(self) -> str:  # the job spec's name for the same field, for backends reading either
        return self.variant

    @property
    def world_size(self) -> int:  # one forward pass in one process: backends set up no process group
        return 1

    def __post_init__(self) -> None:
        vision.check_variant(self.variant)
        object.__setattr__(self, "sample_shape", tuple(self.sample_shape))

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=2, sort_keys=True) + "\n"

    @classmethod
    def read(cls, path: str | Path) -> "ParitySpec":
        return cls(**json.loads(Path(path).read_text()))

    def logits_path(self, framework: str) -> Path:
        return Path(self.output_dir) / f"{framework}-logits.npy"

    def report_path(self, framework: str) -> Path:
        return Path(self.output_dir) / f"{framework}.json"


class ParityBackend(Protocol):
    framework: str

    def prepare(self, spec: Any): ...

    def param_specs(self, model: str, sample_shape: tuple[int, ...], num_classes: int, variant: str) -> list[ParamSpec]: ...

    def inference_ops(self, spec: Any, weights: dict[str, np.ndarray], sample_shape: tuple[int, ...],
                      num_classes: int) -> InferenceOps:
        """spec: a JobSpec or a ParitySpec (model, model_variant, torch_compile, channels_last)."""


def run_parity(spec: ParitySpec, backend: ParityBackend) -> dict:
    setup = backend.prepare(spec)
    specs = backend.param_specs(spec.model, spec.sample_shape, spec.num_classes, spec.variant)
    weights, sha = load_or_create(spec.weights_path, specs, spec.seed, randomize_constants=True)
    ops = backend.inference_ops(spec, weights, spec.sample_shape, spec.num_classes)
    x = np.load(spec.input_path)
    batch = ops.to_device(x)
    ops.compile(batch)
    out = ops.forward(batch)
    ops.synchronize(out)
    logits = np.asarray(ops.to_numpy(out), dtype=np.float32)
    np.save(spec.logits_path(backend.framework), logits)
    report = {"framework": backend.framework, "parameter_count": int(ops.parameter_count), "weights_sha256": sha,
              "device_kind": setup.kind, "framework_version": setup.framework_version,
              "precision_policy": setup.precision_policy,
              # The whole derived parameter list, so the two sides can be compared init rule by init rule.
              "param_specs": [dataclasses.asdict(s) for s in sorted(specs, key=lambda s: s.name)]}
    write_text_atomic(spec.report_path(backend.framework), json.dumps(report, indent=2) + "\n")
    return report


def main(backend: ParityBackend, argv: list[str] | None = None) -> int:
    """Run each spec in turn (several specs share one interpreter start-up, which dominates on small models)."""
    argv = sys.argv[1:] if argv is None else argv
    if not argv:
        print(f"usage: python -m {backend.framework}_backend.parity SPEC.json [SPEC.json ...]", file=sys.stderr)
        return 2
    for path in argv:
        try:
            spec = ParitySpec.read(path)
            report = run_parity(spec, backend)
        except Exception as exc:
            traceback.print_exc()
            print(f"error: {backend.framework} parity run of {path} failed: {exc}", file=sys.stderr)
            return 1
        print(f"{spec.model} ({spec.variant}): {report['parameter_count']} parameters, logits in "
              f"{spec.logits_path(backend.framework)}")
    return 0


@dataclass(frozen=True)
class Comparison:
    max_abs_error: float
    max_relative_error: float  # max |a - b| / max |b|: relative to the scale of the logits
    tolerance: float

    @property
    def passed(self) -> bool:
        return self.max_relative_error <= self.tolerance


def compare(candidate: np.ndarray, reference: np.ndarray, precision: str) -> Comparison:
    if candidate.shape != reference.shape:
        raise ValueError(f"logits of different shapes: {candidate.shape} and {reference.shape}")
    if not (np.isfinite(candidate).all() and np.isfinite(reference).all()):
        return Comparison(float("inf"), float("inf"), TOLERANCES[precision])
    diff = np.abs(candidate.astype(np.float64) - reference.astype(np.float64))
    scale = float(np.max(np.abs(reference))) or 1.0
    return Comparison(float(diff.max()), float(diff.max()) / scale, TOLERANCES[precision])
