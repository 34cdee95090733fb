"""Where the JAX arrays live: a one-axis device mesh ("data"), over one device or over every device of
every process of a data-parallel run.

Parameters and optimizer state are replicated; a batch is sharded along the mesh, each process supplying
its own shard (the contract's `Topology.shard`). One code path serves one device and many: with a single
device the shardings are trivial and the compiled step is the plain one.
"""

from __future__ import annotations

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from bench_contract.run.topology import Topology


def initialize(topology: Topology) -> None:
    """Join the other processes before JAX touches a device; a no-op for one process.

    Collectives between CPU processes go through gloo (XLA has none of its own there). With no arguments,
    `jax.distributed.initialize` reads the coordinator, the process count and this process's id from Slurm.
    """
    if topology.world_size == 1:
        return
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize()
    if jax.process_count() != topology.world_size or jax.process_index() != topology.rank:
        raise RuntimeError(
            f"jax.distributed sees process {jax.process_index()} of {jax.process_count()}, "
            f"Slurm says rank {topology.rank} of {topology.world_size}"
        )


class Placement:
    def __init__(self, topology: Topology) -> None:
        devices = jax.devices() if topology.world_size > 1 else jax.devices()[:1]
        self.mesh = Mesh(np.array(devices), ("data",))
        self.replicated = NamedSharding(self.mesh, PartitionSpec())
        self.sharded = NamedSharding(self.mesh, PartitionSpec("data"))
        self.local_device = jax.local_devices()[0]
        self.device_count = len(devices)

    def replicate(self, tree):
        """A host or single-device pytree as global arrays, the same value on every device."""

        def put(value):
            host = np.asarray(value)
            return jax.make_array_from_callback(host.shape, self.replicated, lambda index: host[index])

        return jax.tree.map(put, tree)

    def batch(self, local: np.ndarray):
        """The global batch array, from this process's shard of it."""
        global_shape = (local.shape[0] * jax.process_count(), *local.shape[1:])
        return jax.make_array_from_process_local_data(self.sharded, local, global_shape)

    def local_copy(self, tree):
        """This process's own copy of a replicated pytree, for work that involves no other process."""
        return jax.tree.map(lambda a: a.addressable_data(0), tree)

    def jit_step(self, step_fn):
        """A train step (params, batch_stats, opt_state, step, x, y) -> (params, batch_stats, opt_state, step,
        loss), state replicated.

        Fixing the output shardings keeps the state replicated from step to step (the compiler could
        otherwise choose another layout, and the ahead-of-time compiled step would refuse its own output).
        Donating the state lets XLA update it in place, as PyTorch's optimizer does.
        """
        r, s = self.replicated, self.sharded
        return jax.jit(step_fn, in_shardings=(r, r, r, r, s, s), out_shardings=(r, r, r, r, r),
                       donate_argnums=(0, 1, 2, 3))
