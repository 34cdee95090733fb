"""The JAX backend: runs one cell in the JAX environment. Never imports torch or the orchestrator."""
