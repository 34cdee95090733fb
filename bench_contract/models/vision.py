"""Architecture tables of the vision models, read by both backends, so the two networks are built from one source.

PyTorch builds the full variants with torchvision's own builders and the tiny ones with torchvision's classes
fed from these tables; Flax builds both from these tables. The parameter lists the two derive are compared
by a test, so a table that drifted from torchvision would be caught there.

A variant is a size of the same architecture, chosen by the job spec's `model_variant`, not a model name:
"full" is the published network, "tiny" the same layer types and wiring with fewer blocks and smaller inputs,
for CPU tests. Every feature of the full network (strides, squeeze-excitation, residual connections,
depthwise convolutions, both activations) still occurs in the tiny one.
"""

from __future__ import annotations

from dataclasses import dataclass

from bench_contract.spec import VARIANTS

# Channel-first input shape of one sample, per benchmark and variant.
INPUT_SHAPES = {
    ("imagenet", "full"): (3, 224, 224),
    ("imagenet", "tiny"): (3, 64, 64),
    ("cifar10", "full"): (3, 32, 32),
    ("cifar10", "tiny"): (3, 32, 32),
    ("mnist", "full"): (1, 28, 28),
    ("mnist", "tiny"): (1, 28, 28),
}
NUM_CLASSES = {"imagenet": 1000, "cifar10": 10, "mnist": 10}


def check_variant(variant: str) -> None:
    if variant not in VARIANTS:
        raise ValueError(f"model variant {variant!r} is not one of {', '.join(VARIANTS)}")


def input_shape(benchmark: str, variant: str) -> tuple[int, ...]:
    check_variant(variant)
    if (benchmark, variant) not in INPUT_SHAPES:
        raise ValueError(f"no vision input shape for benchmark {benchmark!r}")
    return INPUT_SHAPES[(benchmark, variant)]


