"""The HTML report in a real headless browser (Debian's chromium): tables found, every plot decoded; and, as a
person sees it in a window 1280 pixels wide, no horizontal scroller, no text drawn over other text, and a
screenshot (docs/report-screenshot.png is one of a real run, taken with `screenshot` below)."""

import os
import shutil
import struct
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest
from helpers import merged_results, result_context, run_cli

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]


@pytest.fixture(scope="session")
def chromium():
    path = shutil.which("chromium")
    if path is None and os.geteuid() == 0 and shutil.which("apt-get"):
        # As for the Slurm cluster: install what the test needs from Debian's packages where we may.
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        install = ["apt-get", "install", "-y", "--no-install-recommends", "chromium"]
        if subprocess.run(install, capture_output=True, env=env, check=False).returncode != 0:
            subprocess.run(["apt-get", "update"], capture_output=True, env=env, check=False)
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
                           probe.as_uri()], capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    dom = Page()
    dom.feed(proc.stdout)
    plots = len(list((tmp_path / "report" / "plots").glob("*.png")))  # the page embeds the PNGs (SVG, PDF beside)
    assert dom.tables == 3  # the training table of the one CPU model, and a provenance table per framework
    assert len(dom.images) == plots > 0
    assert all(src.startswith("data:image/png;base64,") for src in dom.images)
    assert dom.body.get("data-decoded-images") == str(plots)


WINDOW = (1280, 900)  # a laptop's browser window, in CSS pixels
# Once the page has loaded: how far it scrolls sideways, and every pair of text boxes that overlap (more than a
# shared 1-pixel border) among headings, paragraphs, list items, table cells and captions.
LAYOUT_PROBE = """<script>window.addEventListener("load", () => {
  const root = document.documentElement, d = document.body.dataset;
  d.decodedImages = [...document.images].filter(i => i.complete && i.naturalWidth > 0).length;
  d.sideways = root.scrollWidth - root.clientWidth;
  d.tablesPastTheEdge = [...document.querySelectorAll("table")]
    .filter(t => t.getBoundingClientRect().right > root.clientWidth).length;
  const texts = [...document.querySelectorAll("h1, h2, h3, p, li, th, td, figcaption, img")]
    .map(e => [e, e.getBoundingClientRect()]).filter(([e, r]) => r.width > 0 && r.height > 0);
  const overlaps = [];
  for (let i = 0; i < texts.length; i++) for (let j = i + 1; j < texts.length; j++) {
    const [a, p] = texts[i], [b, q] = texts[j];
    const w = Math.min(p.right, q.right) - Math.max(p.left, q.left);
    const h = Math.min(p.bottom, q.bottom) - Math.max(p.top, q.top);
    if (w > 1.5 && h > 1.5 && !a.contains(b) && !b.contains(a))
      overlaps.push(a.tagName + ":" + a.textContent.slice(0, 30) + " / " + b.tagName + ":" + b.textContent.slice(0, 30));
  }
  d.overlaps = overlaps.join(" | ");
  d.texts = texts.length;
  const verdict = document.querySelector(".verdicts li");
  d.firstVerdictBottom = verdict ? verdict.getBoundingClientRect().bottom : -1;
});</script>"""


def browse(chromium: str, page: Path, profile: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--hide-scrollbars",
                           f"--window-size={WINDOW[0]},{WINDOW[1]}", *args, page.as_uri()],
                          capture_output=True, text=True, timeout=120, check=False)


def screenshot(chromium: str, page: Path, png: Path, height: int = 1800) -> Path:
    """A PNG of the page's top `height` pixels in a window WINDOW[0] wide, as a person first sees it."""
    profile = png.parent / f".{png.stem}-profile"
    proc = subprocess.run([chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--hide-scrollbars",
                           f"--window-size={WINDOW[0]},{height}", f"--screenshot={png}", page.as_uri()],
                          capture_output=True, text=True, timeout=120, check=False)
    shutil.rmtree(profile, ignore_errors=True)
    assert proc.returncode == 0 and png.is_file(), proc.stderr[-2000:]
    return png


def png_size(png: Path) -> tuple[int, int]:
    width, height = struct.unpack(">II", png.read_bytes()[16:24])  # the IHDR chunk, right after the signature
    return width, height


