"""Initial weights made once from the seed, in one file that both frameworks load.

Parameters are named and shaped in PyTorch's convention (a linear layer's weight is (out, in)); the JAX
backend converts layouts when it loads them. Each tensor is drawn from its own generator seeded by
(seed, name), so the values do not depend on the order in which a backend lists its parameters, and a
second writer racing the first produces the same bytes.
"""

from __future__ import annotations

import hashlib
import os
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bench_contract.atomic import publish

# uniform_fan_in: PyTorch's default for nn.Linear (and the bias of any layer that has a weight with fan_in);
# normal_fan_out: kaiming normal, fan_out mode, what torchvision's CNNs use for convolutions;
# normal: a fixed standard deviation (ViT's position embedding); zeros and ones: biases and normalisation.
INITS = ("uniform_fan_in", "normal_fan_out", "normal", "zeros", "ones")


@dataclass(frozen=True)
class ParamSpec:
    name: str
    shape: tuple[int, ...]
    init: str  # one of INITS
    fan_in: int = 0
    fan_out: int = 0
    std: float = 0.0

    def __post_init__(self) -> None:
        if self.init not in INITS:
            raise ValueError(f"parameter {self.name}: init {self.init!r} is not one of {', '.join(INITS)}")
        if self.init == "uniform_fan_in" and self.fan_in < 1:
            raise ValueError(f"parameter {self.name}: uniform_fan_in needs a positive fan_in")
        if self.init == "normal_fan_out" and self.fan_out < 1:
            raise ValueError(f"parameter {self.name}: normal_fan_out needs a positive fan_out")
        if self.init == "normal" and not self.std > 0:
            raise ValueError(f"parameter {self.name}: normal needs a positive std")


def mlp_param_specs(input_dim: int, hidden: tuple[int, ...], num_classes: int) -> list[ParamSpec]:
    """Parameters of an MLP of `nn.Linear` layers named fc1, fc2, ...; PyTorch's default init bounds."""
    specs = []
    sizes = [input_dim, *hidden, num_classes]
    for i, (fan_in, fan_out) in enumerate(zip(sizes[:-1], sizes[1:]), start=1):
        # nn.Linear's default (kaiming_uniform with a=sqrt(5)) is U(-1/sqrt(fan_in), 1/sqrt(fan_in)), bias too.
        specs.append(ParamSpec(f"fc{i}.weight", (fan_out, fan_in), "uniform_fan_in", fan_in))
        specs.append(ParamSpec(f"fc{i}.bias", (fan_out,), "uniform_fan_in", fan_in))
    return specs


def make_initial_weights(specs: list[ParamSpec], seed: int, randomize_constants: bool = False) -> dict[str, np.ndarray]:
    """One array per spec. With randomize_constants, tensors that would start as all zeros or all ones
    (biases, normalisation scales, batch-norm statistics, ViT's class token) are drawn at random instead:
    a parity check on constant tensors could not tell a swapped mean and variance, or scale and bias, apart."""
    weights = {}
    for spec in specs:
        rng = np.random.default_rng([seed, zlib.crc32(spec.name.encode())])
        if spec.init == "uniform_fan_in":
            bound = 1.0 / np.sqrt(spec.fan_in)
            value = rng.uniform(-bound, bound, size=spec.shape)
        elif spec.init == "normal_fan_out":
            value = rng.normal(0.0, np.sqrt(2.0 / spec.fan_out), size=spec.shape)
        elif spec.init == "normal":
            value = rng.normal(0.0, spec.std, size=spec.shape)
        elif spec.init == "zeros":
            value = rng.uniform(-0.2, 0.2, size=spec.shape) if randomize_constants else np.zeros(spec.shape)
        else:  # ones: kept positive, since a variance must be
            value = rng.uniform(0.5, 1.5, size=spec.shape) if randomize_constants else np.ones(spec.shape)
        weights[spec.name] = np.asarray(value, dtype=np.float32)
    return weights


def file_sha256(path: str | os.PathLike[str]) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def load_or_create(path: str | os.PathLike[str], specs: list[ParamSpec], seed: int,
                   randomize_constants: bool = False) -> tuple[dict[str, np.ndarray], str]:
    """Return the initial weights in `path` (creating the file if this is the first task) and its sha256.

    The first task to get here writes the file; every later one reads it. The file found must hold exactly
    the parameters asked for: a mismatch means the two frameworks disagree about the architecture, and
    running on would compare different networks.
    """
    path = Path(path)
    if not path.exists():
        weights = make_initial_weights(specs, seed, randomize_constants)

        def save(tmp: Path) -> None:
            with open(tmp, "wb") as f:
                np.savez(f, **weights)

        # Not replace: if another task created the file meanwhile, its file wins and both read it.
        publish(path, save, replace=False)
    with np.load(path) as stored:
        weights = {name: stored[name] for name in stored.files}
    expected = {s.name: s.shape for s in specs}
    found = {name: tuple(w.shape) for name, w in weights.items()}
    if found != expected:
        raise ValueError(
            f"initial weights in {path} do not match this model: expected {expected}, found {found}. "
            "Delete the file only if the architecture change is intended."
        )
    return weights, file_sha256(path)
