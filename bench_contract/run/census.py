"""The precision census of a training step or an inference forward pass: the dtypes each class of operation
computed in, as it ran, taken by each backend from its own framework (JAX: the traced program's jaxpr,
jax_backend.census; PyTorch: the ops one call dispatched, torch_backend.census), never from the precision
policy's words. Two sides whose censuses differ did not run the same precision policy, whatever their rows'
`precision` says (issue 29): the comparison's certificate names the classes that differ
(orchestrator.results.certificate).

A class's dtypes are those of the values it produces, as the rest of the step sees them, not a kernel's internal
accumulator (oneDNN's and XLA's float32 accumulation of a bfloat16 matmul are alike):
- matmul: matrix products and convolutions, forward and backward (their operands' dtype);
- normalisation: layer, group and batch norm (their outputs, forward);
- softmax: attention's softmax (what the exponentials are computed in);
- residual stream: the additions of the residual connections (the transformers' layers, the ResNets' blocks,
  MobileNet's and EfficientNet's inverted residuals; their outputs, forward): what the stream between blocks is
  carried in;
- loss: the log-softmax and cross-entropy of the loss;
- optimizer update: the arithmetic of the optimizer's update of the parameters.
"""

from __future__ import annotations

import json

CLASSES = ("matmul", "normalisation", "softmax", "residual stream", "loss", "optimizer update")


def census_text(census: dict[str, set[str] | list[str]]) -> str:
    """The census as the rows record it (context column `precision_census`): JSON of class -> sorted dtypes,
    classes the step never ran left out."""
    return json.dumps({c: sorted(census[c]) for c in CLASSES if census.get(c)}, sort_keys=True)


def parse(text: str) -> dict[str, list[str]]:
    """A recorded census; {} for a row without one (written before the census, or by a use case that takes none)."""
    return json.loads(text) if text else {}


def differences(census: dict[str, dict[str, list[str]]], titles: dict[str, str]) -> list[str]:
    """Per class in which the sides' censuses differ, one phrase: "normalisation bfloat16 in JAX, float32 in
    PyTorch" (a class one side never ran: "none"). census: side -> parsed census; titles: side -> its name."""
    out = []
    for name in CLASSES:
        dtypes = {side: "+".join(c.get(name, [])) or "none" for side, c in census.items()}
        if len(set(dtypes.values())) > 1:
            out.append(f"{name} " + ", ".join(f"{d} in {titles.get(side, side)}" for side, d in dtypes.items()))
    return out
