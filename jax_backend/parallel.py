"""Where the JAX arrays live: a one-axis device mesh ("data"), over one device or over every device of
every process of a data-parallel run.

Parameters and optimizer state are replicated, or with `--parallelism fsdp` sharded (each array split along its
largest axis the devices divide); a batch is sharded along the mesh, each process supplying its own shard (the
contract's `Topology.shard`). One code path serves one device and many: with a single device the shardings are
trivial and the compiled step is the plain one.

The sharded layout trains as FSDP does (Placement.value_and_grad): each device all-gathers the whole parameters,
runs the forward and backward passes on its own part of the batch, and reduce-scatters the gradients, so that it
updates only its own shard. The collectives are written out in a shard_map: left to XLA's partitioner, the sharded
arrays made it partition the layers' computations themselves (an embedding lookup all-reduced, every gradient
all-reduced whole and then sliced, no reduce-scatter; JAX 0.10.2 on two CPU devices), tensor parallelism in part.
"""

from __future__ import annotations

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from bench_contract.run.topology import Topology
from jax_backend.steps import differentiate


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
    def __init__(self, topology: Topology, sharded_state: bool = False) -> None:
        devices = jax.devices() if topology.world_size > 1 else jax.devices()[:1]
        self.mesh = Mesh(np.array(devices), ("data",))
        self.replicated = NamedSharding(self.mesh, PartitionSpec())
        self.sharded = NamedSharding(self.mesh, PartitionSpec("data"))
        self.local_device = jax.local_devices()[0]
        self.device_count = len(devices)
        self.sharded_state = sharded_state and self.device_count > 1

    def state_sharding(self, shape: tuple[int, ...]) -> NamedSharding:
        """Where one array of the model's state lives: replicated, or sharded along its largest axis that the
        devices divide (the first such axis on a tie); an array no axis of which they divide stays replicated."""
        n = self.device_count
        axes = [axis for axis, size in enumerate(shape) if size % n == 0 and size >= n]
        if not self.sharded_state or not axes:
            return self.replicated
        axis = max(axes, key=lambda a: shape[a])
        return NamedSharding(self.mesh, PartitionSpec(*(["data" if a == axis else None for a in range(len(shape))])))

    def value_and_grad(self, loss_fn):
        """jax.value_and_grad(loss_fn, has_aux=True) for a loss_fn(params, batch_stats, x, y, *rest) -> (the batch's
        mean loss, aux) whose batch is sharded along the mesh, as this layout computes it.

        Replicated state: the plain one (steps.differentiate); XLA sums the devices' gradients (an all-reduce).
        Sharded state: FSDP's, in a shard_map (fsdp_value_and_grad)."""
        if not self.sharded_state:
            return differentiate(loss_fn)
        return fsdp_value_and_grad(loss_fn, self.mesh, lambda shape: self.state_sharding(shape).spec)

    def state(self, tree):
        """The model's state (parameters, optimizer state) as global arrays, laid out by state_sharding."""

        def put(value):
            host = np.asarray(value)
            return jax.make_array_from_callback(host.shape, self.state_sharding(host.shape), lambda index: host[index])

        return jax.tree.map(put, tree)

    def gathered(self, tree):
        """The state whole on every device: itself where replicated, else gathered (a collective: every process
        must call it)."""
        if not self.sharded_state:
            return tree
        return jax.jit(lambda t: t, out_shardings=self.replicated)(tree)

    @staticmethod
    def local_bytes(tree) -> int:
        """The bytes of the state one device holds: its shard of each array."""
        return sum(leaf.addressable_shards[0].data.nbytes for leaf in jax.tree.leaves(tree))

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

    def jit_step(self, step_fn, state, donate: bool = True):
        """A train step (params, batch_stats, opt_state, step, x, y) -> (params, batch_stats, opt_state, step,
        loss), the state (the first four, placed) keeping its layout.

        Fixing the output shardings keeps the state where it is from step to step (the compiler could
        otherwise choose another layout, and the ahead-of-time compiled step would refuse its own output).
        Donating the state lets XLA update it in place, as PyTorch's optimizer does (out of the box; the tuning's
        donate_state knob may turn it off).
        """
        layout = tuple(jax.tree.map(lambda leaf: leaf.sharding, part) for part in state)
        return jax.jit(step_fn, in_shardings=(*layout, self.sharded, self.sharded),
                       out_shardings=(*layout, self.replicated), donate_argnums=(0, 1, 2, 3) if donate else ())


def fsdp_value_and_grad(loss_fn, mesh: Mesh, spec_of):
    """Placement.value_and_grad for sharded state: the parameters laid out by spec_of(shape) -> PartitionSpec over
    the mesh's one axis, the batch (x, y) sharded along it, batch_stats and the rest replicated.

    On each device: all-gather every parameter whole (a replicated one is whole already), differentiate the mean
    over the devices (pmean) of its own part of the batch's loss, and the gradient of each shard comes out of the
    all-gather's transpose, a reduce-scatter: the devices' gradients summed, each device keeping its own shard. XLA
    gathers each parameter once a step and keeps it for the backward pass; the PyTorch side's FSDP2 is set to do
    the same (torch_backend.sharding). The loss and the aux are averaged over the devices alike (equal shards:
    the global batch's mean)."""
    axis = mesh.axis_names[0]

    def gather(shard, spec):
        if axis not in spec:
            return shard
        return jax.lax.all_gather(shard, axis, axis=tuple(spec).index(axis), tiled=True)

    def value_and_grad(params, batch_stats, x, y, *rest):
        if jax.tree.leaves(batch_stats):
            # Each device would normalise with its own part of the batch, not the global batch as the replicated
            # layout does: a different computation, so it is refused (no shardable model of
            # bench_contract.model_registry has batch norm).
            raise ValueError("sharded state (fsdp) is not implemented for a model with batch norm")
        specs = jax.tree.map(lambda leaf: spec_of(leaf.shape), params)

        def on_device(shards, batch_stats, x, y, *rest):
            def mean_loss(shards):
                value, aux = loss_fn(jax.tree.map(gather, shards, specs), batch_stats, x, y, *rest)
                return jax.lax.pmean(value, axis), jax.tree.map(lambda leaf: jax.lax.pmean(leaf, axis), aux)

            return jax.value_and_grad(mean_loss, has_aux=True)(shards)

        replicated, batch = PartitionSpec(), PartitionSpec(axis)
        in_specs = (specs, replicated, batch, batch, *(replicated,) * len(rest))
        return jax.shard_map(on_device, mesh=mesh, in_specs=in_specs,
                             out_specs=((replicated, replicated), specs))(params, batch_stats, x, y, *rest)

    return value_and_grad