def make_divisible(value: float, divisor: int = 8) -> int:
    """torchvision's _make_divisible: round channels to a multiple of 8, never more than 10% down."""
    new = max(divisor, int(value + divisor / 2) // divisor * divisor)
    if new < 0.9 * value:
        new += divisor
    return new


# ResNets: blocks per stage. resnet50 is torchvision's V1.5 (stride on the 3x3 conv of the bottleneck);
# resnet18 is torchvision's, with a 3x3 stride-1 stem and no max-pool for 32x32 inputs.
RESNET_BLOCKS = {
    ("resnet50", "full"): (3, 4, 6, 3),
    ("resnet50", "tiny"): (1, 1, 1, 1),
    ("resnet18", "full"): (2, 2, 2, 2),
    ("resnet18", "tiny"): (1, 1, 1, 1),
}
RESNET_WIDTHS = (64, 128, 256, 512)  # torchvision's planes per stage (the stem's 64 is the first); bottlenecks x4
RESNET_EXPANSION = {"basic": 1, "bottleneck": 4}  # a block's output channels over its planes

# The GroupNorm variants of the batch-norm ResNets, and the network each is a variant of: every BatchNorm2d
# becomes a GroupNorm over min(32, C) groups of its C channels, as Opacus's ModuleValidator.fix does and the
# DP-SGD literature trains (Subramani et al. 2021). Batch norm mixes the examples of a batch, GroupNorm
# normalises each example alone, so per-sample gradients are defined. Same blocks, layer names and learned
# parameters (weight, bias) as the batch-norm network; no running statistics.
GROUP_NORM_VARIANTS = {"resnet18_gn": "resnet18", "resnet50_gn": "resnet50"}
GROUP_NORM_MAX_GROUPS = 32
GROUP_NORM_EPS = 1e-5  # PyTorch's default, set explicitly in Flax (whose default is 1e-6)


def group_norm_groups(channels: int) -> int:
    """min(32, C) groups of C channels; each group must hold the same number of channels."""
    groups = min(GROUP_NORM_MAX_GROUPS, channels)
    if channels % groups:
        raise ValueError(f"GroupNorm over {channels} channels needs a group count that divides it, and "
                         f"min({GROUP_NORM_MAX_GROUPS}, {channels}) = {groups} does not")
    return groups


def resnet_blocks(model: str, variant: str) -> tuple[int, ...]:
    """Blocks per stage of a ResNet or of its GroupNorm variant (the same table)."""
    return RESNET_BLOCKS[(GROUP_NORM_VARIANTS.get(model, model), variant)]


def _check_resnet_group_norms() -> None:
    """Every channel count a ResNet normalises has its groups: a table edit that breaks that fails on import."""
    for channels in {width * expansion for width in RESNET_WIDTHS for expansion in RESNET_EXPANSION.values()}:
        group_norm_groups(channels)


_check_resnet_group_norms()


@dataclass(frozen=True)
class ViTConfig:
    image_size: int
    patch_size: int
    num_layers: int
    num_heads: int
    hidden_dim: int
    mlp_dim: int


VIT = {
    "full": ViTConfig(224, 16, 12, 12, 768, 3072),  # torchvision's vit_b_16
    "tiny": ViTConfig(64, 16, 2, 2, 64, 128),
}
VIT_LAYER_NORM_EPS = 1e-6
# ViT's parameters that belong to no layer (torchvision's names), with their init and standard deviation.
NAMED_INITS = {"class_token": ("zeros", 0.0), "encoder.pos_embedding": ("normal", 0.02)}


@dataclass(frozen=True)
class MobileNetBlock:
    """One row of torchvision's InvertedResidualConfig (width_mult 1.0)."""

    input_channels: int
    kernel: int
    expanded_channels: int
    out_channels: int
    use_se: bool
    activation: str  # "RE" (ReLU) or "HS" (hard-swish)
    stride: int

    @property
    def squeeze_channels(self) -> int:
        return make_divisible(self.expanded_channels // 4, 8)


_MOBILENET_V3_SMALL = (
    MobileNetBlock(16, 3, 16, 16, True, "RE", 2),
    MobileNetBlock(16, 3, 72, 24, False, "RE", 2),
    MobileNetBlock(24, 3, 88, 24, False, "RE", 1),
    MobileNetBlock(24, 5, 96, 40, True, "HS", 2),
    MobileNetBlock(40, 5, 240, 40, True, "HS", 1),
    MobileNetBlock(40, 5, 240, 40, True, "HS", 1),
    MobileNetBlock(40, 5, 120, 48, True, "HS", 1),
    MobileNetBlock(48, 5, 144, 48, True, "HS", 1),
    MobileNetBlock(48, 5, 288, 96, True, "HS", 2),
    MobileNetBlock(96, 5, 576, 96, True, "HS", 1),
    MobileNetBlock(96, 5, 576, 96, True, "HS", 1),
)
# (blocks, last_channel): the tiny variant keeps the first four rows, which hold every block kind
# (with and without expansion and SE, ReLU and hard-swish, 3x3 and 5x5, a residual connection).
MOBILENET_V3_SMALL = {"full": (_MOBILENET_V3_SMALL, 1024), "tiny": (_MOBILENET_V3_SMALL[:4], 128)}
MOBILENET_BN_EPS = 1e-3


@dataclass(frozen=True)
class MBConvStage:
    """One row of torchvision's MBConvConfig (width and depth multipliers 1.0)."""

    expand_ratio: int
    kernel: int
    stride: int
    input_channels: int
    out_channels: int
    num_layers: int


_EFFICIENTNET_B0 = (
    MBConvStage(1, 3, 1, 32, 16, 1),
    MBConvStage(6, 3, 2, 16, 24, 2),
    MBConvStage(6, 5, 2, 24, 40, 2),
    MBConvStage(6, 3, 2, 40, 80, 3),
    MBConvStage(6, 5, 1, 80, 112, 3),
    MBConvStage(6, 5, 2, 112, 192, 4),
    MBConvStage(6, 3, 1, 192, 320, 1),
)
# The tiny variant keeps three stages: no expansion, expansion with a residual block, and a 5x5 kernel.
EFFICIENTNET_B0 = {
    "full": _EFFICIENTNET_B0,
    "tiny": (_EFFICIENTNET_B0[0], _EFFICIENTNET_B0[1], MBConvStage(6, 5, 2, 24, 40, 1)),
}

# The random regularisers of the published networks. They draw from each framework's own RNG, so no two
# frameworks can follow each other's draws: both run without them (the Flax modules have none, PyTorch sets
# their probabilities to 0 for training and is in eval mode for inference), and every row says so.
RANDOM_REGULARISERS = {
    "mobilenet_v3_small": "classifier dropout 0.2",
    "efficientnet_b0": "classifier dropout 0.2, stochastic depth 0.2",
}

# The small CNN for MNIST: (conv1 channels, conv2 channels, hidden units). Not from torchvision.
CNN = {"full": (32, 64, 128), "tiny": (8, 16, 32)}
