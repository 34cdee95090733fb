"""`data fetch` and `data check` against a real HTTP server on 127.0.0.1 (our machines have no internet): small
files in the real formats, with checksums the test computes; a wrong checksum, a corrupt archive and a dropped
connection each end with one clear error and no partial data."""

from __future__ import annotations

import gzip
import hashlib
import io
import pickle
import struct
import tarfile
import threading
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest
from helpers import run_cli

from bench_contract.data.datasets import CIFAR10_TEST_BATCH, CIFAR10_TRAIN_BATCHES
from orchestrator.data import check, fetch
from orchestrator.errors import OrchestratorError, UsageError


def idx_bytes(array: np.ndarray) -> bytes:
    header = struct.pack(">HBB", 0, 0x08, array.ndim) + struct.pack(f">{array.ndim}I", *array.shape)
    return gzip.compress(header + array.astype(np.uint8).tobytes())


def mnist_files(n_train: int = 6, n_test: int = 4) -> dict[str, bytes]:
    rng = np.random.default_rng(0)
    arrays = {"train_images": rng.integers(0, 256, (n_train, 28, 28)), "train_labels": rng.integers(0, 10, n_train),
              "test_images": rng.integers(0, 256, (n_test, 28, 28)), "test_labels": rng.integers(0, 10, n_test)}
    return {f"{fetch.MNIST_FILES[key]}.gz": idx_bytes(array) for key, array in arrays.items()}


def cifar_archive(batches: tuple[str, ...] = (*CIFAR10_TRAIN_BATCHES, CIFAR10_TEST_BATCH)) -> bytes:
    rng = np.random.default_rng(1)
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        for name in batches:
            body = pickle.dumps({b"data": rng.integers(0, 256, (3, 3072)).astype(np.uint8), b"labels": [0, 1, 2]},
                                protocol=2)
            info = tarfile.TarInfo(f"cifar-10-batches-py/{name}")
            info.size = len(body)
            tar.addfile(info, io.BytesIO(body))
    return out.getvalue()


def md5(data: bytes) -> str:
    return hashlib.md5(data).hexdigest()


class Server:
    """Serves `files` under /good/; under /drop/ it promises the whole length and closes after a tenth of it."""

    def __init__(self, files: dict[str, bytes]):
        self.files, self.requests = files, []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                server.requests.append(self.path)
                kind, _, name = self.path.strip("/").partition("/")
                if kind not in ("good", "drop") or name not in server.files:
                    self.send_error(404)
                    return
                body = server.files[name]
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body[: len(body) // 10] if kind == "drop" else body)
                self.close_connection = True

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def http_server():
    servers = []

    def start(files):
        servers.append(Server(files))
        return servers[-1]

    yield start
    for s in servers:
        s.close()


def with_checksums(monkeypatch, benchmark: str, files: dict[str, bytes], mirrors: tuple[str, ...] = ()):
    """The catalog's source, with the checksums of the test's files and no internet mirror."""
    source = fetch.SOURCES[benchmark]
    remote = tuple(fetch.RemoteFile(name, md5(files[name])) for name in (f.name for f in source.files))
    monkeypatch.setitem(fetch.SOURCES, benchmark, replace(source, files=remote, mirrors=mirrors))


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.rglob("*"))


def test_mnist_is_fetched_verified_and_readable(http_server, monkeypatch, tmp_path):
    files = mnist_files()
    server = http_server(files)
    with_checksums(monkeypatch, "mnist", files, mirrors=(f"{server.url}/good",))
    fetch.fetch("mnist", tmp_path / "mnist", report=lambda line: None)
    assert leftovers(tmp_path / "mnist") == sorted(files)
    found = check.check("mnist", tmp_path / "mnist")
    assert found.problems == [] and found.facts == ["train: 6 images", "test: 4 images"]


def test_cifar10_is_unpacked_into_the_readers_layout_and_the_archive_removed(http_server, monkeypatch, tmp_path):
    files = {"cifar-10-python.tar.gz": cifar_archive()}
    server = http_server(files)
    with_checksums(monkeypatch, "cifar10", files, mirrors=(f"{server.url}/good",))
    fetch.fetch("cifar10", tmp_path, report=lambda line: None)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cifar-10-batches-py"]
    assert check.check("cifar10", tmp_path).problems == []


def test_a_mirror_on_a_shared_file_system_is_read_as_file_url(monkeypatch, tmp_path):
    """Compute nodes without internet: the archive staged on a shared file system, given as a file:// mirror.
    urllib's answer for a file has no `length`; the transfer is checked by its Content-Length header alike."""
    files = {"cifar-10-python.tar.gz": cifar_archive()}
    staged = tmp_path / "staged"
    staged.mkdir()
    (staged / "cifar-10-python.tar.gz").write_bytes(files["cifar-10-python.tar.gz"])
    with_checksums(monkeypatch, "cifar10", files)
    fetch.fetch("cifar10", tmp_path / "data", mirrors=(staged.as_uri(),), report=lambda line: None)
    assert check.check("cifar10", tmp_path / "data").problems == []


