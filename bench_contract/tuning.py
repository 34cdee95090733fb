"""Equal-effort tuning (`--tune K`): each framework's search space of settings that cannot change the mathematics
of a cell, declared once here, and the K configurations each framework tries.

A knob is a way of executing the same computation: the cell's model, precision, batch, optimizer, data and seed
stay the cell's. Each knob says why it cannot change the result; the parity check under tuning shows that it
did not (orchestrator.run.tuning: a configuration whose losses, or in inference whose outputs, differ from out
of the box beyond the precision's own bound is reported and dropped).

What is left out on purpose: the intra-op threads. The comparison holds them equal to the CPUs a run is bound to
on both sides (orchestrator.results.compare.CPU_SETTINGS), so a run with fewer is another device, not another
configuration. The cell axes that choose PyTorch's execution (--torch-modes, --torch-compile, --torch-compile-mode,
--channels-last) are in PyTorch's space: a campaign either names them as axes or tunes them (--tune refuses them).

Only the standard library: the plan draws the configurations on the login node, and the backends read the chosen
one from their job spec (JobSpec.tuned).
"""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass
from typing import Any

# A cell's tuning level (the setting `tuning`): a row measured out of the box, with the configuration its
# framework's tuning chose, or one try of the search (whose rows only the choice reads).
OUT_OF_THE_BOX = "out_of_the_box"
TUNED = "tuned"
TRY = "try"
TUNING_LEVELS = (OUT_OF_THE_BOX, TUNED, TRY)
TUNING_WORDS = {OUT_OF_THE_BOX: "out of the box", TUNED: "tuned", TRY: "tuning try"}
# The use cases whose cells can be tuned: one process on one device, training or inference.
TUNED_USE_CASES = (1, 5)
MAX_TUNE = 64  # configurations per framework: each is a process of its own, so that a plan stays small


@dataclass(frozen=True)
class Knob:
    """One setting of a framework's search space: its values (the first is out of the box), the devices and use
    cases where it exists, and why it cannot change the result."""

    name: str
    framework: str
    values: tuple[Any, ...]
    why: str
    devices: tuple[str, ...] = ("cpu", "gpu")
    gpu_values: tuple[Any, ...] = ()  # further values that exist on a GPU only
    use_cases: tuple[int, ...] = TUNED_USE_CASES
    convolutional: bool = False  # exists for convolutional models only
    constant_rate: bool = False  # exists only with a constant learning rate (see optimizer_impl)
    xla_flag: str = ""  # a JAX knob that is an XLA flag: value v adds `flag=v` to XLA_FLAGS ("" adds nothing)

    @property
    def default(self) -> Any:
        return self.values[0]

    def values_on(self, device: str) -> tuple[Any, ...]:
        return self.values + (self.gpu_values if device == "gpu" else ())


KNOBS: tuple[Knob, ...] = (
    Knob("torch_mode", "torch", ("eager", "default", "max-autotune"), gpu_values=("reduce-overhead",),
         why="torch.compile traces the same operations and Inductor generates kernels for them; reduce-overhead "
             "replays them as CUDA graphs. Reassociated reductions move results within rounding, which the parity "
             "check bounds"),
    Knob("channels_last", "torch", (False, True), use_cases=(5,), convolutional=True,
         why="the same tensors in another memory order (NHWC); every convolution computes the same sums"),
    Knob("interop_threads", "torch", (0, 1), devices=("cpu",),
         why="threads that run independent operations side by side (0: PyTorch's default); each operation's "
             "arithmetic, and its intra-op threads, stay as they were"),
    Knob("optimizer_impl", "torch", ("default", "for-loop", "foreach", "fused"), use_cases=(1,),
         constant_rate=True,
         why="torch.optim's implementations of one update: a loop over the parameters, one multi-tensor kernel per "
             "operation, or one fused kernel; the same formula. A schedule's tensor rate under torch.compile fixes "
             "the single-tensor path (torch_backend.optim), so the knob exists with a constant rate only"),
    Knob("grad_mode", "torch", ("inference_mode", "no_grad"), use_cases=(5,),
         why="two ways of not recording the autograd graph; the forward pass computes the same operations"),
    Knob("cudnn_benchmark", "torch", (False, True), devices=("gpu",), convolutional=True,
         why="cuDNN times its convolution algorithms and keeps the fastest; each computes the same convolution "
             "within rounding, which the parity check bounds"),
    Knob("donate_state", "jax", (True, False), use_cases=(1,),
         why="whether XLA may write the new parameters and optimizer state over the old buffers (the backend "
             "donates them out of the box); where the values live, not what they are"),
    Knob("xla_cpu_multi_thread_eigen", "jax", ("", "false"), devices=("cpu",),
         xla_flag="--xla_cpu_multi_thread_eigen",
         why="whether the operations XLA's CPU backend hands to Eigen split over threads; the same arithmetic"),
    Knob("xla_cpu_concurrency_optimized_scheduler", "jax", ("", "true"), devices=("cpu",),
         xla_flag="--xla_cpu_enable_concurrency_optimized_scheduler",
         why="the order XLA's CPU backend schedules independent operations in; each computes the same values"),
    Knob("xla_cpu_fusion_emitters", "jax", ("", "false"), devices=("cpu",), xla_flag="--xla_cpu_use_fusion_emitters",
         why="how XLA's CPU backend generates the code of a fusion; the same element-wise operations"),
    Knob("xla_gpu_autotune_level", "jax", ("", "0"), devices=("gpu",), xla_flag="--xla_gpu_autotune_level",
         why="whether XLA times its GPU kernels' algorithms and tilings; each computes the same operation within "
             "rounding, which the parity check bounds"),
    Knob("xla_gpu_latency_hiding_scheduler", "jax", ("", "true"), devices=("gpu",),
         xla_flag="--xla_gpu_enable_latency_hiding_scheduler",
         why="the order XLA's GPU backend schedules independent operations in; each computes the same values"),
)
KNOB_BY_NAME = {knob.name: knob for knob in KNOBS}
assert len(KNOB_BY_NAME) == len(KNOBS), "a knob declared twice"


