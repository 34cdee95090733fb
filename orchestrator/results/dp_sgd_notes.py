"""What the DP-SGD table (views, use cases 3 and 4) says below itself about how each side's figures were made
(issue 63), read from the rows:
- padding: the share of each side's computed examples that was padding (JAX pads every Poisson batch to one
  compiled shape, compiled PyTorch too; eager PyTorch runs each as drawn), where the certificate found it too small
  to refuse the row (certificate.padding_reasons); a row it refuses says so in its reasons instead;
- the vectorisation speed-up: whether each side's per-example loop and vectorised version ran compiled or eagerly
  (a jitted loop and an eager one are different figures under one name).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from bench_contract.spec import FRAMEWORK_TITLES
from orchestrator.results.certificate import padding_note, padding_of, padding_reasons
from orchestrator.results.compare import FRAMEWORKS

# How a version that ran compiled is called, per framework (the rows' per_sample_grads_*_compiled flags).
COMPILED = {"jax": "jitted", "torch": "compiled"}


def padding_info(row, words: Callable[[object], str]) -> str:
    """"padding, digits mlp batch 4096: padding of the computed examples JAX 8%, PyTorch none; ..." for a row
    (views.use_case_frame's) whose sides padded; "" where neither did, or where the certificate already names it.
    `words` names the row (views.cell_words)."""
    paddings = {fw: padding_of(row.get(f"{fw}_padding_fraction")) for fw in FRAMEWORKS}
    note = padding_note(paddings)
    return f"padding, {words(row)}: {note}" if note and not padding_reasons(paddings) else ""


def version_kind(framework: str, flag) -> str | None:
    """"jitted" (JAX) or "compiled" (PyTorch), "eager", or None where the rows hold no flag (NaN after the medians;
    rows from before it was recorded)."""
    if flag is None or np.isnan(flag):
        return None
    return COMPILED[framework] if flag > 0 else "eager"


def loop_words(row) -> str:
    """What each side's vectorisation speed-up divides: "the per-example loop's time over the vectorised one's (JAX:
    jitted loop, jitted vectorised; PyTorch: eager loop, eager vectorised)"; "" where no side recorded it."""
    sides = []
    for framework in FRAMEWORKS:
        loop = version_kind(framework, row.get(f"{framework}_per_sample_grads_loop_compiled"))
        vectorized = version_kind(framework, row.get(f"{framework}_per_sample_grads_vectorized_compiled"))
        if loop and vectorized:
            sides.append(f"{FRAMEWORK_TITLES[framework]}: {loop} loop, {vectorized} vectorised")
    return f"the per-example loop's time over the vectorised one's ({'; '.join(sides)})" if sides else ""


def loop_notes(block, words: Callable[[object], str]) -> list[str]:
    """What the vmap speed-up divides: said once where every row of `block` timed alike, else per row (`words`
    names it)."""
    said = {words(row): text for _, row in block.iterrows() if (text := loop_words(row))}
    if len(set(said.values())) == 1:
        return [f"vmap speed-up: {next(iter(said.values()))}"]
    return [f"vmap speed-up, {cell}: {text}" for cell, text in said.items()]
