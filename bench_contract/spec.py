"""The job spec: everything a backend needs to run one cell, and where to write what it measured.

One spec is one JSON file. The orchestrator writes it at plan time; the array task whose index matches
reads it on the compute node. Fields are plain values so that the file is readable by a person.
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench_contract import SCHEMA_VERSION
from bench_contract.vision import VARIANTS

DEVICES = ("auto", "cpu", "gpu")
DATA_SOURCES = ("real", "synthetic")


class SpecError(ValueError):
    """A job spec that cannot be run as written."""


@dataclass(frozen=True)
class JobSpec:
    # identity of the cell
    campaign: str
    cell_id: str
    pair_key: str  # the same for the JAX and the PyTorch cell that are compared with each other
    framework: str
    benchmark: str
    use_case: int
    model: str
    batch_size: int
    precision: str
    # how to run it
    device: str = "auto"
    data_source: str = "real"
    data_dir: str | None = None
    epochs: int = 1
    optimizer: str = "sgd"
    learning_rate: float = 0.01
    seed: int = 0
    warmup_steps: int = 5
    synthetic_samples: int = 2048
    model_variant: str = "full"  # "full", or "tiny" for CPU tests (bench_contract.vision)
    timed_steps: int = 50  # timed repetitions of use cases that repeat one step (inference)
    # PyTorch options (inference): torch.compile instead of eager, channels_last memory format for CNNs
    torch_compile: bool = False
    channels_last: bool = False
    # where results go (absolute paths, written by the orchestrator)
    results_path: str = ""
    init_weights_path: str = ""
    # provenance known only on the submitting side
    git_commit: str = "unknown"
    schema_version: int = SCHEMA_VERSION
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.device not in DEVICES:
            raise SpecError(f"device {self.device!r} is not one of {', '.join(DEVICES)}")
        if self.data_source not in DATA_SOURCES:
            raise SpecError(f"data_source {self.data_source!r} is not one of {', '.join(DATA_SOURCES)}")
        if self.model_variant not in VARIANTS:
            raise SpecError(f"model_variant {self.model_variant!r} is not one of {', '.join(VARIANTS)}")
        for name in ("batch_size", "epochs", "synthetic_samples", "timed_steps"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise SpecError(f"{name} must be a positive integer, got {value!r}")
        if not isinstance(self.warmup_steps, int) or self.warmup_steps < 0:
            raise SpecError(f"warmup_steps must be a non-negative integer, got {self.warmup_steps!r}")
        if not self.learning_rate > 0:
            raise SpecError(f"learning_rate must be positive, got {self.learning_rate!r}")
        if self.schema_version != SCHEMA_VERSION:
            raise SpecError(
                f"spec schema version {self.schema_version} does not match this code's {SCHEMA_VERSION}; "
                "re-plan the campaign with the current code"
            )

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str) -> "JobSpec":
        data = json.loads(text)
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise SpecError(f"unknown fields in job spec: {', '.join(unknown)}")
        return cls(**data)

    @classmethod
    def read(cls, path: str | os.PathLike[str]) -> "JobSpec":
        try:
            return cls.from_json(Path(path).read_text())
        except FileNotFoundError:
            raise SpecError(f"job spec {path} does not exist") from None


def write_text_atomic(path: str | os.PathLike[str], text: str) -> None:
    """Write a whole file or nothing: a reader never sees half of it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, path)
