"""JAX's FLOP count from the traced jaxpr (jax_backend.flops), against PyTorch's FlopCounterMode and against direct
counts. XLA's cost analysis, which JAX's count came from before, leaves out the cuBLAS and cuDNN calls on a GPU
(ResNet-50 inference on an H200 had MFU 0.0027 instead of about 0.42); both frameworks now count the matmuls and
convolutions of one step, 2 per multiply-add, so their counts of the same step are equal, not close."""

import json
import subprocess

import pytest
from helpers import REPO_ROOT, env_python

BATCH = 16
# (model, sample shape) of the tiny variants: the CNN (3x3 stride-1 convolutions, dense layers), ResNet-18's CIFAR
# form (stride-2 convolutions, whose input gradients JAX writes with lhs_dilation, and 1x1 downsampling) and
# MobileNetV3-Small (stride-2 depthwise convolutions: feature_group_count = channels, and their weight gradients
# batch_group_count = channels).
# ViT-B/16's tiny form: attention, which PyTorch's counter sees only as matmuls (torch_backend.efficiency.
# attention_as_matmuls: its inference fast path and the CPU's fused attention kernel have no FLOP formula).
MODELS = {"cnn": (3, 32, 32), "resnet18": (3, 32, 32), "mobilenet_v3_small": (3, 64, 64), "vit_b_16": (3, 64, 64)}

JAX_COUNTS = """
import json, sys
import jax, jax.numpy as jnp, numpy as np, optax
from jax import lax
from jax_backend import flops, models, steps

B, MODELS = json.loads(sys.argv[1])
count = lambda f, *args: flops.count(jax.make_jaxpr(f)(*args)).flops
shape = lambda *s, dtype=jnp.float32: jax.ShapeDtypeStruct(s, dtype)
out = {}
for model, sample in MODELS.items():
    net = models.module(model, 10, "tiny")
    nhwc = models.model_input_shape(model, tuple(sample))
    variables = jax.eval_shape(net.init, jax.random.PRNGKey(0), np.zeros((1, *nhwc), np.float32))
    params, stats = variables["params"], variables.get("batch_stats", {})
    sgd = optax.sgd(0.1)
    args = (params, stats, jax.eval_shape(sgd.init, params), shape(dtype=jnp.uint32), shape(B, *nhwc),
            shape(B, dtype=jnp.int32))
    out[model] = {"plain": count(steps.plain_step(net, sgd), *args),
                  "inference": count(net.apply, variables, shape(B, *nhwc))}
    if not stats:  # DP-SGD is refused for batch norm
        out[model]["dp_sgd"] = count(steps.dp_sgd_step(net, sgd, 1.0, 0.0, 0), *args)
        out[model]["parameters"] = sum(int(np.prod(p.shape)) for p in jax.tree.leaves(params))

# A grouped, strided convolution and its gradients, against one group's ungrouped convolution (G of them make it).
G, C, O, K = 4, 3, 5, 3
def conv(x, w, groups):
    return lax.conv_general_dilated(x, w, (2, 2), ((1, 1), (1, 1)), dimension_numbers=("NHWC", "HWIO", "NHWC"),
                                    feature_group_count=groups)
def grads(groups):
    return jax.grad(lambda w, x: jnp.sum(conv(x, w, groups) ** 2), argnums=(0, 1))
def per_example(groups):  # vmap of one example's weight gradient, as DP-SGD's
    return jax.vmap(lambda w, x: grads(groups)(w, x[None])[0], in_axes=(None, 0))
x, x1, w = shape(B, 16, 16, G * C), shape(1, 16, 16, G * C), shape(K, K, C, G * O)  # G groups
xg, xg1, wg = shape(B, 16, 16, C), shape(1, 16, 16, C), shape(K, K, C, O)  # one group's, ungrouped
out["grouped"] = {"grads": count(grads(G), w, x), "one_group_grads": count(grads(1), wg, xg),
                  "per_example": count(per_example(G), w, x), "one_example": count(grads(G), w, x1),
                  "ungrouped_per_example": count(per_example(1), wg, xg),
                  "ungrouped_one_example": count(grads(1), wg, xg1)}

# A scan runs its body `length` times.
matmul = lambda c, m: (jnp.tanh(c @ m), None)
out["scan"] = {"scan": count(lambda c, ms: lax.scan(matmul, c, ms)[0], shape(8, 32), shape(7, 32, 32)),
               "one": count(lambda c, m: matmul(c, m)[0], shape(8, 32), shape(32, 32))}

# Nested calls are counted once; cond counts its largest branch and while its body once, each saying so.
@jax.custom_jvp
def custom(c, m):
    return c @ m
custom.defjvp(lambda primals, tangents: (custom(*primals), tangents[0] @ primals[1]))
described = lambda f, *args: (lambda c: [c.flops, flops.method(c)])(flops.count(jax.make_jaxpr(f)(*args)))
c, m = shape(8, 32), shape(32, 32)
out["nested"] = {"calls": described(jax.checkpoint(jax.jit(custom)), c, m),
                 "cond": described(lambda c, m: lax.cond(c.sum() > 0, lambda: c @ m, lambda: c), c, m),
                 "while": described(lambda c, m: lax.while_loop(lambda c: c.sum() < 9, lambda c: c @ m, c), c, m)}
print(json.dumps(out))
"""

