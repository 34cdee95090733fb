"""Which process of a data-parallel run this is, read from what `srun` sets, checked against the spec.

Slurm starts one process per task and tells each its rank (SLURM_PROCID), the number of tasks
(SLURM_NTASKS) and its index on its node (SLURM_LOCALID). Both backends read them here, so they agree on
which shard of the global batch each rank takes and on which rank writes the results.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from bench_contract.spec import JobSpec


@dataclass(frozen=True)
class Topology:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def device_count(self) -> int:
        """The devices the cell computes on: one per process in every use case (a process picks one device,
        however many it sees), so the world size."""
        return self.world_size

    @property
    def is_writer(self) -> bool:
        """Rank 0 alone writes the result file: every rank holds the same parameters and global loss."""
        return self.rank == 0

    def shard(self, indices: np.ndarray) -> np.ndarray:
        """This rank's contiguous share of one global batch: ranks in order cover the batch exactly once."""
        if len(indices) % self.world_size:
            raise ValueError(f"a batch of {len(indices)} does not split evenly over {self.world_size} processes")
        per_rank = len(indices) // self.world_size
        return indices[self.rank * per_rank : (self.rank + 1) * per_rank]


def topology_for(spec: JobSpec, env: Mapping[str, str] | None = None) -> Topology:
    """The topology this process is part of; an error if Slurm started a different number of tasks."""
    env = os.environ if env is None else env
    if spec.world_size == 1:
        return Topology()
    if "SLURM_PROCID" not in env or "SLURM_NTASKS" not in env:
        raise RuntimeError(
            f"this cell runs as {spec.world_size} processes, but SLURM_PROCID/SLURM_NTASKS are not set: "
            "start it with srun inside its Slurm allocation (the rendered script does)"
        )
    world = int(env["SLURM_NTASKS"])
    if world != spec.world_size:
        raise RuntimeError(
            f"Slurm started {world} tasks, the spec asks for {spec.nodes} node(s) x {spec.tasks_per_node} "
            f"task(s) = {spec.world_size}"
        )
    return Topology(rank=int(env["SLURM_PROCID"]), world_size=world, local_rank=int(env.get("SLURM_LOCALID", "0")))
