"""`main.py data fetch`: download a data set's canonical files, check them against their published checksums and
unpack them into the layout the readers expect (bench_contract.data.datasets).

Nothing half-done is left behind: every file is downloaded under a temporary name and published only once its
checksum matches; an archive is unpacked into a temporary folder and moved into place whole. A partial or corrupt
download is removed, and the error names it and what each mirror answered. Files already there with the right
checksum are kept, so a fetch that failed half-way resumes where it stopped.
"""

from __future__ import annotations

import hashlib
import http.client
import os
import shutil
import tarfile
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bench_contract.atomic import publish, temporary_name
from bench_contract.data.datasets import MNIST_FILES, missing_cifar10_files, missing_mnist_files
from orchestrator.errors import OrchestratorError, UsageError, oserror_reason
from orchestrator.suggest import command

CHUNK = 1 << 20
TIMEOUT_S = 60.0  # per network operation: a silent server is a failed mirror, not a hang


@dataclass(frozen=True)
class RemoteFile:
    name: str
    md5: str  # the checksum the data set's publishers give (MD5 is what MNIST's and CIFAR-10's mirrors publish)


@dataclass(frozen=True)
class Source:
    files: tuple[RemoteFile, ...]
    mirrors: tuple[str, ...]  # base URLs, tried in order after the user's own
    archive_folder: str | None = None  # the folder an archive unpacks to; None: the files are used as downloaded
    missing: Callable[[Path], list[str]] = lambda folder: []  # what the reader would still miss in a data directory


# The readers take MNIST's gzipped IDX files as they are, and CIFAR-10's python batches from the folder its archive
# unpacks to. Checksums and mirrors as torchvision publishes them (torchvision.datasets.MNIST and CIFAR10).
SOURCES = {
    "mnist": Source(
        files=(RemoteFile(f"{MNIST_FILES['train_images']}.gz", "f68b3c2dcbeaaa9fbdd348bbdeb94873"),
               RemoteFile(f"{MNIST_FILES['train_labels']}.gz", "d53e105ee54ea40749a09fcbcd1e9432"),
               RemoteFile(f"{MNIST_FILES['test_images']}.gz", "9fb629c4189551a2d022fa330f9573f3"),
               RemoteFile(f"{MNIST_FILES['test_labels']}.gz", "ec29112dd5afa0611ce80d1b7f02629c")),
        mirrors=("https://ossci-datasets.s3.amazonaws.com/mnist/", "http://yann.lecun.com/exdb/mnist/"),
        missing=missing_mnist_files,
    ),
    "cifar10": Source(
        files=(RemoteFile("cifar-10-python.tar.gz", "c58f30108f718f92721af3b95e74349a"),),
        mirrors=("https://www.cs.toronto.edu/~kriz/",),
        archive_folder="cifar-10-batches-py",
        missing=missing_cifar10_files,
    ),
}


class FetchFailed(Exception):
    """One mirror's failure for one file, in words."""


def fetch_hint(benchmark: str, data_dir) -> str:
    """The command that fetches the data into `data_dir` (it makes the folder), for the benchmarks `data fetch`
    knows; "" for the others."""
    if benchmark not in SOURCES:
        return ""
    return f"; fetch it with: {command('data fetch', benchmark, '--data-dir', str(data_dir))}"


def fetch(benchmark: str, data_dir: str | os.PathLike[str], mirrors: tuple[str, ...] = (),
          report: Callable[[str], None] = print, timeout_s: float = TIMEOUT_S) -> Path:
    """Fetch the benchmark's data into data_dir (created if needed); return the folder the readers take."""
    source = source_of(benchmark)
    root = Path(data_dir)
    make_folder(root)
    if not source.missing(root):
        report(f"{benchmark}: {root} already holds every file the reader needs; nothing to fetch")
        return root
    check_no_partial_folder(source, root)
    for remote in source.files:
        path = root / remote.name
        if path.is_file() and md5_of(path) == remote.md5:
            report(f"{remote.name}: already there, checksum matches")
            continue
        if path.exists():
            raise OrchestratorError(f"{path} exists but is not the published {remote.name} (its MD5 differs from "
                                    f"{remote.md5}); move it away and fetch again")
        download(remote, path, (*mirrors, *source.mirrors), report, timeout_s)
    if source.archive_folder:
        for remote in source.files:
            unpack(root / remote.name, root, source.archive_folder, source.missing, report)
    return root