TORCH_COUNTS = """
import json, sys
import torch, torch.nn.functional as F
from torch_backend import models
from torch_backend.efficiency import counted_flops

B, MODELS = json.loads(sys.argv[1])
out = {}
for model, sample in MODELS.items():
    net = models.build(model, tuple(sample), 10, "tiny")
    sgd = torch.optim.SGD(net.parameters(), lr=0.1)
    x, y = torch.randn(B, *sample), torch.randint(0, 10, (B,))

    def plain():
        sgd.zero_grad()
        F.cross_entropy(net(x), y).backward()
        sgd.step()

    out[model] = {"plain": counted_flops(plain).per_step}
    net.eval()
    with torch.no_grad():
        out[model]["inference"] = counted_flops(lambda: net(x)).per_step
print(json.dumps(out))
"""


def flop_counts(framework: str, code: str) -> dict:
    proc = subprocess.run([str(env_python(framework)), "-c", code, json.dumps([BATCH, MODELS])], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=600,
                          env={"PYTHONPATH": str(REPO_ROOT), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.splitlines()[-1])


@pytest.fixture(scope="module")
def jax_counts():
    return flop_counts("jax", JAX_COUNTS)


@pytest.fixture(scope="module")
def torch_counts():
    return flop_counts("torch", TORCH_COUNTS)


@pytest.mark.parametrize("model", MODELS)
def test_a_conv_training_steps_count_is_pytorchs(jax_counts, torch_counts, model):
    """Both count the same convolutions and matmuls, forward, input and weight gradients, and both skip the first
    layer's input gradient (the data needs none): equal to the FLOP. XLA's cost analysis is not (it counts the
    element-wise work too, and on a GPU not the convolutions); counting a stride-2 convolution's input gradient
    by its output's positions is not either (4 times that convolution's forward)."""
    assert jax_counts[model]["plain"] == torch_counts[model]["plain"]


@pytest.mark.parametrize("model", MODELS)
def test_an_inference_passs_count_is_pytorchs(jax_counts, torch_counts, model):
    """The forward pass in eval mode, as the inference use case runs it. PyTorch's ViT counted 43.0 MFLOP against
    JAX's 63.2 before its attention was counted as matmuls (nn.MultiheadAttention's fast path has no formula)."""
    assert jax_counts[model]["inference"] == torch_counts[model]["inference"]


def test_a_dp_sgd_steps_count_is_the_plain_steps_and_the_clipped_sum(jax_counts):
    """The per-example gradients through vmap do the plain step's multiply-adds (the per-example weight gradients
    sum to the batch's); the clipped sum is one more matmul per parameter tensor, (B) x (B, *shape): 2 B x
    parameters. A convolution's per-example weight gradient is one convolution with a group per example: counted
    once per group, not B times over."""
    got = jax_counts["cnn"]  # the one of the three without batch norm, which DP-SGD refuses
    assert got["dp_sgd"] == got["plain"] + 2 * BATCH * got["parameters"]
    assert got["dp_sgd"] <= 1.05 * got["plain"]


def test_a_grouped_convolution_counts_each_group_once(jax_counts):
    """Against an equivalent loop of ungrouped convolutions: G groups are G convolutions of C inputs and O outputs
    each (forward: feature_group_count; input gradient: lhs_dilation too; weight gradient: batch_group_count), and
    B examples' weight gradients under vmap are B single-example ones (feature_group_count B, or batch_group_count
    B x G for a grouped convolution)."""
    got = jax_counts["grouped"]
    assert got["grads"] == 4 * got["one_group_grads"]
    assert got["per_example"] == BATCH * got["one_example"]
    assert got["ungrouped_per_example"] == BATCH * got["ungrouped_one_example"]


def test_a_scan_counts_its_body_length_times(jax_counts):
    assert jax_counts["scan"]["scan"] == 7 * jax_counts["scan"]["one"] == 7 * 2 * 8 * 32 * 32


def test_nested_calls_count_once_and_cond_and_while_say_how_they_were_counted(jax_counts):
    """remat(jit(custom_jvp)) runs its matmul once; a cond runs one branch (the largest is counted, an upper bound);
    a while loop's trip count is not in the jaxpr (its body is counted once). The method says which."""
    one = 2 * 8 * 32 * 32
    got = jax_counts["nested"]
    assert got["calls"][0] == got["cond"][0] == got["while"][0] == one
    assert "traced jaxpr" in got["calls"][1] and ";" not in got["calls"][1]  # no caveat
    assert "largest branch" in got["cond"][1] and "while loop's body is counted once" in got["while"][1]