def test_the_published_checksum_refuses_other_bytes_and_keeps_nothing(http_server, tmp_path):
    """The real catalog's MD5s against the test's small files: every mirror fails, nothing is left."""
    server = http_server(mnist_files())
    with pytest.raises(OrchestratorError, match=r"could not fetch train-images-idx3-ubyte.gz \(nothing of it kept\)"
                                                r".*differs from the published f68b3c2dcbeaaa9fbdd348bbdeb94873"):
        fetch.fetch("mnist", tmp_path, mirrors=(f"{server.url}/good",), report=lambda line: None)
    assert leftovers(tmp_path) == []


def test_a_dropped_connection_is_named_removed_and_the_next_mirror_used(http_server, monkeypatch, tmp_path):
    files = mnist_files()
    server = http_server(files)
    with_checksums(monkeypatch, "mnist", files, mirrors=(f"{server.url}/drop",))
    with pytest.raises(OrchestratorError, match=r"/drop/train-images-idx3-ubyte.gz: the connection dropped after"):
        fetch.fetch("mnist", tmp_path, report=lambda line: None)
    assert leftovers(tmp_path) == []
    with pytest.raises(OrchestratorError, match=r"/missing/train-images-idx3-ubyte.gz: HTTP 404 .*/drop/"):
        fetch.fetch("mnist", tmp_path, mirrors=(f"{server.url}/missing",), report=lambda line: None)
    assert leftovers(tmp_path) == [], "a mirror that answers 404 and one that drops leave nothing"
    lines = []
    fetch.fetch("mnist", tmp_path, mirrors=(f"{server.url}/drop", f"{server.url}/good"), report=lines.append)
    assert leftovers(tmp_path) == sorted(files)
    assert any("connection dropped" in line and "partial download was removed" in line for line in lines)


def test_a_corrupt_archive_leaves_no_folder_and_no_archive(http_server, monkeypatch, tmp_path):
    truncated = cifar_archive()[:-200]
    files = {"cifar-10-python.tar.gz": truncated}
    server = http_server(files)
    with_checksums(monkeypatch, "cifar10", files, mirrors=(f"{server.url}/good",))
    with pytest.raises(OrchestratorError, match="cannot unpack .*nothing was moved into"):
        fetch.fetch("cifar10", tmp_path, report=lambda line: None)
    assert leftovers(tmp_path) == []


def test_an_archive_without_the_readers_files_is_refused(http_server, monkeypatch, tmp_path):
    files = {"cifar-10-python.tar.gz": cifar_archive(("data_batch_1", "test_batch"))}
    server = http_server(files)
    with_checksums(monkeypatch, "cifar10", files, mirrors=(f"{server.url}/good",))
    with pytest.raises(OrchestratorError, match="unpacked without data_batch_2, data_batch_3"):
        fetch.fetch("cifar10", tmp_path, report=lambda line: None)
    assert leftovers(tmp_path) == []


def test_verified_files_are_kept_and_a_foreign_file_is_never_overwritten(http_server, monkeypatch, tmp_path):
    files = mnist_files()
    server = http_server(files)
    with_checksums(monkeypatch, "mnist", files, mirrors=(f"{server.url}/good",))
    first = min(files)
    (tmp_path / first).write_bytes(files[first])
    fetch.fetch("mnist", tmp_path, report=lambda line: None)
    assert f"/good/{first}" not in server.requests, "a file already there with the right checksum is not fetched"
    assert len(server.requests) == 3
    (tmp_path / first).write_bytes(b"the user's own file")
    (tmp_path / sorted(files)[1]).unlink()
    with pytest.raises(OrchestratorError, match=f"{first} exists but is not the published"):
        fetch.fetch("mnist", tmp_path, report=lambda line: None)
    assert (tmp_path / first).read_bytes() == b"the user's own file"


def test_only_fetchable_data_sets_are_fetched(tmp_path):
    with pytest.raises(UsageError, match="cannot fetch 'imagenet': `data fetch` knows mnist and cifar10"):
        fetch.fetch("imagenet", tmp_path)


# --- data check ---------------------------------------------------------------------------------------------


def test_check_names_each_problem_of_an_mnist_folder(tmp_path):
    files = mnist_files()
    for name, body in files.items():
        (tmp_path / name).write_bytes(body)
    (tmp_path / "t10k-labels-idx1-ubyte.gz").write_bytes(idx_bytes(np.zeros(3)))  # 4 test images, 3 labels
    (tmp_path / "train-labels-idx1-ubyte.gz").unlink()
    found = check.check("mnist", tmp_path)
    assert found.problems == [f"MNIST file train-labels-idx1-ubyte[.gz] not found in {tmp_path}",
                              "MNIST test split: 4 images but 3 labels"]


