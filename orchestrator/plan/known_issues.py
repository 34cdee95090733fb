"""What is known not to run well, measured and not yet fixed: the plan of a matching cell says so before anything is
submitted, with where it was seen, so that nobody waits in a queue for a job that was seen to fail. Each entry names
its record in docs/records/; it goes when a run shows it fixed."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from orchestrator.plan import catalog
from orchestrator.plan.catalog import UseCase
from orchestrator.plan.matrix import Cell
from orchestrator.plan.profile import ClusterProfile


@dataclass(frozen=True)
class KnownIssue:
    framework: str
    benchmark: str
    model: str
    seen_in: Callable[[UseCase], bool]  # the use cases it was seen in, by what they run (bench_contract.use_cases)
    on_gpu: bool  # seen on a GPU (a plan that asks Slurm for one); False: on CPUs
    seen: str  # what happened, where and when, in words
    record: str  # the run's record, under docs/records/

    def matches(self, cell: Cell, profile: ClusterProfile) -> bool:
        asks_gpu = bool(profile.for_system(cell.system).gpus_per_task)
        return ((cell.framework, cell.benchmark, cell.model) == (self.framework, self.benchmark, self.model)
                and self.seen_in(catalog.USE_CASES[cell.use_case]) and asks_gpu == self.on_gpu)


KNOWN_ISSUES = (
    KnownIssue("jax", "cifar10", "cnn", lambda case: case.per_sample, on_gpu=True,
               seen="JAX's DP-SGD step of the CIFAR-10 CNN did not finish compiling in 4.5 minutes on an H200 (XLA's "
                    "\"very slow compile\" of a reduce fusion), so its tasks may spend their time limit compiling",
               record="docs/records/2026-11-26-h200-gpu-check.md"),
)


def warnings(cells: list[Cell], profile: ClusterProfile) -> list[str]:
    """One sentence per known issue that some planned cell meets."""
    return [f"{issue.seen} ({issue.record})" for issue in KNOWN_ISSUES
            if any(issue.matches(cell, profile) for cell in cells)]
