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


def test_a_full_disk_while_planning_leaves_nothing_of_the_new_campaign(tmp_path):
    """Before: specs and scripts of the new campaign without its manifest, the scripts folder's latest copies
    replaced by the new campaign's, and a traceback."""
    results, scripts = tmp_path / "results", tmp_path / "scripts"
    plan = ["--benchmark", "digits", "--use-case", "1", "--dry-run", "--results-dir", str(results),
            "--scripts-dir", str(scripts)]
    assert run_cli(*plan, "--epochs", "1").returncode == 0
    before = tree(results), tree(scripts)
    # The manifest is written last: by then the old code had written every spec and script.
    proc = run_with_full_disk("manifest.json", *plan, "--epochs", "2")
    sentence = one_sentence(proc)
    assert "no space left on device" in sentence and "was kept" in sentence, sentence
    assert (tree(results), tree(scripts)) == before  # the first campaign and its latest scripts, as they were
    assert len(list(results.iterdir())) == 1


def test_a_full_disk_before_anything_of_the_plan_leaves_no_folder(tmp_path):
    results, scripts = tmp_path / "results", tmp_path / "scripts"
    proc = run_with_full_disk("jax.jsonl", "--benchmark", "digits", "--use-case", "1", "--dry-run",
                              "--results-dir", str(results), "--scripts-dir", str(scripts))
    assert "no space left on device" in one_sentence(proc)
    assert not results.exists() and not scripts.exists()


def test_publish_all_puts_every_file_in_place_or_none(tmp_path, monkeypatch):
    from bench_contract import atomic

    (tmp_path / "old.txt").write_text("old")
    files = [(tmp_path / "old.txt", "new", None), (tmp_path / "a" / "b" / "c.sh", "echo", 0o755),
             (tmp_path / "a" / "last.json", "{}", None)]
    write_text = atomic.Path.write_text

    def full_at_last(self, *args, **kwargs):
        if "last.json" in self.name:
            raise OSError(errno.ENOSPC, "No space left on device")
        return write_text(self, *args, **kwargs)

    monkeypatch.setattr(atomic.Path, "write_text", full_at_last)
    with pytest.raises(OSError) as raised:
        atomic.publish_all(files, folders=[tmp_path / "logs"])
    assert raised.value.filename == str(tmp_path / "a" / "last.json")  # the file's name, not its temporary one
    assert sorted(p.name for p in tmp_path.iterdir()) == ["old.txt"] and (tmp_path / "old.txt").read_text() == "old"
    monkeypatch.undo()
    atomic.publish_all(files, folders=[tmp_path / "logs"])
    assert (tmp_path / "old.txt").read_text() == "new" and (tmp_path / "logs").is_dir()
    assert os.access(tmp_path / "a" / "b" / "c.sh", os.X_OK) and (tmp_path / "a" / "last.json").read_text() == "{}"


def test_a_full_disk_during_collect_keeps_the_previous_merged_dataset(tmp_path):
    """Before: the previous generation stayed, but with a traceback (from pyarrow's writer) and exit 1."""
    import pandas as pd

    merged_results(tmp_path)
    merged = tmp_path / "merged.parquet"
    generation = os.readlink(merged)
    rows = len(pd.read_parquet(merged))
    hidden = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("."))
    task_file(tmp_path, "jax", 128, 4000.0)  # a new result, so that collect writes a new part
    proc = run_with_full_disk("parquet", "collect", "--results-dir", str(tmp_path))
    sentence = one_sentence(proc)
    assert "no space left on device" in sentence and "as the last collect left it" in sentence, sentence
    assert os.readlink(merged) == generation and len(pd.read_parquet(merged)) == rows
    # The unpublished generation is gone at once (before, only the next collect removed it).
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == hidden
    proc = run_cli("collect", "--results-dir", str(tmp_path))  # with room again, the new result is merged
    assert proc.returncode == 0, proc.stderr
    assert len(pd.read_parquet(merged)) > rows


def test_a_lock_that_could_not_be_written_is_not_left_behind(tmp_path, monkeypatch):
    """Before: an empty lock file, which names no holder and is never taken over."""
    from orchestrator.run import file_lock as lock

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(lock.os, "fsync", full)
    with pytest.raises(OSError), lock.exclusive(tmp_path / ".launch.lock", "a test"):
        pass
    assert not (tmp_path / ".launch.lock").exists()


