"""The vision models in Flax (linen), layer for layer the torchvision networks, built from bench_contract.models.vision.

Inputs are channel-last (N, H, W, C), XLA's preferred layout; the backend transposes the contract's
channel-first batches before they reach the device. Every layer is named by its torchvision state_dict
prefix (for example "layer1.0.conv2" or "features.3.block.1.0"), so the conversion from the shared
PyTorch-layout weights is a rule on names and shapes (jax_backend.layout), not a table per model.
Padding is always explicit and symmetric, as in PyTorch: Flax's "SAME" pads differently at stride 2.

Every module takes `train` (default False, inference). With batch norm, train=True normalises with the
batch's statistics and updates the running ones (apply with mutable=["batch_stats"]), as PyTorch's train()
mode does. The networks have no dropout or stochastic depth: training turns them off on the PyTorch side
too (torch_backend.vision.disable_random_regularisers), so the two frameworks take the same steps.
"""

from __future__ import annotations

import functools
import math

import flax.linen as nn
import jax
import jax.numpy as jnp

from bench_contract.models import vision
from jax_backend import attention, autocast


def conv(x, features: int, kernel: int, stride: int = 1, *, name: str, groups: int = 1, bias: bool = False,
         padding: int | None = None):
    pad = (kernel - 1) // 2 if padding is None else padding
    return autocast.conv(features, (kernel, kernel), strides=(stride, stride), padding=((pad, pad), (pad, pad)),
                         feature_group_count=groups, use_bias=bias, name=name)(x)


class BatchNorm(nn.Module):
    """PyTorch's BatchNorm2d on channel-last inputs, with the variables of Flax's nn.BatchNorm (params scale
    and bias, batch_stats mean and var), so the weight layout rules stay the same.

    Not Flax's own module, because its training step differs from PyTorch's in two ways that would make the
    running statistics drift apart: it updates the running variance with the biased batch variance (PyTorch
    uses the unbiased one, times n/(n-1), n = examples x height x width), and it computes the variance as
    E[x^2] - E[x]^2 (PyTorch: the mean of squared deviations). Normalisation itself uses the biased variance
    in both. momentum is PyTorch's (weight of the new batch; Flax's momentum is 1 minus it).
    """

    epsilon: float = 1e-5
    momentum: float = 0.1

    @nn.compact
    def __call__(self, x, train: bool = False):
        c, dtype = x.shape[-1], x.dtype
        x = x.astype(jnp.float32)  # statistics and arithmetic in float32, returned in the input's dtype (autocast)
        scale = self.param("scale", nn.initializers.ones, (c,))
        bias = self.param("bias", nn.initializers.zeros, (c,))
        running_mean = self.variable("batch_stats", "mean", lambda: jnp.zeros((c,), jnp.float32))
        running_var = self.variable("batch_stats", "var", lambda: jnp.ones((c,), jnp.float32))
        if train:
            axes = tuple(range(x.ndim - 1))
            mean = x.mean(axes)
            var = jnp.square(x - mean).mean(axes)
            n = x.size // c  # under a sharded jit this is the global batch's count, as the means are global
            if not self.is_initializing():
                m = self.momentum
                running_mean.value = (1 - m) * running_mean.value + m * mean
                running_var.value = (1 - m) * running_var.value + m * var * (n / max(n - 1, 1))
        else:
            mean, var = running_mean.value, running_var.value
        # The order of Flax's _normalize: rsqrt(var + eps) * scale, then (x - mean) * that, plus bias.
        mul = jax.lax.rsqrt(var + self.epsilon) * scale
        return ((x - mean) * mul + bias).astype(dtype)


def batch_norm(x, name: str, eps: float = 1e-5, train: bool = False):
    return BatchNorm(epsilon=eps, name=name)(x, train)


def group_norm(x, name: str):
    """PyTorch's GroupNorm on channel-last inputs: min(32, C) groups of contiguous channels, each example alone.
    Flax's defaults differ from PyTorch's in two ways, both set here: epsilon 1e-6 (PyTorch: 1e-5), and the
    variance as E[x^2] - E[x]^2 (PyTorch: the mean of squared deviations)."""
    groups = vision.group_norm_groups(x.shape[-1])
    return nn.GroupNorm(num_groups=groups, epsilon=vision.GROUP_NORM_EPS, use_fast_variance=False,
                        dtype=autocast.layer_or_group_norm_dtype(x), name=name)(x)


