"""Optional export of the merged results to Weights & Biases, when the user names a project.

One W&B run per export, holding the comparison table and every summary row as W&B tables, with the
campaigns, commits and device models as its config. W&B's own settings apply: WANDB_MODE=offline writes
the run to disk (wandb sync uploads it later), which is how the tests run it, with no network.
"""

from __future__ import annotations

from pathlib import Path

from orchestrator.errors import OrchestratorError


def export(df, frame, project: str, folder: Path) -> Path:
    """Log the tables to a new run in `project`; return the run's local folder."""
    try:
        import wandb
    except ImportError:
        raise OrchestratorError(
            "exporting to W&B needs the wandb package: pip install 'jaxtorch-bench[wandb]' in the orchestrator's environment"
        ) from None
    from orchestrator.results.compare import summary_rows

    folder.mkdir(parents=True, exist_ok=True)
    config = {
        "campaigns": sorted(df["campaign"].unique()),
        "git_commits": sorted(df["git_commit"].unique()),
        "device_models": sorted(df["device_model"].unique()),
        "rows": len(df),
    }
    run = wandb.init(project=project, dir=str(folder), job_type="jax-vs-pytorch", config=config)
    try:
        run.log({
            "comparison": wandb.Table(dataframe=frame.astype({"use_case": int, "batch_size": int})),
            "results": wandb.Table(dataframe=summary_rows(df).reset_index(drop=True)),
        })
        run_dir = Path(run.dir).parent
    finally:
        run.finish()
    return run_dir
