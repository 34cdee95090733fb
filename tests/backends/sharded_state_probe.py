"""Run in the JAX environment: the language model's plain train step (JaxOps with steps.plain_step, as training_ops
builds it) with its state replicated and sharded (`--parallelism fsdp`) over a mesh of two CPU devices in this one
process, from the same weights and batches; prints as JSON on its last line the losses of each, the largest
relative difference of their parameters after the steps, the state bytes one device holds, whether every large
array of the sharded state is split, and what the sharded side's evaluation predicts against the replicated one's.

    python tests/backends/sharded_state_probe.py STEPS

Two devices in one process (XLA_FLAGS, set before jax is imported) take the same compiled path as two processes
on two nodes: one mesh over every device, the batch sharded along it.
"""

from __future__ import annotations

import json
import os
import sys

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"

import jax
import numpy as np
import optax

from bench_contract.data.loading import load_dataset
from bench_contract.models.weights import make_initial_weights
from bench_contract.run.topology import Topology
from jax_backend import models, steps
from jax_backend.parallel import Placement
from jax_backend.run import JaxOps

MODEL, VARIANT, BATCH = "gpt", "tiny", 8


def train(sharded: bool, data, steps_to_run: int):
    specs = models.param_specs(MODEL, data.sample_shape, data.num_classes, VARIANT)
    module, variables = models.build_with_variables(MODEL, make_initial_weights(specs, seed=0), data.sample_shape,
                                                    data.num_classes, VARIANT)
    optimizer = optax.sgd(0.1, momentum=0.9)  # momentum: optimizer state the size of the parameters
    placement = Placement(Topology(world_size=2), sharded_state=sharded)
    x, y = data.x_train[:BATCH], data.y_train[:BATCH]
    ops = JaxOps(MODEL, module, variables, optimizer, steps.plain_step(module, optimizer), (x, y), placement)
    losses = [ops.loss_value(ops.train_step(ops.to_device(data.x_train[i * BATCH:(i + 1) * BATCH],
                                                          data.y_train[i * BATCH:(i + 1) * BATCH])))
              for i in range(steps_to_run)]
    split = all(len({str(s.index) for s in leaf.addressable_shards}) == 2
                for leaf in jax.tree.leaves((ops.params, ops.opt_state)) if leaf.ndim and max(leaf.shape) >= 32)
    params = jax.tree.map(np.asarray, ops.placement.local_copy(ops.placement.gathered(ops.params)))
    return losses, params, ops.state_bytes_per_device(), split, ops.predict(data.x_val[:4])


def main() -> None:
    data = load_dataset("nlp", "synthetic", synthetic_samples=200, variant=VARIANT, model=MODEL)
    count = int(sys.argv[1])
    replicated, sharded = train(False, data, count), train(True, data, count)
    difference = max(float(np.max(np.abs(a - b)) / np.max(np.abs(a)))
                     for a, b in zip(jax.tree.leaves(replicated[1]), jax.tree.leaves(sharded[1])))
    print(json.dumps({"replicated_losses": replicated[0], "sharded_losses": sharded[0],
                      "parameter_difference": difference, "replicated_bytes": replicated[2],
                      "sharded_bytes": sharded[2], "sharded_split": sharded[3], "replicated_split": replicated[3],
                      "same_predictions": bool(np.array_equal(replicated[4], sharded[4]))}))


if __name__ == "__main__":
    main()