def layer_norm(x, eps: float, name: str):
    """PyTorch's LayerNorm: the two-pass variance, in the dtype autocast gives it."""
    return nn.LayerNorm(epsilon=eps, use_fast_variance=False, dtype=autocast.layer_or_group_norm_dtype(x), name=name)(x)


def conv_norm_act(x, features: int, kernel: int, stride: int = 1, *, name: str, groups: int = 1, eps: float = 1e-5,
                  act=None, train: bool = False):
    """torchvision's Conv2dNormActivation: conv (no bias, padding (k-1)//2) as `name.0`, batch norm as `name.1`."""
    x = batch_norm(conv(x, features, kernel, stride, name=f"{name}.0", groups=groups), f"{name}.1", eps, train)
    return act(x) if act is not None else x


def squeeze_excitation(x, squeeze: int, *, name: str, act, scale_act):
    """torchvision.ops.SqueezeExcitation: 1x1 convs with bias, fc1 and fc2."""
    s = x.mean(axis=(1, 2), keepdims=True)
    s = act(conv(s, squeeze, 1, name=f"{name}.fc1", bias=True))
    s = scale_act(conv(s, x.shape[-1], 1, name=f"{name}.fc2", bias=True))
    return x * s


class ResNet(nn.Module):
    """torchvision's ResNet: bottleneck blocks with the stride on the 3x3 conv (V1.5), or basic blocks; with
    batch norm, or GroupNorm in its place (the DP-trainable variants)."""

    blocks: tuple[int, ...]
    bottleneck: bool
    num_classes: int
    cifar_stem: bool = False  # 3x3 stride-1 stem and no max-pool, for 32x32 inputs
    group_norm: bool = False

    @nn.compact
    def __call__(self, x, train: bool = False):
        def norm(y, name):
            return group_norm(y, name) if self.group_norm else batch_norm(y, name, train=train)

        if self.cifar_stem:
            x = conv(x, vision.RESNET_WIDTHS[0], 3, 1, name="conv1")
        else:
            x = conv(x, vision.RESNET_WIDTHS[0], 7, 2, name="conv1")
        x = nn.relu(norm(x, "bn1"))
        if not self.cifar_stem:
            x = nn.max_pool(x, (3, 3), strides=(2, 2), padding=((1, 1), (1, 1)))
        expansion = vision.RESNET_EXPANSION["bottleneck" if self.bottleneck else "basic"]
        inplanes = vision.RESNET_WIDTHS[0]
        for stage, (planes, count) in enumerate(zip(vision.RESNET_WIDTHS, self.blocks), start=1):
            for i in range(count):
                stride = 2 if stage > 1 and i == 0 else 1
                p = f"layer{stage}.{i}"
                if self.bottleneck:
                    out = nn.relu(norm(conv(x, planes, 1, name=f"{p}.conv1"), f"{p}.bn1"))
                    out = nn.relu(norm(conv(out, planes, 3, stride, name=f"{p}.conv2"), f"{p}.bn2"))
                    out = norm(conv(out, planes * expansion, 1, name=f"{p}.conv3"), f"{p}.bn3")
                else:
                    out = nn.relu(norm(conv(x, planes, 3, stride, name=f"{p}.conv1"), f"{p}.bn1"))
                    out = norm(conv(out, planes, 3, 1, name=f"{p}.conv2"), f"{p}.bn2")
                identity = x
                if i == 0 and (stride != 1 or inplanes != planes * expansion):
                    identity = norm(conv(x, planes * expansion, 1, stride, name=f"{p}.downsample.0"),
                                    f"{p}.downsample.1")
                x = nn.relu(autocast.residual(identity, out))
                inplanes = planes * expansion
        return autocast.dense(self.num_classes, name="fc")(x.mean(axis=(1, 2)))