def write_gpu_cell(root: Path, framework: str, use_case: int, batch: int, metrics: dict, model: str) -> None:
    """One task's result as a backend writes it, with provenance as long as a GPU node's."""
    from bench_contract.results import ResultRows

    versions = ('{"jax": "0.4.30", "jaxlib": "0.4.30", "flax": "0.8.5", "optax": "0.2.3", "numpy": "1.26.4", '
                '"cuda": "12.4", "cudnn": "9.1.0", "nccl": "2.21.5"}')
    details = ('{"gpus": [{"name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-4b1c2d3e-5f60-7182-93a4-b5c6d7e8f901", '
               '"pci_bus_id": "00000000:18:00.0", "memory_total": 85520809984, "mig_mode": "disabled"}], '
               '"driver_version": "550.54.15", "cpu": {"model": "Intel(R) Xeon(R) Platinum 8480+", "logical": 224}}')
    ctx = result_context(framework=framework, benchmark="imagenet", use_case=use_case, model=model,
                         batch_size=batch, precision="fp32", device_model="NVIDIA H100 80GB HBM3",
                         cell_id=f"{framework}-{model}-uc{use_case}-{batch}", campaign="imagenet-uc1-20261124",
                         library_versions=versions, device_details=details, hostname="gpu-node-017",
                         environment_variables='{"XLA_PYTHON_CLIENT_PREALLOCATE": "false", "NCCL_DEBUG": "WARN"}')
    rows = ResultRows(ctx)
    for name, value in metrics.items():
        if value is None:  # not measured, as eager PyTorch's compile time
            rows.add_unavailable(name, "s", "eager mode: no compile step")
        else:
            rows.add(name, value, "")
    for epoch in range(3):
        rows.add("val_accuracy", 0.5 + 0.1 * epoch, "fraction", epoch=epoch)
        rows.add("epoch_time", 120.0, "s", epoch=epoch)
        rows.add("train_loss", 2.0 - 0.5 * epoch, "nats", epoch=epoch, step=epoch)
    rows.write(root / ctx["campaign"] / "rows" / framework / f"{ctx['cell_id']}.parquet")


def test_the_report_fits_the_window_with_no_text_over_text(chromium, tmp_path):
    """Every use case's table, the plots and the provenance in a window 1280 pixels wide: nothing scrolls
    sideways (the comparison table was 32 columns in a horizontal scroller), no two texts overlap, the first
    verdict is on the first screen, and the screenshot is taken."""
    for framework, speed in (("jax", 1234.5), ("torch", 987.6)):
        for use_case, batch, model in ((1, 256, "mobilenet_v3_small"), (1, 512, "mobilenet_v3_small"),
                                       (3, 64, "vit_b_16"), (5, 1, "efficientnet_b0"), (5, 128, "efficientnet_b0")):
            write_gpu_cell(tmp_path, framework, use_case, batch, {
                "throughput": speed * batch / 64, "step_time_p50": 51.8, "step_time_p95": 60.2,
                "step_time_p99": 75.9, "test_accuracy": 0.712, "compile_time": 12.5 if framework == "jax" else None,
                "per_sample_grads_vectorized_time_p50": 25.0, "per_sample_grads_loop_time_p50": 950.0,
                "vectorization_speedup": 38.0}, model)
    assert run_cli("collect", "--results-dir", str(tmp_path)).returncode == 0
    proc = run_cli("report", "--results-dir", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    page = tmp_path / "report" / "report.html"
    probe = tmp_path / "probe.html"
    probe.write_text(page.read_text().replace("</body>", LAYOUT_PROBE + "</body>"))
    loaded = browse(chromium, probe, tmp_path / "profile", "--dump-dom")
    assert loaded.returncode == 0, loaded.stderr[-2000:]
    dom = Page()
    dom.feed(loaded.stdout)
    assert int(dom.body["data-texts"]) > 100 and dom.tables >= 4  # the page was laid out and measured
    assert dom.body["data-sideways"] == "0" and dom.body["data-tables-past-the-edge"] == "0"
    assert dom.body["data-overlaps"] == ""
    # The page opens on the verdicts: the first is on the first screen, before any scrolling.
    assert 0 < float(dom.body["data-first-verdict-bottom"]) <= WINDOW[1]
    png = screenshot(chromium, page, tmp_path / "report.png")
    assert png_size(png) == (WINDOW[0], 1800)


if __name__ == "__main__":
    # Regenerate the README's screenshot from a real report: python tests/integration/test_report_browser.py
    # demo-results/report/report.html docs/report-screenshot.png
    screenshot(shutil.which("chromium"), Path(sys.argv[1]).resolve(), Path(sys.argv[2]).resolve())
