"""What each task asks Slurm for where neither the profile nor the command line says: a time limit estimated from the
work of the campaign's cells, capped by the partition's limit, and the script header's lines that say where each
request came from (the CPUs and memory per GPU that discovery read from sinfo, the time limit's estimate), so that
the administrator who reads a script sees why it asks for what it does.

The estimate of one cell, in one process: STARTUP_S (imports, reading the data, compilation), plus its steps, each
the longer of STEP_FLOOR_S and the step's FLOPs at PEAK_FRACTION of the device's peak (bench_contract.measure.flops
for a GPU whose type is known; SLOWEST_GPU_PEAK where it is not; CPU_PEAK_PER_CPU a CPU), plus the timing that
follows training. A task's estimate is its cell's, times the processes it runs (a paired task runs every trial of
both frameworks); a script's limit is its longest task's, times MARGIN, plus the time before the limit that Slurm's
warning signal may come, rounded up to ROUND_S. Rows of earlier campaigns are not read: the orchestrator's plan does
not read results (its results wing sits above it), and an estimate from the work needs none.
"""

from __future__ import annotations

import copy
import math
import textwrap
from dataclasses import dataclass

from bench_contract.measure.flops import PEAK_FLOPS, gpu_peak
from bench_contract.models.language import GPT, training_flops_per_token
from orchestrator.plan import catalog
from orchestrator.plan.discovery import MEMORY_HEADROOM, NodeShape
from orchestrator.plan.matrix import Cell, train_split_size
from orchestrator.plan.profile import ClusterProfile, slurm_seconds

# A forward pass of one sample of each model at its benchmark's full-size input, in FLOPs (2 per multiply-add): the
# published counts for the torchvision architectures (ResNet-50 4.1 GMACs, ViT-B/16 17.6, MobileNetV3-Small 0.06,
# EfficientNet-B0 0.39 at 224x224; the ResNet-18 of 32x32 inputs 0.56), counted from the shapes for ours (the MLP
# on MNIST's 784 inputs, the small CNN on CIFAR-10, the text transformer's 128 tokens); the GCN's depends on the
# user's graph, and is a guess. The tiny variants are counted as the full ones: the estimate errs long.
FORWARD_FLOPS = {
    "mlp": 1.4e6, "cnn": 1.3e7,
    "resnet18": 1.2e9, "resnet18_gn": 1.2e9, "resnet50": 8.3e9, "resnet50_gn": 8.3e9,
    "vit_b_16": 3.5e10, "mobilenet_v3_small": 1.2e8, "efficientnet_b0": 8e8,
    "transformer": 8.7e8, "gcn": 1e6,
}
TRAINING_FACTOR = 3  # a training step: the forward pass, and a backward pass of twice its work
PER_SAMPLE_FACTOR = 2  # per-sample gradients (DP-SGD) do about twice a plain step's work, and clip each

STARTUP_S = 300  # per process: the framework's imports, reading the data, and compiling the step
STEP_FLOOR_S = 0.01  # no step is taken as shorter: launching a small step's kernels and Python's loop cost this
PEAK_FRACTION = 0.2  # what a step reaches of the device's peak, taken low: real cells often reach more
SLOWEST_GPU_PEAK = min(rates["fp32"] for _, rates in PEAK_FLOPS)  # a GPU whose type sinfo does not name (a T4's)
CPU_PEAK_PER_CPU = 5e10  # FLOP/s of one core: two 8-wide FMA units at about 3 GHz
DP_SGD_TIMING_S = 180  # use cases 3 and 4 time the vectorised per-sample gradients against a loop (60 s each, at most)
BATCH_SEARCH_TRY_S = 60  # --find-max-batch: each try is a process of its own that takes a few steps
TRACE_FACTOR = 5  # a step under the framework's profiler takes this many of its own
# The training split where it is not known without reading the data (an image folder, the user's text or graph):
# about ImageNet-100's.
ASSUMED_TRAIN_SAMPLES = 130_000
MARGIN = 1.5  # the estimate's error, and a slower node or file system than the estimate's
ROUND_S = 15 * 60  # a limit in quarter hours, as a person would write one (and a scheduler's backfill counts)
TINY_STEP_S = 1e-3  # a step shorter than this at the GPU's full peak leaves the GPU mostly idle
WRAP = 116  # the width of the header's comment lines