class TunedExecution:
    """How a run executes, as the backends ask it: the tuned configuration's knobs (`tuned`), else out of the box,
    where PyTorch's execution is the cell's own axes (torch_compile, torch_compile_mode, channels_last). Mixed into
    the job spec and the parity check's spec, which hold those fields."""

    tuned: dict[str, Any]
    torch_compile: bool
    torch_compile_mode: str
    channels_last: bool
    xla_flags: str

    def knob(self, name: str) -> Any:
        """The value of a knob of the search space for this run: the tuned configuration's, else out of the box."""
        return self.tuned.get(name, KNOB_BY_NAME[name].default)

    def compile_mode(self) -> str | None:
        """torch.compile's mode for this run, None for eager."""
        if "torch_mode" in self.tuned:
            return None if self.tuned["torch_mode"] == "eager" else self.tuned["torch_mode"]
        return self.torch_compile_mode if self.torch_compile else None

    def uses_channels_last(self) -> bool:
        return bool(self.tuned.get("channels_last", self.channels_last))

    def run_xla_flags(self) -> str:
        """The XLA flags this run adds to XLA_FLAGS: the profile's for the model, then the tuned configuration's."""
        return " ".join(filter(None, (self.xla_flags, xla_flags_of(self.tuned))))


class TuningError(ValueError):
    """A request the search space cannot serve: one sentence."""


def space(framework: str, device: str, use_case: int, convolutional: bool, constant_rate: bool) -> list[Knob]:
    """The knobs of `framework` that exist for a cell on `device` ("cpu" or "gpu") in `use_case`."""
    return [knob for knob in KNOBS
            if knob.framework == framework and device in knob.devices and use_case in knob.use_cases
            and (convolutional or not knob.convolutional) and (constant_rate or not knob.constant_rate)]


def configurations(knobs: list[Knob], device: str, k: int, seed: int) -> list[dict[str, Any]]:
    """The K configurations a framework tries: out of the box first ({}: every knob at its default), then K-1
    others drawn without repeats from the rest of the grid by a generator seeded with the cell's seed and the
    framework, so that the same plan draws the same configurations. Each is the knobs it changes, by name."""
    grid = list(itertools.product(*(knob.values_on(device) for knob in knobs)))
    if k > len(grid):
        raise TuningError(f"--tune {k} asks for more configurations than the {len(grid)} of this search space")
    rng = random.Random(f"{seed}:{'+'.join(knob.name for knob in knobs)}")
    drawn = rng.sample(grid[1:], k - 1)  # grid[0] is every knob's first value: out of the box
    return [{}] + [{knob.name: value for knob, value in zip(knobs, combo) if value != knob.default}
                   for combo in drawn]


def xla_flags_of(tuned: dict[str, Any]) -> str:
    """The XLA flags a JAX configuration adds, in the knobs' declared order."""
    return " ".join(f"{knob.xla_flag}={tuned[knob.name]}" for knob in KNOBS
                    if knob.xla_flag and tuned.get(knob.name, "") != "")


def described(tuned: dict[str, Any]) -> str:
    """A configuration in words: "torch_mode=default, interop_threads=1"; "out of the box" for none."""
    return ", ".join(f"{name}={value}" for name, value in tuned.items()) or TUNING_WORDS[OUT_OF_THE_BOX]


def unknown_knob(framework: str, tuned: dict[str, Any]) -> str | None:
    """Why a spec's configuration cannot be applied (a knob not declared, another framework's, a value it does not
    take), in one sentence; None when it can."""
    for name, value in tuned.items():
        knob = KNOB_BY_NAME.get(name)
        if knob is None or knob.framework != framework:
            mine = ", ".join(k.name for k in KNOBS if k.framework == framework)
            return f"tuned setting {name!r} is not one of {framework}'s knobs ({mine})"
        if value not in knob.values_on("gpu"):
            return f"tuned setting {name} takes {', '.join(map(str, knob.values_on('gpu')))}, got {value!r}"
    return None