def test_a_full_disk_that_a_command_does_not_word_is_still_one_sentence(capsys):
    import typer

    from orchestrator.cli.common import domain_errors

    with pytest.raises(typer.Exit) as raised, domain_errors():
        raise OSError(errno.ENOSPC, "No space left on device", "/results/report/report.md")
    assert raised.value.exit_code == 1
    assert capsys.readouterr().err == ("error: no space left on device (/results/report/report.md); free some space "
                                       "and run the command again\n")


@pytest.mark.parametrize("make, words", [
    (lambda p: p.write_bytes(b'name = "caf\xe9"\n'), "is not UTF-8 text (byte 0xe9 at offset 11)"),
    (lambda p: p.mkdir(), "is a folder"),
])
def test_a_profile_that_is_not_utf8_or_is_a_folder_is_one_sentence(tmp_path, make, words):
    profile = tmp_path / "site.toml"
    make(profile)
    proc = run_cli("--benchmark", "digits", "--use-case", "1", "--dry-run", "--profile", str(profile),
                   "--results-dir", str(tmp_path / "r"), "--scripts-dir", str(tmp_path / "s"))
    assert words in one_sentence(proc, code=2)
    assert not (tmp_path / "r").exists() and not (tmp_path / "s").exists()


@pytest.mark.parametrize("option, under, words", [
    ("--results-dir", "", "is a file, not a folder"),
    ("--scripts-dir", "", "is a file, not a folder"),  # before: refused after the campaign's files were written
    ("--results-dir", "sub", "cannot be made"),
    ("--scripts-dir", "sub", "cannot be made"),
])
def test_a_results_or_scripts_folder_that_is_a_file_is_refused_before_anything_is_written(tmp_path, option, under,
                                                                                           words):
    (tmp_path / "a-file").write_text("not a folder")
    folders = {"--results-dir": tmp_path / "r", "--scripts-dir": tmp_path / "s"}
    folders[option] = tmp_path / "a-file" / under if under else tmp_path / "a-file"
    proc = run_cli("--benchmark", "digits", "--use-case", "1", "--dry-run",
                   *(arg for name, path in folders.items() for arg in (name, str(path))))
    sentence = one_sentence(proc, code=2)
    assert option in sentence and words in sentence, sentence
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file"]


@pytest.mark.parametrize("interval", ["nan", "inf", "-inf", "-1", "0", "1e9", "1e-300"])
def test_watch_refuses_an_interval_out_of_bounds_in_one_sentence(tmp_path, interval):
    """A campaign with a cell still pending. Before: nan and inf reached time.sleep after the first poll (a
    ValueError, an OverflowError), 1e9 slept for 31 years and 1e-300 polled without pause; 0 and -1 were
    refused with exit 1."""
    from helpers import fake_queue
    from test_status import campaign

    campaign(tmp_path, with_results={("jax", 0), ("jax", 1), ("jax", 2), ("torch", 0), ("torch", 1)})
    env, _ = fake_queue(tmp_path, sacct=["71_2|PENDING"], squeue=["71_2 PENDING"])
    proc = run_cli("watch", f"--interval={interval}", "--results-dir", str(tmp_path / "results"), env=env,
                   timeout=30)
    assert "--interval takes seconds from 0.01 to 60" in one_sentence(proc, code=2)
    assert proc.stdout == ""  # refused before the first poll


def test_watch_itself_refuses_nan():
    from orchestrator.errors import UsageError
    from orchestrator.run.status import watch_campaign

    with pytest.raises(UsageError, match="--interval"):
        watch_campaign(REPO_ROOT / "results" / "no-such-campaign", float("nan"))


def test_wandb_online_without_an_api_key_is_one_sentence_that_says_what_to_do(tmp_path):
    pytest.importorskip("wandb")
    merged_results(tmp_path)
    env = {key: value for key, value in os.environ.items() if not key.startswith("WANDB_")}
    # A home and W&B settings of its own: no ~/.netrc or settings file gives a key, nothing says offline.
    env.update(HOME=str(tmp_path / "home"), WANDB_CONFIG_DIR=str(tmp_path / "wandb-config"),
               WANDB_DISABLE_GIT="true")
    proc = run_cli("report", "--results-dir", str(tmp_path), "--wandb-project", "jaxtorch-test", env=env)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, proc.stderr
    for words in ("no W&B API key", "WANDB_API_KEY", "`wandb login`", "WANDB_MODE=offline", "the report is written"):
        assert words in errors[0], errors[0]
    assert (tmp_path / "report" / "report.html").is_file()
