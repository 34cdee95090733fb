"""The PyTorch backend: runs one cell in the PyTorch environment. Never imports jax or the orchestrator."""
