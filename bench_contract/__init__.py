"""The contract between the orchestrator and the framework backends.

The orchestrator writes one job spec (JSON) per cell; a backend reads it, runs the cell and writes
result rows (Parquet). Both framework environments install this package, so it depends on numpy and
pyarrow only and never imports jax, torch, typer or jinja2.
"""

SCHEMA_VERSION = 1
