"""Results: collect, the JAX-vs-PyTorch comparison, the report and the W&B export; imports run, plan and the root."""
