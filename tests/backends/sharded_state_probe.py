"""Run in the JAX environment: the language model's plain train step (JaxOps with steps.plain_step, as training_ops
builds it) with its state replicated and sharded (`--parallelism fsdp`) over a mesh of two CPU devices in this one
process, from the same weights and batches; prints as JSON on its last line the losses of each, the largest
relative difference of their parameters after the steps, the state bytes one device holds, whether every large
array of the sharded state is split, what the sharded side's evaluation predicts against the replicated one's, and
the sharded step's collectives as XLA compiled them (kind, result shapes, dimension) beside the sharded parameters'
shapes and the axis each is split along.

    python tests/backends/sharded_state_probe.py STEPS

Two devices in one process (XLA_FLAGS, set before jax is imported) take the same compiled path as two processes
on two nodes: one mesh over every device, the batch sharded along it.
"""

from __future__ import annotations

import json
import os
import re
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
# One collective of the compiled (optimised) HLO: "%name = TYPE KIND(operands), ..., dimensions={d}, ...", TYPE an
# array type (f32[32,96]{0,1}) or a tuple of them where XLA combined several collectives into one. An asynchronous
# one (KIND-start, whose TYPE holds its operands too) keeps its own kind, which the test allows nowhere.
COLLECTIVE = re.compile(r"= (\(.*?\)|\S+) ((?:all-gather|all-reduce|reduce-scatter|all-to-all|collective-permute|"
                        r"collective-broadcast)(?:-start)?)\((.*)")
ARRAY_TYPE = re.compile(r"[a-z]+[0-9]*\[([0-9,]*)\]")
DIMENSION = re.compile(r"dimensions=\{([0-9]+)\}")


def collectives(hlo: str) -> list[dict]:
    """Each collective of a compiled program: its kind, the shapes of its results, and the dimension it gathers or
    scatters along (None for the others)."""
    found = []
    for match in COLLECTIVE.finditer(hlo):
        dimension = DIMENSION.search(match.group(3))
        found.append({"kind": match.group(2),
                      "shapes": [[int(d) for d in dims.split(",") if d] for dims in ARRAY_TYPE.findall(match.group(1))],
                      "dimension": int(dimension.group(1)) if dimension else None})
    return found


def sharded_parameters(placement: Placement, params) -> list[list]:
    """[shape, the axis it is split along] of each parameter the layout shards."""
    shapes = [leaf.shape for leaf in jax.tree.leaves(params)]
    specs = [list(placement.state_sharding(shape).spec) for shape in shapes]
    return [[list(shape), spec.index("data")] for shape, spec in zip(shapes, specs) if "data" in spec]


def train(sharded: bool, data, steps_to_run: int):
    specs = models.param_specs(MODEL, data.sample_shape, data.num_classes, VARIANT)
    module, variables = models.build_with_variables(MODEL, make_initial_weights(specs, seed=0), data.sample_shape,
                                                    data.num_classes, VARIANT)
    optimizer = optax.sgd(0.1, momentum=0.9)  # momentum: optimizer state the size of the parameters
    placement = Placement(Topology(world_size=2), sharded_state=sharded)
    x, y = data.x_train[:BATCH], data.y_train[:BATCH]
    ops = JaxOps(MODEL, module, variables, optimizer, steps.plain_step(module, optimizer, placement.value_and_grad),
                 (x, y), placement)
    losses = [ops.loss_value(ops.train_step(ops.to_device(data.x_train[i * BATCH:(i + 1) * BATCH],
                                                          data.y_train[i * BATCH:(i + 1) * BATCH])))
              for i in range(steps_to_run)]
    split = all(len({str(s.index) for s in leaf.addressable_shards}) == 2
                for leaf in jax.tree.leaves((ops.params, ops.opt_state)) if leaf.ndim and max(leaf.shape) >= 32)
    program = {"collectives": collectives(ops.step_fn.as_text()),
               "sharded_parameters": sharded_parameters(placement, ops.params)}
    params = jax.tree.map(np.asarray, ops.placement.local_copy(ops.placement.gathered(ops.params)))
    return losses, params, ops.state_bytes_per_device(), split, ops.predict(data.x_val[:4]), program


def main() -> None:
    data = load_dataset("nlp", "synthetic", synthetic_samples=200, variant=VARIANT, model=MODEL)
    count = int(sys.argv[1])
    replicated, sharded = train(False, data, count), train(True, data, count)
    difference = max(float(np.max(np.abs(a - b)) / np.max(np.abs(a)))
                     for a, b in zip(jax.tree.leaves(replicated[1]), jax.tree.leaves(sharded[1])))
    print(json.dumps({"replicated_losses": replicated[0], "sharded_losses": sharded[0],
                      "parameter_difference": difference, "replicated_bytes": replicated[2],
                      "sharded_bytes": sharded[2], "sharded_split": sharded[3], "replicated_split": replicated[3],
                      "same_predictions": bool(np.array_equal(replicated[4], sharded[4])), "sharded_step": sharded[5]}))


if __name__ == "__main__":
    main()