def test_check_finds_unreadable_images_empty_classes_and_split_mismatch(tmp_path):
    from PIL import Image

    for split, classes in (("train", ("cat", "dog")), ("val", ("cat", "emu"))):
        for name in classes:
            (tmp_path / split / name).mkdir(parents=True)
            Image.new("RGB", (8, 8)).save(tmp_path / split / name / "a.jpeg")
    (tmp_path / "train" / "dog" / "b.jpeg").write_bytes(b"not a jpeg")
    (tmp_path / "val" / "owl").mkdir()
    found = check.check("imagenet", tmp_path)
    assert f"{tmp_path / 'val' / 'owl'}: no images" in found.problems
    assert any(p.startswith(f"{tmp_path / 'train' / 'dog' / 'b.jpeg'}: unreadable image") for p in found.problems)
    assert any("train/ and val/ name different classes" in p for p in found.problems)
    assert "train: 2 classes, 3 images (1 to 2 per class)" in found.facts


def test_check_of_text_and_graph_data(tmp_path):
    (tmp_path / "train.tsv").write_text("pos\tgood\nneg\tbad\n")
    (tmp_path / "test.tsv").write_text("pos\tfine\nmeh\tso so\nno tab here\n")
    assert check.check("nlp", tmp_path).problems == [f"{tmp_path / 'test.tsv'} line 3 is not `<label>\\t<text>`"]
    (tmp_path / "graph.npz").write_bytes(b"not an npz")
    assert check.check("gnn", tmp_path).problems[0].startswith(f"{tmp_path / 'graph.npz'}: unreadable")
    assert check.check("digits", tmp_path).problems == []


# --- the commands ---------------------------------------------------------------------------------------------


def test_fetch_command_refuses_a_mirror_serving_other_bytes_in_one_sentence(http_server, tmp_path):
    server = http_server(mnist_files())
    proc = run_cli("data", "fetch", "mnist", "--data-dir", str(tmp_path / "d"), "--mirror", f"{server.url}/good")
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert proc.returncode == 1 and len(errors) == 1 and "differs from the published" in errors[0]
    assert leftovers(tmp_path / "d") == []


def test_the_profiles_mirrors_are_tried_and_checked(http_server, tmp_path):
    server = http_server(mnist_files())
    profile = tmp_path / "site.toml"
    profile.write_text(f'[data_mirrors]\nmnist = ["{server.url}/good/"]\n')
    proc = run_cli("data", "fetch", "mnist", "--data-dir", str(tmp_path / "d"), "--profile", str(profile))
    assert f"fetching {server.url}/good/train-images-idx3-ubyte.gz" in proc.stderr
    profile.write_text('[data_mirrors]\nimagenet = ["https://example.org/"]\n')
    proc = run_cli("data", "fetch", "mnist", "--data-dir", str(tmp_path / "d"), "--profile", str(profile))
    assert proc.returncode == 2 and "'imagenet' is not a data set `data fetch` knows" in proc.stderr
    profile.write_text('[data_mirrors]\nmnist = ["ftp://example.org/"]\n')
    proc = run_cli("data", "fetch", "mnist", "--data-dir", str(tmp_path / "d"), "--profile", str(profile))
    assert proc.returncode == 2 and "is not an http(s):// or file:// base URL" in proc.stderr


def test_check_command_exits_1_on_problems_and_0_on_good_data(tmp_path):
    for name, body in mnist_files().items():
        (tmp_path / name).write_bytes(body)
    proc = run_cli("data", "check", "mnist", "--data-dir", str(tmp_path))
    assert proc.returncode == 0 and proc.stdout.splitlines()[-1] == f"mnist data in {tmp_path}: ok"
    (tmp_path / "t10k-images-idx3-ubyte.gz").write_bytes(b"\x1f\x8b broken")
    proc = run_cli("data", "check", "mnist", "--data-dir", str(tmp_path))
    assert proc.returncode == 1 and proc.stdout.startswith("problem: t10k-images-idx3-ubyte: unreadable")
    assert run_cli("data", "check", "nosuch", "--data-dir", str(tmp_path)).returncode == 2


def test_a_run_without_its_data_names_the_fetch_command(tmp_path):
    proc = run_cli("--benchmark", "cifar10", "--use-case", "1", "--executor", "local",
                   "--results-dir", str(tmp_path / "r"), "--scripts-dir", str(tmp_path / "s"))
    assert proc.returncode == 2
    assert "fetch it with: python main.py data fetch cifar10 --data-dir DIR" in proc.stderr
    assert not (tmp_path / "r").exists()
