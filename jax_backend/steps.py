"""The train steps as pure functions: the plain update, and DP-SGD (per-example gradients with `vmap(grad)`,
each clipped to norm C, summed, noised, applied).

Both have the signature (params, batch_stats, opt_state, step, x, y) -> (params, batch_stats, opt_state,
step + 1, mean loss). batch_stats are batch norm's running statistics ({} for a model without batch norm):
the plain step normalises with the batch's statistics and returns the updated running ones; DP-SGD passes
them through untouched (it is refused for batch-norm models: their per-example gradients are undefined).
The step counter lives on the device so that the noise key changes every step without a host transfer.
Under Poisson sampling a DP-SGD batch is padded to one size (bench_contract.run.sampling): an example labelled
PAD_LABEL adds no loss and no gradient, and the noised sum is divided by the expected batch size B, not by the
padded or the drawn size, as PyTorch's DPSGDUpdate does.
`JaxOps` compiles them ahead of time. Under a device mesh the batch axis is sharded. In the plain step with
replicated state the mean over examples becomes a cross-device reduction that XLA inserts; with sharded state the
step differentiates as FSDP does (parallel.Placement.value_and_grad); DP-SGD sums each device's shard itself and
adds the sums across devices (sharded_clipped_sums). The noise, drawn from a replicated key, is the same on every rank.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax
from jax.sharding import PartitionSpec

from bench_contract.run.sampling import PAD_LABEL
from bench_contract.spec import CLIP_EPSILON


# Named scopes around the loss and the optimizer's update: the precision census tells their arithmetic from the
# network's by them (jax_backend.census).
LOSS_SCOPE, UPDATE_SCOPE = "loss", "optimizer update"


def apply_update(optimizer, grads, opt_state, params):
    """(the parameters after the optimizer's update, its new state), under UPDATE_SCOPE."""
    with jax.named_scope(UPDATE_SCOPE):
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state


def cross_entropy(logits, y, label_smoothing: float = 0.0):
    """Each label's cross-entropy (logits (..., K), integer labels (...)): against the one-hot target, or with
    label_smoothing eps against it smoothed towards the uniform distribution, (1 - eps) one-hot + eps / K
    (optax.smooth_labels), as PyTorch's CrossEntropyLoss(label_smoothing=eps) computes it."""
    if not label_smoothing:
        return optax.softmax_cross_entropy_with_integer_labels(logits, y)
    targets = optax.smooth_labels(jax.nn.one_hot(y, logits.shape[-1], dtype=logits.dtype), label_smoothing)
    return optax.softmax_cross_entropy(logits, targets)


def example_loss(module, label_smoothing: float = 0.0):
    """The loss of one example (no batch axis) as a function of the parameters."""

    def loss(params, x, y):
        logits = module.apply({"params": params}, x[None])
        with jax.named_scope(LOSS_SCOPE):
            return cross_entropy(logits, y[None], label_smoothing)[0]

    return loss


def per_sample_grads(module, params, x, y, label_smoothing: float = 0.0):
    """(losses, gradients) with a leading batch axis on every gradient leaf: vmap over a single-example grad."""
    return jax.vmap(jax.value_and_grad(example_loss(module, label_smoothing)), in_axes=(None, 0, 0))(params, x, y)


def clip_factors(grads, clip_norm: float):
    """Per-example min(1, C / (||g_i|| + eps)), the norm taken over all parameters together."""
    squares = sum(jnp.sum(g.reshape(g.shape[0], -1) ** 2, axis=1) for g in jax.tree.leaves(grads))
    return jnp.minimum(1.0, clip_norm / (jnp.sqrt(squares) + CLIP_EPSILON))


def clip_one(grad, clip_norm: float):
    """One example's gradient (no batch axis) scaled to norm at most C, as in the naive per-example loop."""
    norm = jnp.sqrt(sum(jnp.sum(g**2) for g in jax.tree.leaves(grad)))
    factor = jnp.minimum(1.0, clip_norm / (norm + CLIP_EPSILON))
    return jax.tree.map(lambda g: g * factor, grad)


def clipped_sum(grads, clip_norm: float):
    factors = clip_factors(grads, clip_norm)
    return jax.tree.map(lambda g: jnp.tensordot(factors, g, axes=1), grads)


def gaussian_noise(key, like, stddev: float):
    """One independent N(0, stddev^2) draw per parameter, each leaf from its own split of `key`."""
    leaves, treedef = jax.tree.flatten(like)
    keys = jax.random.split(key, len(leaves))
    return jax.tree.unflatten(
        treedef, [stddev * jax.random.normal(k, leaf.shape, leaf.dtype) for k, leaf in zip(keys, leaves)]
    )


def clipped_sums(module, params, x, y, clip_norm: float, label_smoothing: float = 0.0):
    """(sum of the real examples' losses, their count, sum of their clipped gradients) over the batch x, y.
    Examples labelled PAD_LABEL are padding."""
    real = y != PAD_LABEL
    losses, grads = per_sample_grads(module, params, x, jnp.where(real, y, 0), label_smoothing)
    # A padding example's gradient can be NaN (the transformer's all-padding sequence attends to nothing), and a
    # zero clip factor times NaN is NaN: its gradient is replaced by zeros with where, not scaled away.
    grads = jax.tree.map(lambda g: jnp.where(real.reshape(-1, *(1,) * (g.ndim - 1)), g, 0.0), grads)
    factors = jnp.where(real, clip_factors(grads, clip_norm), 0.0)
    summed = jax.tree.map(lambda g: jnp.tensordot(factors, g, axes=1), grads)
    return jnp.sum(jnp.where(real, losses, 0.0)), jnp.sum(real), summed


def sharded_clipped_sums(module, params, x, y, clip_norm: float, mesh, label_smoothing: float = 0.0):
    """clipped_sums over a batch sharded along the mesh's one axis: each device sums its own shard, then the sums
    are added across devices (psum), as DP-SGD's data-parallel step is written by hand. Left to XLA's SPMD
    partitioner, the vmapped per-example gradients of convolutions came out wrong when it split the batch itself
    (JAX 0.10.2 on CPU, two devices: the update off by up to 150% relative, on the CNN and the GroupNorm
    ResNet; the loss and dense-only models were right), so the split is explicit here."""
    axis = mesh.axis_names[0]

    def on_shard(params, x, y):
        # Varying, not replicated: the cotangent of a replicated value is summed across the devices (replication's
        # dual is reduction), which would add other devices' examples into each per-example gradient before
        # clipping. Each device differentiates its own copy; the clipped sums are then added explicitly.
        params = jax.lax.pcast(params, axis, to="varying")
        return jax.lax.psum(clipped_sums(module, params, x, y, clip_norm, label_smoothing), axis)

    batch, replicated = PartitionSpec(axis), PartitionSpec()
    return jax.shard_map(on_shard, mesh=mesh, in_specs=(replicated, batch, batch), out_specs=replicated)(params, x, y)


def private_gradient(module, params, x, y, key, clip_norm: float, noise_multiplier: float,
                     expected_batch_size: int | None = None, mesh=None, label_smoothing: float = 0.0):
    """(mean loss of the real examples, 0 for an empty draw; noised sum of their clipped gradients over
    expected_batch_size, or with None over the batch's size, which is B only for fixed-size batches). Examples
    labelled PAD_LABEL are padding. With a mesh of several devices, the batch is sharded over it."""
    if mesh is not None and mesh.size > 1:
        loss_sum, count, summed = sharded_clipped_sums(module, params, x, y, clip_norm, mesh, label_smoothing)
    else:
        loss_sum, count, summed = clipped_sums(module, params, x, y, clip_norm, label_smoothing)
    if noise_multiplier > 0:  # a Python-level choice: with sigma 0 no noise is drawn at all
        # Drawn from the replicated key after the sum: the same noise on every device and rank.
        noise = gaussian_noise(key, summed, noise_multiplier * clip_norm)
        summed = jax.tree.map(jnp.add, summed, noise)
    loss = loss_sum / jnp.maximum(count, 1)
    divisor = expected_batch_size or x.shape[0]
    return loss, jax.tree.map(lambda g: g / divisor, summed)


def dp_sgd_step(module, optimizer, clip_norm: float, noise_multiplier: float, seed: int,
                expected_batch_size: int | None = None, mesh=None, label_smoothing: float = 0.0):
    """The DP-SGD train step; expected_batch_size is the spec's B (the expected size q*N under Poisson sampling);
    mesh, the device mesh the batch is sharded over (parallel.Placement's); label_smoothing, that of each
    example's cross_entropy."""
    base_key = jax.random.key(seed)

    def step_fn(params, batch_stats, opt_state, step, x, y):
        key = jax.random.fold_in(base_key, step)  # fresh noise every step, reproducible from the seed
        loss, grads = private_gradient(module, params, x, y, key, clip_norm, noise_multiplier, expected_batch_size,
                                       mesh, label_smoothing)
        params, opt_state = apply_update(optimizer, grads, opt_state, params)
        return params, batch_stats, opt_state, step + 1, loss

    return step_fn


def train_forward(module, params, batch_stats, x):
    """(logits, updated batch_stats) in training mode; a model without batch norm has no state to update."""
    if not batch_stats:
        return module.apply({"params": params}, x), batch_stats
    logits, updated = module.apply({"params": params, "batch_stats": batch_stats}, x, train=True,
                                   mutable=["batch_stats"])
    return logits, updated["batch_stats"]


def eval_forward(module, params, batch_stats, x):
    """Logits in evaluation mode: batch norm normalises with its running statistics."""
    variables = {"params": params, "batch_stats": batch_stats} if batch_stats else {"params": params}
    return module.apply(variables, x)


def differentiate(loss_fn):
    """The plain value_and_grad of a loss_fn(params, batch_stats, x, y, ...) -> (loss, aux): the train steps' default,
    replaced under a device mesh by parallel.Placement.value_and_grad (FSDP's, for sharded state)."""
    return jax.value_and_grad(loss_fn, has_aux=True)


def plain_step(module, optimizer, value_and_grad=differentiate, label_smoothing: float = 0.0):
    """The non-private train step (the step counter only counts); value_and_grad differentiates its loss, the mean
    cross_entropy."""

    def loss_fn(params, batch_stats, x, y):
        logits, batch_stats = train_forward(module, params, batch_stats, x)
        with jax.named_scope(LOSS_SCOPE):
            return cross_entropy(logits, y, label_smoothing).mean(), batch_stats

    def step_fn(params, batch_stats, opt_state, step, x, y):
        (loss, batch_stats), grads = value_and_grad(loss_fn)(params, batch_stats, x, y)
        params, opt_state = apply_update(optimizer, grads, opt_state, params)
        return params, batch_stats, opt_state, step + 1, loss

    return step_fn

    return step_fn
