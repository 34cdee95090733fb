"""The use cases, each an object that says what it runs; the plan, both backends and the result tables ask it.

Code that behaves differently by use case asks the object (`case.trains`, `case.per_sample`, `case.data_parallel`)
and never compares its number: the number is the name a user types and the rows record. A use case's settings are
those of the configuration that it reads (`UseCase.reads`, from each setting's declaration in bench_contract.config,
whose training settings name TRAINING_USE_CASES and DP-SGD settings PER_SAMPLE_USE_CASES, both derived here); the
plan refuses a setting given for a use case that does not read it.

To add a use case: declare it in USE_CASES with what it runs, its default batch sizes and the tables its rows appear
in. The plan's checks, the backends' dispatch and the tables follow from those attributes; a combination of them
that no backend implements yet needs its code there first.
"""

from __future__ import annotations

from dataclasses import dataclass

# The result tables a use case's rows appear in (orchestrator.results.views names its tables by these titles).
TRAINING_TABLE = "Training"
DATA_PARALLEL_TABLE = "Data parallel"
DP_SGD_TABLE = "Per-sample gradients (DP-SGD)"
INFERENCE_TABLE = "Inference"


@dataclass(frozen=True)
class UseCase:
    number: int
    title: str
    short: str  # in the --use-case option's help: "3 per-sample grads"
    trains: bool = True  # False: the forward pass in eval mode; no training split is read, nothing is trained
    per_sample: bool = False  # DP-SGD: per-example gradients, clipped, summed, noised
    data_parallel: bool = False  # several processes under srun, one per device, each on its shard of the global batch
    shards_state: bool = False  # --parallelism fsdp: parameters and optimizer state sharded over the processes
    default_batch_sizes: tuple[int, ...] | None = None  # None: the benchmark's
    tables: tuple[str, ...] = ()

    def reads(self, declaration) -> bool:
        """Whether the use case reads a setting, from the setting's declaration (bench_contract.config.Setting):
        one declared for some use cases is read by those alone, one declared for none by every use case."""
        return not declaration.use_cases or self.number in declaration.use_cases

    def counterpart(self, **differences: bool) -> UseCase | None:
        """The registered use case that runs what this one runs but for `differences`, or None."""
        wanted = {"trains": self.trains, "per_sample": self.per_sample, "data_parallel": self.data_parallel,
                  **differences}
        return next((case for case in USE_CASES.values()
                     if all(getattr(case, name) == value for name, value in wanted.items())), None)

    @property
    def one_process(self) -> UseCase | None:
        """For a data-parallel use case, the one that takes the same update on one device (its scaling's base, and
        what to plan for one device); None for the others."""
        return self.counterpart(data_parallel=False) if self.data_parallel else None

    @property
    def plain(self) -> UseCase | None:
        """For a DP-SGD use case, the one that takes a plain SGD step on the same processes (what DP-SGD's cost is
        measured against); None for the others."""
        return self.counterpart(per_sample=False) if self.per_sample else None


USE_CASES: dict[int, UseCase] = {case.number: case for case in (
    UseCase(1, "training on one GPU", "train", tables=(TRAINING_TABLE,)),
    UseCase(2, "data-parallel training on several GPUs and nodes", "multi-device train", data_parallel=True,
            shards_state=True, tables=(DATA_PARALLEL_TABLE,)),
    UseCase(3, "per-sample gradients (a DP-SGD step) on one GPU", "per-sample grads", per_sample=True,
            tables=(DP_SGD_TABLE,)),
    # Its rows are in both tables: the data-parallel one scales it against use case 3, the DP-SGD one times it.
    UseCase(4, "per-sample gradients (a DP-SGD step) on several GPUs and nodes", "multi-device per-sample grads",
            per_sample=True, data_parallel=True, tables=(DATA_PARALLEL_TABLE, DP_SGD_TABLE)),
    UseCase(5, "inference (forward pass, eval mode) on one GPU", "inference", trains=False,
            default_batch_sizes=(1, 8, 32, 128), tables=(INFERENCE_TABLE,)),
)}


def numbers(cases) -> tuple[int, ...]:
    """The numbers of `cases`, in the registry's order: what a sentence lists ("use cases 3 and 4")."""
    return tuple(case.number for case in cases)


# The numbers a sentence or a declaration names them by; each derived from the objects above.
TRAINING_USE_CASES = numbers(case for case in USE_CASES.values() if case.trains)
PER_SAMPLE_USE_CASES = numbers(case for case in USE_CASES.values() if case.per_sample)
DATA_PARALLEL_USE_CASES = numbers(case for case in USE_CASES.values() if case.data_parallel)
SHARDED_USE_CASES = numbers(case for case in USE_CASES.values() if case.shards_state)
# The one use case that trains nothing: what a parity check's forward pass and validate run as.
(INFERENCE_USE_CASE,) = numbers(case for case in USE_CASES.values() if not case.trains)