def self_attention(x, heads: int, name: str, keep=None):
    """nn.MultiheadAttention's arithmetic, as torchvision's ViT calls it: one in_proj for q, k, v (in that
    order), then out_proj. `keep` (batch, keys), when given, masks padding: the other keys get the lowest
    float, so their softmax weight is zero."""
    n, s, d = x.shape
    qkv = autocast.dense(3 * d, name=f"{name}.in_proj")(x)
    q, k, v = (t.reshape(n, s, heads, d // heads) for t in jnp.split(qkv, 3, axis=-1))
    if keep is None and autocast.mixed():
        # The ViT's mixed-precision training: torchvision's attention then runs SDPA's fused kernel, which computes
        # the softmax in float32 (jax_backend.attention has its arithmetic). Its inference runs nn.MultiheadAttention's
        # fast path, whose softmax is in the inputs' dtype (bfloat16 gave its output exactly), as below; in float32
        # the two are the same arithmetic. The text transformer writes its masked attention out in both frameworks.
        return autocast.dense(d, name=f"{name}.out_proj")(attention.attention(q, k, v, causal=False).reshape(n, s, d))
    logits = jnp.einsum("nqhd,nkhd->nhqk", q, k) / math.sqrt(d // heads)
    if keep is not None:
        logits = jnp.where(keep[:, None, None, :], logits, jnp.finfo(logits.dtype).min)
    out = jnp.einsum("nhqk,nkhd->nqhd", jax.nn.softmax(logits, axis=-1), v).reshape(n, s, d)
    return autocast.dense(d, name=f"{name}.out_proj")(out)


class VisionTransformer(nn.Module):
    """torchvision's VisionTransformer: patch conv, class token first, learned positions, pre-norm encoder."""

    config: vision.ViTConfig
    num_classes: int

    @nn.compact
    def __call__(self, x, train: bool = False):
        c = self.config
        eps = vision.VIT_LAYER_NORM_EPS
        x = autocast.conv(c.hidden_dim, (c.patch_size, c.patch_size), strides=(c.patch_size, c.patch_size),
                          padding="VALID", name="conv_proj")(x)
        n, h, w, d = x.shape
        x = x.reshape(n, h * w, d)  # row-major over the patch grid, as torchvision's reshape and permute
        cls = self.param("class_token", nn.initializers.zeros, (1, 1, d))
        x = jnp.concatenate([jnp.broadcast_to(cls, (n, 1, d)), x], axis=1)
        x = x + self.param("encoder.pos_embedding", nn.initializers.normal(0.02), (1, h * w + 1, d))
        for i in range(c.num_layers):
            p = f"encoder.layers.encoder_layer_{i}"
            y = layer_norm(x, eps, f"{p}.ln_1")
            x = autocast.residual(x, self_attention(y, c.num_heads, f"{p}.self_attention"))
            y = layer_norm(x, eps, f"{p}.ln_2")
            y = nn.gelu(autocast.dense(c.mlp_dim, name=f"{p}.mlp.0")(y), approximate=False)  # PyTorch's GELU is exact
            x = autocast.residual(x, autocast.dense(d, name=f"{p}.mlp.3")(y))
        x = layer_norm(x, eps, "encoder.ln")
        return autocast.dense(self.num_classes, name="heads.head")(x[:, 0])


class MobileNetV3(nn.Module):
    """torchvision's MobileNetV3 (batch norm eps 1e-3), without its classifier dropout (the identity at inference,
    turned off in both frameworks for training)."""

    blocks: tuple[vision.MobileNetBlock, ...]
    last_channel: int
    num_classes: int

    @nn.compact
    def __call__(self, x, train: bool = False):
        eps = vision.MOBILENET_BN_EPS
        x = conv_norm_act(x, self.blocks[0].input_channels, 3, 2, name="features.0", eps=eps, act=nn.hard_swish,
                          train=train)
        for j, b in enumerate(self.blocks, start=1):
            act = nn.hard_swish if b.activation == "HS" else nn.relu
            p, k, y = f"features.{j}.block", 0, x
            if b.expanded_channels != b.input_channels:
                y = conv_norm_act(y, b.expanded_channels, 1, name=f"{p}.{k}", eps=eps, act=act, train=train)
                k += 1
            y = conv_norm_act(y, b.expanded_channels, b.kernel, b.stride, name=f"{p}.{k}",
                              groups=b.expanded_channels, eps=eps, act=act, train=train)
            k += 1
            if b.use_se:
                y = squeeze_excitation(y, b.squeeze_channels, name=f"{p}.{k}", act=nn.relu, scale_act=nn.hard_sigmoid)
                k += 1
            y = conv_norm_act(y, b.out_channels, 1, name=f"{p}.{k}", eps=eps, train=train)
            x = autocast.residual(x, y) if b.stride == 1 and b.input_channels == b.out_channels else y
        last = len(self.blocks) + 1
        x = conv_norm_act(x, 6 * self.blocks[-1].out_channels, 1, name=f"features.{last}", eps=eps,
                          act=nn.hard_swish, train=train)
        x = nn.hard_swish(autocast.dense(self.last_channel, name="classifier.0")(x.mean(axis=(1, 2))))
        return autocast.dense(self.num_classes, name="classifier.3")(x)


class EfficientNet(nn.Module):
    """torchvision's EfficientNet (B0: batch norm eps 1e-5), without stochastic depth and dropout (identities at
    inference, turned off in both frameworks for training)."""

    stages: tuple[vision.MBConvStage, ...]
    num_classes: int

    @nn.compact
    def __call__(self, x, train: bool = False):
        x = conv_norm_act(x, self.stages[0].input_channels, 3, 2, name="features.0", act=nn.silu, train=train)
        for j, s in enumerate(self.stages, start=1):
            for i in range(s.num_layers):
                inp, stride = (s.input_channels, s.stride) if i == 0 else (s.out_channels, 1)
                expanded = vision.make_divisible(inp * s.expand_ratio, 8)
                p, k, y = f"features.{j}.{i}.block", 0, x
                if expanded != inp:
                    y = conv_norm_act(y, expanded, 1, name=f"{p}.{k}", act=nn.silu, train=train)
                    k += 1
                y = conv_norm_act(y, expanded, s.kernel, stride, name=f"{p}.{k}", groups=expanded, act=nn.silu,
                                  train=train)
                y = squeeze_excitation(y, max(1, inp // 4), name=f"{p}.{k + 1}", act=nn.silu, scale_act=nn.sigmoid)
                y = conv_norm_act(y, s.out_channels, 1, name=f"{p}.{k + 2}", train=train)
                x = autocast.residual(x, y) if stride == 1 and inp == s.out_channels else y
        last = len(self.stages) + 1
        x = conv_norm_act(x, 4 * self.stages[-1].out_channels, 1, name=f"features.{last}", act=nn.silu, train=train)
        return autocast.dense(self.num_classes, name="classifier.1")(x.mean(axis=(1, 2)))


class SmallCNN(nn.Module):
    """The small CNN of torch_backend.vision.SmallCNN (MNIST, CIFAR-10); Dense infers fc1's width from the input."""

    variant: str
    num_classes: int

    @nn.compact
    def __call__(self, x, train: bool = False):
        c1, c2, hidden = vision.CNN[self.variant]
        x = nn.max_pool(nn.relu(conv(x, c1, 3, name="conv1", bias=True)), (2, 2), strides=(2, 2))
        x = nn.max_pool(nn.relu(conv(x, c2, 3, name="conv2", bias=True)), (2, 2), strides=(2, 2))
        # Flatten in PyTorch's (C, H, W) order, so fc1's shared weights line up with the same features.
        x = jnp.transpose(x, (0, 3, 1, 2)).reshape(x.shape[0], -1)
        return autocast.dense(self.num_classes, name="fc2")(nn.relu(autocast.dense(hidden, name="fc1")(x)))


def resnet50(num_classes: int, variant: str, group_norm: bool = False) -> nn.Module:
    return ResNet(vision.resnet_blocks("resnet50", variant), True, num_classes, group_norm=group_norm)


def resnet18_cifar(num_classes: int, variant: str, group_norm: bool = False) -> nn.Module:
    return ResNet(vision.resnet_blocks("resnet18", variant), False, num_classes, cifar_stem=True,
                  group_norm=group_norm)


def vit_b_16(num_classes: int, variant: str) -> nn.Module:
    return VisionTransformer(vision.VIT[variant], num_classes)


def mobilenet_v3_small(num_classes: int, variant: str) -> nn.Module:
    blocks, last_channel = vision.MOBILENET_V3_SMALL[variant]
    return MobileNetV3(blocks, last_channel, num_classes)


def efficientnet_b0(num_classes: int, variant: str) -> nn.Module:
    return EfficientNet(vision.EFFICIENTNET_B0[variant], num_classes)


def small_cnn(num_classes: int, variant: str) -> nn.Module:
    return SmallCNN(variant, num_classes)


BUILDERS = {
    "resnet50": resnet50,
    "resnet18": resnet18_cifar,
    "vit_b_16": vit_b_16,
    "mobilenet_v3_small": mobilenet_v3_small,
    "efficientnet_b0": efficientnet_b0,
    "cnn": small_cnn,
}
BUILDERS.update({name: functools.partial(BUILDERS[base], group_norm=True)
                 for name, base in vision.GROUP_NORM_VARIANTS.items()})
