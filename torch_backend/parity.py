"""Parity entry point on any node: `python -m torch_backend.parity SPEC.json` writes this framework's logits."""

from __future__ import annotations

import sys

from bench_contract.run.parity import main
from torch_backend.run import TorchBackend

if __name__ == "__main__":
    sys.exit(main(TorchBackend()))
