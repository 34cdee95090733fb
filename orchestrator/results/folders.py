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
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path

from orchestrator.plan.campaign import MANIFEST
from orchestrator.results.store import MERGED


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


def shown(path: Path) -> str:
    """A folder as a user would type it in a command: relative to the current folder when it lies inside it,
    quoted for the shell, so that a command printed with it works when pasted."""
    absolute = os.path.abspath(path)
    here = os.getcwd()
    inside = absolute == here or absolute.startswith(here.rstrip(os.sep) + os.sep)
    return shlex.quote(os.path.relpath(absolute, here) if inside else absolute)


def nested_note(folder: Path, command: str, merge_hint: str = "") -> str:
    """One line naming a nested results folder that was left out, with the command that reads it."""
    return (f"{shown(folder)} holds its own results and was left out: python main.py {command} "
            f"--results-dir {shown(folder)}{merge_hint}")