@dataclass(frozen=True)
class Estimate:
    """One cell's work in one process, and how it was counted."""

    cell: Cell
    seconds: float
    steps: int
    step_flops: float
    peak: float  # FLOP/s of the device (a GPU, or the task's CPUs together)
    peak_said: str  # what that peak is: "the A100's 19.5 TFLOP/s fp32 peak"
    samples_said: str  # "" or how the training split's size was taken


@dataclass(frozen=True)
class Sized:
    """The profile with a time limit for each system the cells run on, and each system's header lines."""

    profile: ClusterProfile
    notes: dict[str, list[str]]  # system -> the header's lines (comments without their "# ")
    warnings: list[str]


def size(profile: ClusterProfile, cells: list[Cell], node: NodeShape | None = None) -> Sized:
    """Fill each system's time limit that neither the profile nor the command line set, with what it came from."""
    notes, warnings = {}, []
    for system in dict.fromkeys(cell.system for cell in cells):
        mine = [cell for cell in cells if cell.system == system]
        on = profile.for_system(system)
        shape = node if node is not None and node.partition == on.partition else None
        lines = shares_said(on, shape)
        if on.time_limit is None:
            limit, said, capped = time_limit(on, mine, shape)
            profile = with_time_limit(profile, system, limit)
            lines.append(said)
            if capped:
                warnings.append(capped)
        else:
            lines.append(f"--time={on.time_limit}: the profile's time_limit, or --time.")
        notes[system] = lines
    return Sized(profile, notes, warnings)


def with_time_limit(profile: ClusterProfile, system: str, limit: str) -> ClusterProfile:
    """The profile with `limit` as the system's time limit. Set on a copy, not checked again: the limit is written
    here in Slurm's form, and the rest of the profile was checked when it was read."""
    if system:
        changed = copy.copy(profile.systems[system])
        object.__setattr__(changed, "time_limit", limit)
        sized = copy.copy(profile)
        object.__setattr__(sized, "systems", {**profile.systems, system: changed})
        return sized
    sized = copy.copy(profile)
    object.__setattr__(sized, "time_limit", limit)
    return sized


def shares_said(profile: ClusterProfile, node: NodeShape | None) -> list[str]:
    """The line on CPUs and memory where they are a GPU's share of a node as sinfo shows it (a plan without a
    profile: plan.discovery)."""
    if node is None or profile.name != "discovered" or not profile.gpus_per_task:
        return []
    memory = (f" and --mem-per-gpu={profile.mem_per_gpu}" if profile.mem_per_gpu == node.memory_per_gpu
              and profile.mem_per_gpu else "")
    return [f"--cpus-per-task={profile.cpus_per_task}{memory}: each GPU's share of a node of partition "
            f"{node.partition} ({node.said()}; the memory less {MEMORY_HEADROOM:.0%}, in whole GB)."]


