"""The HTML report in a real headless browser (Debian's chromium): tables found, every plot decoded."""

import os
import shutil
import subprocess
from html.parser import HTMLParser

import pytest
from helpers import merged_results, run_cli

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]


@pytest.fixture(scope="session")
def chromium():
    path = shutil.which("chromium")
    if path is None and os.geteuid() == 0 and shutil.which("apt-get"):
        # As for the Slurm cluster: install what the test needs from Debian's packages where we may.
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        install = ["apt-get", "install", "-y", "--no-install-recommends", "chromium"]
        if subprocess.run(install, capture_output=True, env=env).returncode != 0:
            subprocess.run(["apt-get", "update"], capture_output=True, env=env)
            subprocess.run(install, capture_output=True, env=env, check=True)
        path = shutil.which("chromium")
    if path is None:
        pytest.skip("chromium is not installed and cannot be installed here (needs root and apt-get)")
    return path


class Page(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tables, self.images, self.body = 0, [], {}

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "table":
            self.tables += 1
        elif tag == "img":
            self.images.append(attrs.get("src", ""))
        elif tag == "body":
            self.body = attrs


def test_the_report_opens_in_a_browser_with_its_tables_and_images(chromium, tmp_path):
    merged_results(tmp_path)
    assert run_cli("report", "--results-dir", str(tmp_path)).returncode == 0
    page = tmp_path / "report" / "report.html"
    # A copy that counts, once the page has loaded, the images the browser could decode.
    probe = tmp_path / "probe.html"
    probe.write_text(page.read_text().replace(
        "</body>",
        '<script>window.addEventListener("load", () => { document.body.dataset.decodedImages = '
        '[...document.images].filter(i => i.complete && i.naturalWidth > 0).length; });</script></body>'))
    proc = subprocess.run([chromium, *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom",
                           probe.as_uri()], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    dom = Page()
    dom.feed(proc.stdout)
    plots = len(list((tmp_path / "report" / "plots").iterdir()))
    assert dom.tables == 2  # one comparison table for the one CPU model, and the provenance table
    assert len(dom.images) == plots > 0
    assert all(src.startswith("data:image/png;base64,") for src in dom.images)
    assert dom.body.get("data-decoded-images") == str(plots)
