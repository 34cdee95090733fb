"""What a results folder holds: its own campaigns, and the results folders nested in it.

A results folder (`--results-dir`) holds its campaigns directly under it: a folder with a manifest.json is one
of its campaign folders (orchestrator.plan.campaign), and everything of it counts. A folder directly under it
without a manifest is one of two things:
- a nested results folder, when a manifest.json or a merged.parquet lies anywhere below it: a campaign folder
  of its own (the manifest's parent is then a results folder) or the dataset a collect wrote into its results
  folder. `results/demo`, where `make demo` wrote before, is one. Its campaigns are not this folder's: collect
  and campaigns leave it out and name it in one line, and it is read by naming it with `--results-dir`;
- otherwise a folder of task files without a manifest (rows copied by hand, a layout older than manifests, the
  tests' fixtures), whose `rows` folders collect merges as this results folder's, as it always did.
So `campaigns` and `collect` agree: both read the campaign folders directly under the folder, and neither
descends into another results folder.

A command whose results folder holds no submitted campaign names the results folders nearby that do (elsewhere),
with the command that reads each: the default `results/`, the demo's `demo-results/`, and the folders holding
campaign folders at most two levels below the current folder. There is no index of results folders to ask, and
one a user made elsewhere is most often beside the one they gave.
"""

from __future__ import annotations

import os
from pathlib import Path

from orchestrator import DEFAULT_RESULTS_DIR, DEMO_RESULTS_DIR
from orchestrator.plan.manifest import MANIFEST
from orchestrator.plan.campaign_folders import campaign_entries
from orchestrator.results.store import MERGED
from orchestrator.suggest import command, shown


def own_folders(results_dir: Path) -> tuple[list[Path], list[Path]]:
    """(the folders directly under results_dir whose task files are its own, the results folders nested in it):
    hidden folders (temporary files, generations of the merged dataset) are neither."""
    own, nested = [], []
    try:
        entries = sorted(os.scandir(results_dir), key=lambda entry: entry.name)
    except OSError:
        return [], []
    for entry in entries:
        if entry.name.startswith(".") or not entry.is_dir(follow_symlinks=False):
            continue
        folder = Path(entry.path)
        holders = [] if (folder / MANIFEST).is_file() else results_folders_below(folder)
        if holders:
            nested += holders
        else:
            own.append(folder)
    return own, nested


def results_folders_below(folder: Path) -> list[Path]:
    """The outermost results folders at or below `folder` (which has no manifest of its own): the parent of each
    campaign folder (one holding a manifest.json), and each folder holding a merged.parquet."""
    found: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(folder):
        here = Path(dirpath)
        if MANIFEST in filenames and here != folder:
            found.append(here.parent)
            dirnames.clear()  # a campaign folder's insides say nothing more
        elif MERGED in filenames or MERGED in dirnames:  # a file, a folder, or the link to its generation
            found.append(here)
            dirnames.clear()
        else:
            dirnames[:] = [name for name in dirnames if not name.startswith(".")]
    outermost = sorted(set(found), key=lambda path: len(path.parts))
    return [path for i, path in enumerate(outermost) if not any(other in path.parents for other in outermost[:i])]


def nested_results_folders(results_dir: Path, given: tuple[Path, ...] = ()) -> list[Path]:
    """The results folders nested in results_dir that are not among the folders `given` (read in their own right)."""
    read = {os.path.realpath(folder) for folder in given}
    return [folder for folder in own_folders(results_dir)[1] if os.path.realpath(folder) not in read]


def nested_note(folder: Path, name: str, merge_hint: str = "") -> str:
    """One line naming a nested results folder that was left out, with the command that reads it."""
    return f"{shown(folder)} holds its own results and was left out: {command(name, results_dir=folder)}{merge_hint}"


NONE_NEARBY = "; give --results-dir the folder that holds your campaigns"  # where no folder nearby holds one
SEARCH_FOLDERS = 300  # folders listed at most while looking for results folders nearby: a moment, even in $HOME
NAMED_AT_MOST = 3  # results folders a message names; more are counted


def submitted_campaigns(results_dir: Path) -> int:
    """How many of the folder's campaigns were submitted (dry runs and campaigns sbatch refused are not)."""
    return sum(entry.kind == "submitted" for entry in campaign_entries(results_dir))


def no_submitted_campaign(results_dir: Path) -> str:
    """"no submitted campaign in X", saying whether X holds dry runs or does not exist, as the start of a line."""
    if not results_dir.is_dir():
        return f"no results folder {results_dir}"
    dry_runs = sum(entry.dry_run for entry in campaign_entries(results_dir))
    return f"no submitted campaign in {results_dir}" + (", only dry runs" if dry_runs else "")


def results_folders_nearby() -> list[Path]:
    """The default results folder, the demo's, and every folder at most two levels below the current folder that
    holds a campaign folder (hidden folders aside, and not inside campaign folders, which hold none)."""
    found = [DEFAULT_RESULTS_DIR, DEMO_RESULTS_DIR]
    level, listed = [Path.cwd()], 0
    for _ in range(3):  # the current folder, its subfolders and theirs, each as a results folder
        below = []
        for folder in level[:max(0, SEARCH_FOLDERS - listed)]:
            listed += 1
            subfolders = visible_subfolders(folder)
            campaigns = [sub for sub in subfolders if (sub / MANIFEST).is_file()]
            if campaigns:
                found.append(folder)
            below += [sub for sub in subfolders if sub not in campaigns]
        level = below
    unique: dict[str, Path] = {}
    for folder in found:
        unique.setdefault(os.path.realpath(folder), folder)  # one folder found twice (results/ from the root) once
    return list(unique.values())


def visible_subfolders(folder: Path) -> list[Path]:
    try:
        return sorted(Path(entry.path) for entry in os.scandir(folder)
                      if not entry.name.startswith(".") and entry.is_dir(follow_symlinks=False))
    except OSError:
        return []


def elsewhere(results_dir: Path, name: str | None = None, given: tuple[Path, ...] = ()) -> str:
    """For a results folder without a submitted campaign: "; B holds 2 submitted campaigns: python main.py NAME
    --results-dir B" for each results folder nearby that holds some (NAME None: the command running now), so
    that the user is told where their campaigns are rather than sent round; "" when none does."""
    skip = {os.path.realpath(folder) for folder in (results_dir, *given)}
    holding = [(folder, count) for folder in results_folders_nearby()
               if os.path.realpath(folder) not in skip and (count := submitted_campaigns(folder))]
    words = [f"{shown(folder)} holds {count} submitted campaign{'s' if count > 1 else ''}: "
             f"{command(name, results_dir=folder)}" for folder, count in holding[:NAMED_AT_MOST]]
    if len(holding) > NAMED_AT_MOST:
        words.append(f"and {len(holding) - NAMED_AT_MOST} more folders hold some")
    return "".join(f"; {word}" for word in words)
