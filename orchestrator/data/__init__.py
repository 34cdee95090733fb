"""Data sets on the login node: `fetch` downloads, verifies and unpacks the canonical files (compute nodes often
have no internet); `check` runs the readers' checks on a data directory without running anything.

The lowest wing of the orchestrator: it imports only the contract's readers and the orchestrator's root.
"""