def make_folder(root: Path) -> None:
    """The folder the files go to, made where missing. A file in its place (or above it), or a place that cannot
    be written, is bad input: one sentence naming --data-dir, not a traceback."""
    try:
        root.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise UsageError(f"--data-dir {root} is a file, not a folder; give a folder (a missing one is made)") from None
    except OSError as exc:
        raise UsageError(f"--data-dir {root} cannot be made: {oserror_reason(exc)}; give a folder that can be "
                         "written") from None


def source_of(benchmark: str) -> Source:
    if benchmark not in SOURCES:
        raise UsageError(f"cannot fetch {benchmark!r}: `data fetch` knows {' and '.join(SOURCES)} (digits ships with "
                         "scikit-learn; imagenet, nlp and gnn data come from your site)")
    return SOURCES[benchmark]


def check_no_partial_folder(source: Source, root: Path) -> None:
    """An unpacked folder that is there but incomplete is the user's: refuse rather than overwrite it."""
    if source.archive_folder and (root / source.archive_folder).exists():
        raise OrchestratorError(f"{root / source.archive_folder} exists but lacks "
                                f"{', '.join(source.missing(root))}; move it away and fetch again")


def download(remote: RemoteFile, path: Path, mirrors: tuple[str, ...], report: Callable[[str], None],
             timeout_s: float) -> None:
    """Try each mirror until one serves the file with the published checksum; raise naming every failure."""
    failures = []
    for mirror in mirrors:
        url = f"{mirror.rstrip('/')}/{remote.name}"
        report(f"{remote.name}: fetching {url}")
        try:
            publish(path, lambda tmp, url=url: download_verified(url, remote.md5, tmp, timeout_s))
            report(f"{remote.name}: {path.stat().st_size / 2**20:.1f} MiB, MD5 matches the published {remote.md5}")
            return
        except FetchFailed as exc:  # the partial download was removed by publish
            failures.append(f"{url}: {exc}")
            report(f"{remote.name}: {exc}; the partial download was removed")
    raise OrchestratorError(f"could not fetch {remote.name} (nothing of it kept): {'; '.join(failures)}")


def download_verified(url: str, md5: str, tmp: Path, timeout_s: float) -> None:
    """Stream url into tmp; raise FetchFailed if the transfer stops short or the checksum differs."""
    digest, received = hashlib.md5(), 0
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response, open(tmp, "wb") as out:
            expected = promised_length(response)
            while chunk := response.read(CHUNK):
                out.write(chunk)
                digest.update(chunk)
                received += len(chunk)
    except urllib.error.HTTPError as exc:
        raise FetchFailed(f"HTTP {exc.code} {exc.reason}") from None
    except urllib.error.URLError as exc:
        raise FetchFailed(f"cannot connect ({exc.reason})") from None
    except http.client.IncompleteRead as exc:
        raise FetchFailed(f"the connection dropped after {received + len(exc.partial)} bytes") from None
    except (OSError, http.client.HTTPException) as exc:  # reset, timeout, a disk that is full
        raise FetchFailed(f"the transfer failed after {received} bytes ({exc or type(exc).__name__})") from None
    if expected is not None and received < expected:
        raise FetchFailed(f"the connection dropped after {received} of {expected} bytes")
    if digest.hexdigest() != md5:
        raise FetchFailed(f"MD5 {digest.hexdigest()} differs from the published {md5} (corrupt or not the file)")


def promised_length(response) -> int | None:
    """The bytes the answer promises, from its Content-Length header (None where there is none). urllib's answer
    for an http(s) URL also has it as `length`; its answer for a file:// URL (an archive staged on a shared file
    system for nodes without internet) has only the header."""
    value = response.headers.get("Content-Length")
    return int(value) if value and value.isdigit() else None


def unpack(archive: Path, root: Path, folder: str, missing: Callable[[Path], list[str]],
           report: Callable[[str], None]) -> None:
    """Unpack into a temporary folder beside the target, check it holds what the reader needs, move it into place,
    then remove the archive."""
    staging = temporary_name(root / folder)
    try:
        with tarfile.open(archive) as tar:
            tar.extractall(staging, filter="data")  # no absolute paths, links out of the folder or device files
        lacking = missing(staging)
        if lacking:
            raise OrchestratorError(f"{archive.name} unpacked without {', '.join(lacking)}; nothing was moved into "
                                    f"{root} and the archive was removed")
        os.replace(staging / folder, root / folder)
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise OrchestratorError(f"cannot unpack {archive} ({exc}); nothing was moved into {root} and the archive "
                                "was removed") from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        archive.unlink(missing_ok=True)  # unpacked, or not worth keeping: fetching again downloads it afresh
    report(f"unpacked {archive.name} into {root / folder}")


def md5_of(path: Path) -> str:
    digest = hashlib.md5()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()
