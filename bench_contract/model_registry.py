"""The registered models, each with what both backends can do with it; the plan, the spec's rules and the backends
ask the object (`model.batch_norm`, `model.convolutional`, `model.runs(case)`) and never test a name.

The architectures themselves are in bench_contract.models and each backend's models; this module is in the
contract's root because the job spec's rules read it. To add a model: declare it here with its capabilities, build it
in both backends, and add it to its benchmark (orchestrator.plan.catalog). The tests parametrised over MODELS then
check it: that each backend's network has batch norm exactly where the declaration says
(tests/backends/test_registered_models.py), and that it plans the use cases its capabilities give it and is refused
the others with the reason (tests/unit/test_registries.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from bench_contract.use_cases import UseCase


@dataclass(frozen=True)
class Model:
    name: str
    description: str
    # Batch norm mixes the examples of a batch: per-sample gradients are undefined for it, and its statistics differ
    # between PyTorch's DistributedDataParallel (per rank) and a sharded JAX step (the global batch). Group and layer
    # norm normalise each example alone.
    batch_norm: bool = False
    convolutional: bool = False  # activations are images (N, C, H, W) all the way: PyTorch's channels_last applies
    infers: bool = True  # both backends run its forward pass alone: use case 5 and validate's parity check
    per_sample: bool = False  # both backends compute its per-sample gradients (DP-SGD)
    # Opacus's grad_sample_mode in float32: expanded weights ("ew", the faster where both run: 12 against 17 ms for the
    # tiny CNN at batch 64 here), else "hooks"; None where it runs in neither. A ResNet's in-place residual add breaks
    # the hooks; the ViT's class token (expand) breaks expanded weights (docs/measurement.md).
    opacus: str | None = None
    # Whether Opacus runs it under mixed precision, where it runs hooks: its expanded weights multiply, in their
    # backward (which autocast does not reach), the bfloat16 gradient by the float32 weight and fail ("expected m1 and
    # m2 to have the same dtype"), and a ResNet's in-place operations break the hooks.
    opacus_mixed: bool = False
    shardable: bool = False  # --parallelism fsdp is implemented and tested for it in both backends

    def runs(self, case: UseCase) -> bool:
        """Whether both backends run this model in `case`."""
        return ((case.trains or self.infers) and (self.per_sample or not case.per_sample)
                and not (case.data_parallel and self.batch_norm))

    def opacus_mode(self, mixed: bool) -> str | None:
        """The grad_sample_mode Opacus runs it in, under mixed precision or not; None where it runs it in neither."""
        if mixed:
            return "hooks" if self.opacus_mixed else None
        return self.opacus


MODELS: dict[str, Model] = {model.name: model for model in (
    Model("mlp", "MLP, hidden layers 512-512, ReLU", per_sample=True, opacus="ew", opacus_mixed=True),
    Model("cnn", "small CNN", convolutional=True, per_sample=True, opacus="ew", opacus_mixed=True),
    Model("resnet18", "ResNet-18 adapted to 32x32 inputs", batch_norm=True, convolutional=True),
    Model("resnet50", "ResNet-50 V1.5", batch_norm=True, convolutional=True),
    # The ResNets' GroupNorm variants normalise each example alone, so they run everything (DP-SGD included).
    Model("resnet18_gn", "ResNet-18 adapted to 32x32 inputs, GroupNorm (DP-trainable)", convolutional=True,
          per_sample=True, opacus="ew"),
    Model("resnet50_gn", "ResNet-50 V1.5, GroupNorm (DP-trainable)", convolutional=True, per_sample=True,
          opacus="ew"),
    Model("vit_b_16", "ViT-Base, 16x16 patches", per_sample=True, opacus="hooks", opacus_mixed=True),
    Model("mobilenet_v3_small", "MobileNetV3-Small", batch_norm=True, convolutional=True),
    Model("efficientnet_b0", "EfficientNet-B0", batch_norm=True, convolutional=True),
    # The text transformer and the GCN run in neither of Opacus's modes; neither backend runs their forward pass
    # alone, nor the language model's.
    Model("transformer", "transformer encoder text classifier (pre-norm, mean-pooled)", infers=False,
          per_sample=True),
    Model("gpt", "GPT-2 decoder-only language model, next-token loss", infers=False, shardable=True),
    Model("gcn", "two-layer GCN (Kipf & Welling), segment sums", infers=False, per_sample=True),
)}


def names(models) -> str:
    """The names of `models`, in the registry's order, as a sentence lists them: "mlp, cnn, vit_b_16"."""
    return ", ".join(model.name for model in models)
