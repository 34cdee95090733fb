"""The login-node side: plan, render, submit and collect. Never imports jax or torch."""

from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_RESULTS_DIR = PROJECT_ROOT / "results"
DEMO_RESULTS_DIR = PROJECT_ROOT / "demo-results"  # `make demo`'s (the Makefile's DEMO_RESULTS), outside results/
DEFAULT_SCRIPTS_DIR = PROJECT_ROOT / "slurm_scripts"
