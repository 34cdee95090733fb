"""Run in the JAX environment: one DP-SGD step of the backend (JaxOps with steps.dp_sgd_step, as training_ops
builds it) on one device and on a mesh of two CPU devices in this one process, from the same weights and batch,
and the clipped per-example gradients summed one example at a time; prints the largest relative differences as
JSON on its last line.

    python tests/backends/sharded_dp_sgd_probe.py MODEL BATCH

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
from per_sample_reference import jax_per_sample_grads_loop

from bench_contract.models.weights import make_initial_weights
from bench_contract.run.topology import Topology
from jax_backend import models, steps
from jax_backend.parallel import Placement
from jax_backend.run import JaxOps

SAMPLE_SHAPE, CLASSES, CLIP_NORM, LEARNING_RATE = (3, 32, 32), 10, 1.0, 1.0


def one_step(model, module, variables, placement, x, y, batch):
    step_fn = steps.dp_sgd_step(module, optax.sgd(LEARNING_RATE), CLIP_NORM, 0.0, seed=0,
                                expected_batch_size=batch, mesh=placement.mesh)
    ops = JaxOps(model, module, variables, optax.sgd(LEARNING_RATE), step_fn, (x, y), placement)
    ops.train_step(ops.to_device(x, y))
    return jax.tree.map(np.asarray, ops.placement.local_copy(ops.params))


def relative(a, b) -> float:
    return max(float(np.abs(p - q).max() / (np.abs(p).max() + 1e-30)) for p, q in zip(jax.tree.leaves(a),
                                                                                        jax.tree.leaves(b)))


def main(model: str, batch: int) -> None:
    jax.config.update("jax_default_matmul_precision", "highest")  # as the backend's fp32 policy
    weights = make_initial_weights(models.param_specs(model, SAMPLE_SHAPE, CLASSES, "tiny"), seed=0)
    module, variables = models.build_with_variables(model, weights, SAMPLE_SHAPE, CLASSES, "tiny")
    rng = np.random.default_rng(0)
    x = rng.standard_normal((batch, *SAMPLE_SHAPE)).astype(np.float32)  # the contract's layout; JaxOps converts
    y = rng.integers(0, CLASSES, batch).astype(np.int32)
    assert len(jax.devices()) == 2
    one = one_step(model, module, variables, Placement(Topology()), x, y, batch)
    two = one_step(model, module, variables, Placement(Topology(world_size=2)), x, y, batch)
    # The truth: each example's gradient alone, clipped, summed, over B; SGD's update from the initial weights.
    per_example = jax_per_sample_grads_loop(module, variables["params"], models.to_model_layout(model, x), y)
    clipped = [steps.clip_one(jax.tree.map(lambda g, i=i: g[i], per_example), CLIP_NORM) for i in range(batch)]
    total = jax.tree.map(lambda *g: sum(g), *clipped)
    truth = jax.tree.map(lambda p, g: np.asarray(p - LEARNING_RATE * g / batch), variables["params"], total)
    update = jax.tree.map(lambda p, t: p - t, variables["params"], truth)
    print(json.dumps({"one_device": relative(jax.tree.map(lambda p, q: p - q, variables["params"], one), update),
                      "two_devices": relative(jax.tree.map(lambda p, q: p - q, variables["params"], two), update)}))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
