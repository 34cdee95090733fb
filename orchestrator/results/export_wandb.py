"""Optional export of the merged results to Weights & Biases, when the user names a project.

One W&B run per export, holding the comparison table and every summary row as W&B tables, with the
campaigns, commits and device models as its config. W&B's own settings apply: WANDB_MODE=offline writes
the run to disk (wandb sync uploads it later), which is how the tests run it, with no network.
"""

from __future__ import annotations

from pathlib import Path

from orchestrator.errors import OrchestratorError
from orchestrator.results.compare import summary_rows


def export(df, frame, project: str, folder: Path) -> Path:
    """Log the tables to a new run in `project`; return the run's local folder."""
    try:
        import wandb
    except ImportError:
        raise OrchestratorError(
            "exporting to W&B needs the wandb package: pip install 'jaxtorch-bench[wandb]' in the orchestrator's environment"
        ) from None

    folder.mkdir(parents=True, exist_ok=True)
    config = {
        "campaigns": sorted(df["campaign"].unique()),
        "git_commits": sorted(df["git_commit"].unique()),
        "device_models": sorted(df["device_model"].unique()),
        "rows": len(df),
    }
    try:
        run = wandb.init(project=project, dir=str(folder), job_type="jax-vs-pytorch", config=config)
    except wandb.errors.Error as exc:  # online without an API key, a key W&B refuses, W&B out of reach
        raise OrchestratorError(f"the report is written, but its export to W&B project {project} failed: "
                                f"{init_failure(exc)}; or export offline with WANDB_MODE=offline (`wandb sync` "
                                "uploads the run later)") from None
    try:
        run.log({
            "comparison": wandb.Table(dataframe=frame.astype({"use_case": int, "batch_size": int})),
            "results": wandb.Table(dataframe=summary_rows(df).reset_index(drop=True)),
        })
        run_dir = Path(run.dir).parent
    finally:
        run.finish()
    return run_dir


def init_failure(exc: Exception) -> str:
    """Why wandb.init failed and what to do, in a few words: W&B's own message runs to several sentences."""
    text = str(exc).strip()
    if "api key" in text.lower() and ("no " in text.lower() or "not configured" in text.lower()):
        return "no W&B API key is configured (set WANDB_API_KEY or run `wandb login`)"
    first = text.splitlines()[0].split(". ")[0].rstrip(".") if text else type(exc).__name__
    return f"{first} (check the network and the API key)"
