"""The documented examples, rendered: each request of README.md and docs/usage.md planned as a dry run, its scripts,
job specs and campaign.toml compared with the golden copies under tests/golden/. A change that alters what a user's
request writes shows here as a diff; a change that means to alter it regenerates them (`UPDATE_GOLDEN=1 pytest
tests/unit/test_golden_examples.py`) and says in its commit message why each difference is right.

What varies from run to run or machine to machine is replaced before comparing: the folders, the campaign id (a
time and a random suffix), the git commit, the time of planning and this machine's interpreter."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest
from helpers import REPO_ROOT, run_cli

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
UPDATE = os.environ.get("UPDATE_GOLDEN") == "1"

# name -> the example's options (each a request the docs show, run as --dry-run with the built-in profile).
EXAMPLES = {
    "digits-uc1-batches": ["--benchmark", "digits", "--use-case", "1", "--batch-sizes", "16,32,64"],
    "digits-uc3-dp-sgd": ["--benchmark", "digits", "--use-case", "3", "--noise-multiplier", "1", "--clip-norm", "1"],
    "digits-uc2-two-nodes": ["--benchmark", "digits", "--use-case", "2", "--nodes", "2", "--tasks-per-node", "1"],
    "digits-uc1-3-5": ["--benchmark", "digits", "--use-case", "1,3,5"],
    "imagenet-uc5-inference": ["--benchmark", "imagenet", "--use-case", "5", "--models", "resnet50,vit_b_16",
                               "--synthetic"],
    "digits-uc1-paired-trials": ["--benchmark", "digits", "--use-case", "1", "--trials", "5", "--paired"],
    "digits-uc1-trials-auto": ["--benchmark", "digits", "--use-case", "1", "--trials", "auto", "--target-interval",
                               "10%"],
    "cifar10-uc3": ["--benchmark", "cifar10", "--use-case", "3", "--synthetic"],
}


def normalised(text: str, root: Path, campaign: str) -> str:
    """The text with what varies between runs and machines replaced by names."""
    text = text.replace(str(root), "<TMP>").replace(campaign, "<CAMPAIGN>")
    text = text.replace(str(REPO_ROOT), "<REPO>").replace(sys.executable, "<PYTHON>")
    text = re.sub(r"\b[0-9a-f]{40}(-dirty)?\b", "<COMMIT>", text)
    return re.sub(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00", "<TIME>", text)


def rendered(tmp_path: Path, options: list[str]) -> dict[str, str]:
    """relative path -> normalised text of everything the dry run wrote that a user reads or a job reads."""
    proc = run_cli(*options, "--dry-run", "--results-dir", str(tmp_path / "r"), "--scripts-dir", str(tmp_path / "s"))
    assert proc.returncode == 0, proc.stderr
    campaign = next((tmp_path / "r").iterdir())
    files = {f"scripts/{p.name}": p for p in sorted((tmp_path / "s").glob("*.sh"))}
    files |= {f"specs/{p.name}": p for p in sorted((campaign / "specs").glob("*.jsonl"))}
    files["campaign.toml"] = campaign / "campaign.toml"
    return {name: normalised(path.read_text(), tmp_path, campaign.name) for name, path in files.items()}


@pytest.mark.parametrize("name", EXAMPLES)
def test_a_documented_example_writes_what_it_wrote(tmp_path, name):
    found = rendered(tmp_path, EXAMPLES[name])
    folder = GOLDEN / name
    if UPDATE:
        for old in folder.rglob("*") if folder.exists() else []:
            if old.is_file():
                old.unlink()
        for relative, text in found.items():
            (folder / relative).parent.mkdir(parents=True, exist_ok=True)
            (folder / relative).write_text(text)
    kept = {str(p.relative_to(folder)): p.read_text() for p in folder.rglob("*") if p.is_file()}
    assert sorted(found) == sorted(kept), "the example writes other files than its golden copy (UPDATE_GOLDEN=1)"
    for relative, text in found.items():
        assert text == kept[relative], f"{name}/{relative} differs from its golden copy (UPDATE_GOLDEN=1 regenerates)"
