"""collect's progress bar while it reads task files: on stderr, files read of the total with the rate,
redrawn at most every PROGRESS_REDRAW_S on a terminal; silent in a pipe unless --progress asks for it."""

from __future__ import annotations

import io

from helpers import run_cli, task_file

from orchestrator.results import progress_bar


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_bar_is_redrawn_in_place_at_most_every_interval_and_ends_with_the_total():
    now = [100.0]
    screen = Terminal()
    bar = progress_bar.Progress(2048, screen, clock=lambda: now[0])
    for _ in range(3):  # 512 files each, within one redraw interval: nothing drawn
        now[0] += progress_bar.PROGRESS_REDRAW_S / 4
        bar.advance(512)
    assert screen.getvalue() == ""
    now[0] += progress_bar.PROGRESS_REDRAW_S
    bar.advance(512)
    bar.done()
    draws = screen.getvalue().split("\r")[1:]
    assert len(draws) == 2 and draws[0].rstrip() == draws[1].rstrip()  # the last batch, then done
    rate = 2048 / (now[0] - 100.0)
    assert draws[1].strip() == f"collect: [{'#' * 30}] 2,048/2,048 task files read, {rate:,.0f} files/s"
    assert draws[1].endswith("\n") and "\n" not in draws[0]


def test_a_part_read_shows_the_rate_and_the_time_left():
    now = [0.0]
    bar = progress_bar.Progress(10_000, Terminal(), clock=lambda: now[0])
    now[0] = 2.0
    bar.read = 5_000
    assert bar.line(now[0]) == (f"collect: [{'#' * 15}{'.' * 15}] 5,000/10,000 task files read, 2,500 files/s, "
                                "about 2s left")


def test_by_default_the_bar_shows_on_a_terminal_for_thousands_of_files_only():
    assert progress_bar.progress_for(progress_bar.PROGRESS_MIN_FILES, None, Terminal()).enabled
    assert not progress_bar.progress_for(progress_bar.PROGRESS_MIN_FILES - 1, None, Terminal()).enabled
    assert not progress_bar.progress_for(10_000, None, io.StringIO()).enabled  # a pipe or a file
    assert progress_bar.progress_for(3, True, io.StringIO()).enabled and not progress_bar.progress_for(10_000, False,
                                                                                             Terminal()).enabled


def test_collect_shows_the_bar_in_a_pipe_only_when_asked(tmp_path):
    for batch in (8, 16, 32):
        task_file(tmp_path, "jax", batch, 100.0 * batch)
    quiet = run_cli("collect", "--results-dir", str(tmp_path))
    assert quiet.returncode == 0 and "task files read" not in quiet.stderr, quiet.stderr
    (tmp_path / "merged.parquet").unlink()  # from scratch again: the link goes, its generation is replaced
    asked = run_cli("collect", "--results-dir", str(tmp_path), "--progress")
    assert asked.returncode == 0, asked.stderr
    lines = [line for line in asked.stderr.splitlines() if line.startswith("collect: [")]
    assert len(lines) == 1 and lines[0].startswith(f"collect: [{'#' * 30}] 3/3 task files read, ")
    assert "task files read" not in asked.stdout
