"""The vision models in PyTorch: torchvision's builders for the full networks, torchvision's classes fed from
bench_contract.models.vision for the tiny ones, and the small CNN (MNIST, CIFAR-10).

torchvision is imported by the builders that use it, not here: importing it imports TorchDynamo (through
torchvision.ops), about 1.2 s of CPU in every process, which the models without it (the MLP, the CNN, the
transformer, the GCN) never need, eager or compiled alike.
"""

from __future__ import annotations

import functools
import sys

import torch
from torch import nn

from bench_contract.models import vision


def group_norm(channels: int) -> nn.GroupNorm:
    """The norm_layer of the DP-trainable ResNets: min(32, C) groups of C channels, each example alone."""
    return nn.GroupNorm(vision.group_norm_groups(channels), channels, eps=vision.GROUP_NORM_EPS)


def resnet50(num_classes: int, variant: str, norm_layer=None) -> nn.Module:
    """torchvision's ResNet-50; norm_layer None is its batch norm."""
    import torchvision.models as tvm
    from torchvision.models.resnet import Bottleneck, ResNet

    if variant == "full":
        return tvm.resnet50(weights=None, num_classes=num_classes, norm_layer=norm_layer)
    return ResNet(Bottleneck, list(vision.resnet_blocks("resnet50", variant)), num_classes=num_classes,
                  norm_layer=norm_layer)


def resnet18_cifar(num_classes: int, variant: str, norm_layer=None) -> nn.Module:
    """torchvision's ResNet-18 for 32x32 inputs: a 3x3 stride-1 stem and no max-pool, the usual CIFAR choice
    (a 7x7 stride-2 stem and a max-pool would leave a 1x1 map before the last stage)."""
    from torchvision.models.resnet import BasicBlock, ResNet

    model = ResNet(BasicBlock, list(vision.resnet_blocks("resnet18", variant)), num_classes=num_classes,
                   norm_layer=norm_layer)
    model.conv1 = nn.Conv2d(3, vision.RESNET_WIDTHS[0], kernel_size=3, stride=1, padding=1, bias=False)
    model.maxpool = nn.Identity()
    return model


def vit_b_16(num_classes: int, variant: str) -> nn.Module:
    import torchvision.models as tvm

    if variant == "full":
        return tvm.vit_b_16(weights=None, num_classes=num_classes)
    c = vision.VIT[variant]
    return tvm.VisionTransformer(image_size=c.image_size, patch_size=c.patch_size, num_layers=c.num_layers,
                                 num_heads=c.num_heads, hidden_dim=c.hidden_dim, mlp_dim=c.mlp_dim,
                                 num_classes=num_classes)


def mobilenet_v3_small(num_classes: int, variant: str) -> nn.Module:
    import torchvision.models as tvm
    from torchvision.models.mobilenetv3 import InvertedResidualConfig, MobileNetV3

    if variant == "full":
        return tvm.mobilenet_v3_small(weights=None, num_classes=num_classes)
    blocks, last_channel = vision.MOBILENET_V3_SMALL[variant]
    setting = [InvertedResidualConfig(b.input_channels, b.kernel, b.expanded_channels, b.out_channels, b.use_se,
                                      b.activation, b.stride, 1, 1.0) for b in blocks]
    return MobileNetV3(setting, last_channel, num_classes=num_classes)


def efficientnet_b0(num_classes: int, variant: str) -> nn.Module:
    import torchvision.models as tvm
    from torchvision.models.efficientnet import EfficientNet, MBConvConfig

    if variant == "full":
        return tvm.efficientnet_b0(weights=None, num_classes=num_classes)
    setting = [MBConvConfig(s.expand_ratio, s.kernel, s.stride, s.input_channels, s.out_channels, s.num_layers,
                            1.0, 1.0) for s in vision.EFFICIENTNET_B0[variant]]
    return EfficientNet(setting, dropout=0.2, num_classes=num_classes)


class SmallCNN(nn.Module):
    """conv3x3-ReLU-maxpool twice, then a hidden Linear layer and the classifier: the MNIST CNN, and the same
    network on CIFAR-10's 32x32 colour images (fc1's width follows the input size)."""

    def __init__(self, sample_shape: tuple[int, ...], num_classes: int, variant: str) -> None:
        super().__init__()
        in_channels, height, width = sample_shape
        c1, c2, hidden = vision.CNN[variant]
        self.conv1 = nn.Conv2d(in_channels, c1, 3, padding=1)
        self.conv2 = nn.Conv2d(c1, c2, 3, padding=1)
        self.fc1 = nn.Linear(c2 * (height // 4) * (width // 4), hidden)  # two 2x2 max-pools, flooring
        self.fc2 = nn.Linear(hidden, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = nn.functional.max_pool2d(torch.relu(self.conv1(x)), 2)
        x = nn.functional.max_pool2d(torch.relu(self.conv2(x)), 2)
        return self.fc2(torch.relu(self.fc1(x.flatten(1))))


def disable_random_regularisers(model: nn.Module) -> list[str]:
    """Set every dropout and stochastic-depth probability to 0 (MobileNetV3's and EfficientNet's classifier
    dropout, EfficientNet's stochastic depth; torchvision's ViT has dropout 0 already). They draw from
    PyTorch's RNG, which JAX cannot reproduce, so with them on the two frameworks could not take the same
    steps. Returns the names of the modules changed."""
    random_regularisers: tuple[type, ...] = (nn.Dropout,)
    if "torchvision" in sys.modules:  # only a model built by torchvision holds its StochasticDepth
        from torchvision.ops import StochasticDepth

        random_regularisers += (StochasticDepth,)
    changed = []
    for name, module in model.named_modules():
        if isinstance(module, random_regularisers) and module.p > 0:
            module.p = 0.0
            changed.append(name)
    return changed


BUILDERS = {
    "resnet50": resnet50,
    "resnet18": resnet18_cifar,
    "vit_b_16": vit_b_16,
    "mobilenet_v3_small": mobilenet_v3_small,
    "efficientnet_b0": efficientnet_b0,
}
BUILDERS.update({name: functools.partial(BUILDERS[base], norm_layer=group_norm)
                 for name, base in vision.GROUP_NORM_VARIANTS.items()})
