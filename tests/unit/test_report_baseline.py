"""`report --baseline NAME`: the report shows each cell's change against a baseline, as `compare
--baseline` does: a baseline from one campaign, a slowed copy flagged as a regression with the versions that changed
beside it, the unchanged copy not flagged."""

from __future__ import annotations

import json
import re

from helpers import run_cli, write_manifest
from test_baseline import write_campaign

from orchestrator.results import baseline
from orchestrator.results.collect import merge


def html_rows(page: str, title: str) -> list[list[str]]:
    """The cells of each body row of the table under the heading that starts with `title`."""
    section = page[page.index(f"<h3>{title}"):]
    body = section[section.index("<tbody>"):section.index("</tbody>")]
    return [re.findall(r"<td[^>]*>(.*?)</td>", row) for row in body.split("<tr>")[1:]]


def test_the_report_flags_the_slowed_campaign_and_names_the_changed_versions(tmp_path):
    write_campaign(tmp_path, "base")
    write_campaign(tmp_path, "same")
    write_campaign(tmp_path, "slow", slower=1.2, versions={"jax": "1.1"})
    merge(tmp_path, tmp_path / "merged.parquet")
    baseline.save(tmp_path, tmp_path / "merged.parquet", "release-1", ("base",))
    proc = run_cli("report", "--results-dir", str(tmp_path), "--baseline", "release-1")
    assert proc.returncode == 0, proc.stderr
    assert "2 regression(s) against baseline release-1 (tolerance 5%), 0 improvement(s)" in proc.stdout
    page = (tmp_path / "report" / "report.html").read_text()
    rows = {(r[0], r[3]): r for r in html_rows(page, "Against baseline release-1: 2 regression(s)")}
    assert set(rows) == {(c, fw) for c in ("same", "slow") for fw in ("jax", "torch")}
    assert rows["slow", "jax"][7:] == ["REGRESSION", "framework 1.0 -&gt; 1.1"]
    assert rows["slow", "torch"][7:] == ["REGRESSION", ""]
    # The change with its interval, which lies wholly below -5%.
    assert all(re.fullmatch(r"-16\.7% \[-1\d\.\d%, -1\d\.\d%\]", rows["slow", fw][6]) for fw in ("jax", "torch"))
    assert [rows["same", fw][7] for fw in ("jax", "torch")] == ["within tolerance"] * 2
    markdown = (tmp_path / "report" / "report.md").read_text()
    assert "## Against baseline release-1: 2 regression(s)" in markdown and "framework 1.0 -> 1.1" in markdown


def test_a_report_without_a_baseline_has_no_such_table_and_a_bad_name_is_one_sentence(tmp_path):
    write_campaign(tmp_path, "base")
    merge(tmp_path, tmp_path / "merged.parquet")
    assert run_cli("report", "--results-dir", str(tmp_path)).returncode == 0
    assert "Against baseline" not in (tmp_path / "report" / "report.html").read_text()
    bad = run_cli("report", "--results-dir", str(tmp_path), "--baseline", "nope", "--output-dir",
                  str(tmp_path / "bad"))
    assert bad.returncode == 2 and bad.stderr.startswith("error: no baseline 'nope'") and not (tmp_path / "bad").exists()
    assert len(bad.stderr.strip().splitlines()) == 1


def test_the_report_of_one_campaign_shows_that_campaign_against_the_baseline(tmp_path):
    write_campaign(tmp_path, "base")
    write_campaign(tmp_path, "slow", slower=1.2)
    write_manifest(tmp_path / "slow", [])
    merge(tmp_path, tmp_path / "merged.parquet")
    baseline.save(tmp_path, tmp_path / "merged.parquet", "release-1", ("base",))
    proc = run_cli("report", "--results-dir", str(tmp_path), "--campaign", "slow", "--baseline", "release-1")
    assert proc.returncode == 0, proc.stderr
    page = (tmp_path / "report-slow" / "report.html").read_text()
    rows = html_rows(page, "Against baseline release-1: 2 regression(s)")
    assert sorted((r[0], r[3], r[7]) for r in rows) == [("slow", fw, "REGRESSION") for fw in ("jax", "torch")]