def time_limit(profile: ClusterProfile, cells: list[Cell], node: NodeShape | None) -> tuple[str, str, str]:
    """(the limit, the header's line on how it was estimated, a warning where the partition's limit cut it, or "")."""
    settings = cells[0].settings
    runs = 2 * settings.trials if settings.paired else 1  # a paired task: every trial of both
    if settings.pack:  # a pack: its pairs, settings.pack_slots of them at a time
        runs *= -(-settings.pack // settings.pack_slots)
    longest = max((estimate(cell, profile, node) for cell in distinct(cells)), key=lambda e: e.seconds)
    warning_s = profile.earliest_warning_s()
    seconds = math.ceil((longest.seconds * runs * MARGIN + warning_s) / ROUND_S) * ROUND_S
    cell = longest.cell
    step_s = max(STEP_FLOOR_S, longest.step_flops / (PEAK_FRACTION * longest.peak))
    said = (f"estimated from the longest cell, {cell.model_label} batch {cell.batch_size} {cell.precision} "
            f"({longest.steps:,} steps{longest.samples_said}): {STARTUP_S // 60} min to start (imports, data, "
            f"compilation), then each step's {flops_words(longest.step_flops)} at {PEAK_FRACTION:.0%} of "
            f"{longest.peak_said}, at least {STEP_FLOOR_S * 1000:.0f} ms ({step_s:.3g} s a step)"
            + (f", for each of the task's {runs} runs" if runs > 1 else "")
            + f"; times {MARGIN}, plus the {warning_s} s before the limit that Slurm's warning may come, rounded "
              f"up to a quarter hour")
    capped = ""
    if node is not None and node.max_time_s is not None and seconds > node.max_time_s:
        capped = (f"the estimated time limit, {slurm_time(seconds)}, is longer than partition {node.partition}'s "
                  f"{node.max_time}: the jobs ask for {node.max_time}, and a task that needs longer is stopped at it "
                  "(give --time, or fewer epochs or trials)")
        said += f"; cut to partition {node.partition}'s limit ({node.max_time}), {slurm_time(seconds)} estimated"
        seconds = node.max_time_s
    elif node is not None and node.max_time_s is not None:
        said += f"; partition {node.partition}'s limit is {node.max_time}"
    limit = slurm_time(seconds)
    return limit, f"--time={limit}: {said}.", capped


# The plan's --pack where a paired campaign on Slurm gives none: where every cell's estimated work (its steps,
# without STARTUP_S) is shorter than its start-up, the job would mostly wait in the queue and start, so the pairs
# share jobs of about PACK_S of the estimate each, as many as the time limit holds (the profile's or --time, else
# the partition's, with MARGIN and the warning's time). Longer cells, packs of one pair, a campaign over several
# nodes per cell and --trials auto (whose length is open until the first trials have run) keep a job per pair.
PACK_S = 2 * 3600


def default_pack(profile: ClusterProfile, cells: list[Cell], node: NodeShape | None) -> tuple[int, str]:
    """(the --pack of a paired campaign that gave none, the sentence on how it was chosen, or "" for a job per
    pair)."""
    settings = cells[0].settings
    if not settings.paired or settings.world_size > 1 or settings.target_interval:
        return 0, ""
    estimates = [estimate(cell, profile, node) for cell in distinct(cells)]
    longest = max(estimates, key=lambda e: e.seconds)
    if longest.seconds - STARTUP_S >= STARTUP_S:
        return 0, ""
    pair_s = 2 * settings.trials * longest.seconds
    room, bound = PACK_S, f"about {PACK_S // 3600} hours of the estimate"
    limits = [slurm_seconds(on.time_limit) for on in map(profile.for_system, {c.system for c in cells})
              if on.time_limit]
    if not limits and node is not None and node.max_time_s is not None:
        limits = [node.max_time_s]
    if limits:
        fits = (min(limits) - profile.earliest_warning_s()) / MARGIN
        if fits < room:
            room, bound = fits, "as many as the time limit holds"
    pairs, most = len(cells) // 2, int(room // pair_s)
    if most < 2 or pairs < 2:
        return 0, ""
    # The fewest jobs that hold the pairs, evened out: 8 pairs at most 7 a pack are two packs of 4, not 7 and 1.
    pack = -(-pairs // -(-pairs // most))
    return pack, (f"--pack {pack}, chosen by the plan: each cell's estimated work is shorter than its start-up "
                  f"({STARTUP_S // 60} min estimated), so its pairs share jobs, {bound} ({pair_s / 60:.0f} min a "
                  "pair); --pack 0 gives a job per pair.")


def estimate(cell: Cell, profile: ClusterProfile, node: NodeShape | None) -> Estimate:
    """The cell's work in one process: its steps and their FLOPs on the device the profile asks for."""
    settings = cell.settings
    case = catalog.USE_CASES[cell.use_case]
    per_device = max(1, cell.batch_size // settings.world_size)
    factor = (TRAINING_FACTOR * (PER_SAMPLE_FACTOR if case.per_sample else 1)) if case.trains else 1
    step_flops = factor * forward_flops(cell) * per_device
    peak, peak_said = device_peak(profile, node, cell.precision)
    step_s = max(STEP_FLOOR_S, step_flops / (PEAK_FRACTION * peak))
    samples_said = ""
    if case.trains:
        samples = training_samples(cell.benchmark, settings)
        if samples is None:
            samples, samples_said = ASSUMED_TRAIN_SAMPLES, f", {ASSUMED_TRAIN_SAMPLES:,} training samples assumed"
        steps = settings.epochs * math.ceil(samples / cell.batch_size) + settings.timed_steps
    else:
        steps = settings.warmup_steps + settings.timed_steps
    seconds = STARTUP_S + steps * step_s + 2 * settings.min_duration_s + TRACE_FACTOR * settings.trace_steps * step_s
    if case.per_sample:
        seconds += DP_SGD_TIMING_S
    if settings.batch_search:
        tries = 2 * math.ceil(math.log2(max(2, settings.batch_search_limit)))
        seconds = tries * (STARTUP_S + BATCH_SEARCH_TRY_S)
    return Estimate(cell, seconds, steps, step_flops, peak, peak_said, samples_said)


SAMPLES: dict[tuple, int | None] = {}  # the training split of each data source, counted once per process


def training_samples(benchmark: str, settings) -> int | None:
    """matrix.train_split_size, once for each benchmark and data source however many cells share them."""
    key = (benchmark, settings.data_source, settings.synthetic_samples, settings.data_dir)
    if key not in SAMPLES:
        SAMPLES[key] = train_split_size(catalog.benchmark(benchmark), settings)
    return SAMPLES[key]


def distinct(cells: list[Cell]) -> list[Cell]:
    """One cell of each kind of work: the frameworks' cells of a pair, and a cell's trials, count the same."""
    return list({(c.system, c.benchmark, c.use_case, c.model, c.batch_size, c.precision, id(c.settings)): c
                 for c in cells}.values())


def forward_flops(cell: Cell) -> float:
    """FLOPs of one sample's forward pass (FORWARD_FLOPS; GPT's from its configuration, by the usual count)."""
    if cell.model == "gpt":
        config = GPT[cell.settings.model_variant]
        return training_flops_per_token(config) / TRAINING_FACTOR * config.context
    return FORWARD_FLOPS.get(cell.model, max(FORWARD_FLOPS.values()))


def device_peak(profile: ClusterProfile, node: NodeShape | None, precision: str) -> tuple[float, str]:
    """The peak FLOP/s of the device a task computes on at `precision`, and what it is in words. A GPU's type comes
    from the profile's gpu_type, else the partition's typed GRES; a precision the GPU has no rate for counts at its
    fp32 rate."""
    if not profile.gpus_per_task:
        cpus = profile.cpus_per_task
        return cpus * CPU_PEAK_PER_CPU, (f"the {flops_words(cpus * CPU_PEAK_PER_CPU)}/s peak taken for {cpus} "
                                         f"CPU{'s' if cpus != 1 else ''} ({flops_words(CPU_PEAK_PER_CPU)}/s each)")
    gpu_type = profile.gpu_type or (node.gpu_type if node else None)
    if gpu_type:
        for wanted in (precision, "fp32"):
            found = gpu_peak(gpu_type, wanted).flops
            if found:
                return found, f"the {gpu_type}'s {flops_words(found)}/s {wanted} peak"
    return SLOWEST_GPU_PEAK, (f"{flops_words(SLOWEST_GPU_PEAK)}/s, the lowest fp32 peak of the GPUs known here, for "
                              "a GPU whose type sinfo does not name")


def tiny_cells(cells: list[Cell], profile: ClusterProfile, node: NodeShape | None = None) -> list[str]:
    """One warning for the cells planned on a GPU whose step is under TINY_STEP_S at the GPU's full peak: such a
    task holds a whole GPU that stays mostly idle."""
    tiny: dict[str, list[int]] = {}
    systems = {system: profile.for_system(system) for system in dict.fromkeys(c.system for c in cells)}
    for cell in distinct(cells):
        on = systems[cell.system]
        if not on.gpus_per_task:
            continue
        shape = node if node is not None and node.partition == on.partition else None
        work = estimate(cell, on, shape)
        if work.step_flops / work.peak < TINY_STEP_S:
            tiny.setdefault(cell.model_label, []).append(cell.batch_size)
    if not tiny:
        return []
    which = "; ".join(f"{model} at batch {', '.join(map(str, sorted(set(batches))))}"
                      for model, batches in tiny.items())
    return [f"{which}: on a GPU each step takes under {TINY_STEP_S * 1000:.0f} ms of its peak, so each task holds a "
            "whole GPU that stays mostly idle; run such cells on CPUs (--gpus-per-task 0) or at larger batches "
            "(and pack short cells: --paired --pack N runs N pairs one after another in one allocation, each run on a "
            "GPU of its own, so the queue and the start-up are paid once for N)"]


def slots_refusal(slots: int, nodes: int, profile: ClusterProfile, node: NodeShape | None) -> str | None:
    """Why a pack's `slots` side-by-side slots over `nodes` nodes (--pack-slots, --pack-nodes; each slot a Slurm
    task with the task's CPUs and GPUs) cannot fit the nodes of the partition sinfo showed, or None (one slot per
    node, or no shape known: sbatch then says it). Said at plan time: sbatch would refuse the script only once the
    campaign is written."""
    per_node = slots // nodes
    if per_node < 2 or node is None or node.partition != profile.partition:
        return None
    cpus, gpus = profile.cpus_per_task, profile.gpus_per_task
    fit = min(node.cpus // cpus, node.gpus // gpus) if gpus else node.cpus // cpus
    if per_node <= fit:
        return None
    return (f"--pack-slots {slots} asks {'one node' if nodes == 1 else f'each of {nodes} nodes'} of partition "
            f"{node.partition} for {per_node} slots of {cpus} CPUs and {gpus} GPU{'' if gpus == 1 else 's'}, but its "
            f"nodes have {node.cpus} CPUs and {node.gpus} GPUs (sinfo): ask for at most {fit * nodes}, or spread "
            f"them over more nodes (--pack-nodes)")


def header_lines(notes: list[str]) -> list[str]:
    """The header's lines on what each task asks for: each note wrapped, its continuation indented."""
    return [line for note in notes for line in textwrap.wrap(note, WRAP, subsequent_indent="  ")]


def flops_words(flops: float) -> str:
    """1.2e12 -> "1.2 TFLOP"."""
    for unit, scale in (("PFLOP", 1e15), ("TFLOP", 1e12), ("GFLOP", 1e9), ("MFLOP", 1e6), ("kFLOP", 1e3)):
        if flops >= scale:
            return f"{flops / scale:.3g} {unit}"
    return f"{flops:.3g} FLOP"


def slurm_time(seconds: int) -> str:
    """Seconds as a Slurm time: H:MM:SS, or D-HH:MM:SS from a day."""
    days, rest = divmod(int(seconds), 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    clock = f"{hours:02d}:{minutes:02d}:{secs:02d}"
    return f"{days}-{clock}" if days else clock
