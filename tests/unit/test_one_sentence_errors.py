"""What used to end in a traceback now ends in one sentence and a non-zero exit, and leaves nothing half-written:
a full disk while planning, while collecting or while taking a lock; a profile that is not UTF-8 or is a folder;
a results or scripts folder that is a file; watch's --interval out of bounds; W&B online without an API key.

A full disk is faked in the CLI's own process (FULL_DISK below): the named file's write raises ENOSPC, as the
kernel does when the disk fills up at that moment."""

from __future__ import annotations

import errno
import os
import subprocess
import sys

import pytest
from helpers import REPO_ROOT, merged_results, run_cli, task_file

# `python main.py ARGS` in which writing a file whose name holds WHEN (the first argument) fails with ENOSPC:
# a text file (Path.write_text) or a Parquet file (pyarrow's writer; WHEN "parquet" fails every one).
FULL_DISK = """
import errno, pathlib, runpy, sys
import pyarrow.parquet as pq
when = sys.argv.pop(1)
def full():
    return OSError(errno.ENOSPC, "No space left on device")
write_text = pathlib.Path.write_text
def write_text_full(self, *args, **kwargs):
    if when in self.name:
        raise full()
    return write_text(self, *args, **kwargs)
pathlib.Path.write_text = write_text_full
def write_table_full(self, *args, **kwargs):
    raise full()
if when == "parquet":
    pq.ParquetWriter.write_table = write_table_full
sys.argv[0] = "main.py"
runpy.run_path("main.py", run_name="__main__")
"""


def run_with_full_disk(when: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", FULL_DISK, when, *args], capture_output=True, text=True,
                          cwd=REPO_ROOT, timeout=600, stdin=subprocess.DEVNULL)


def one_sentence(proc: subprocess.CompletedProcess, code: int = 1) -> str:
    assert proc.returncode == code, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    return lines[0]


def tree(folder) -> dict[str, str]:
    """Every file under folder (hidden ones too) with its text: what a run left behind."""
    return {str(p.relative_to(folder)): p.read_text() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_full_disk_that_a_command_does_not_word_is_still_one_sentence(capsys):
    import typer

    from orchestrator.cli.common import domain_errors

    with pytest.raises(typer.Exit) as raised, domain_errors():
        raise OSError(errno.ENOSPC, "No space left on device", "/results/report/report.md")
    assert raised.value.exit_code == 1
    assert capsys.readouterr().err == ("error: no space left on device (/results/report/report.md); free some space "
                                       "and run the command again\n")
