"""Lock files: every environment's packages, transitive ones included, pinned with their hashes.

Each environment has its requirements (the top-level pins a person edits) and a lock generated from them by
`make locks` (uv pip compile --generate-hashes), checked in. Environments are built from the lock alone, so two
sites building the same environment a month apart get the same packages. The lock's first line records the
fingerprint of the requirements it was generated from; a lock whose requirements changed since is refused.

Standard library only: the Makefile runs this module before the orchestrator's environment has its packages.

    python -m orchestrator.run.locks check LOCK ...   exit 1, with the command to run, when a lock is stale
    python -m orchestrator.run.locks write UV         regenerate every lock with that uv binary
"""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
from dataclasses import dataclass
from pathlib import Path

from orchestrator import PROJECT_ROOT
from orchestrator.errors import OrchestratorError

REGENERATE = "make locks"
FINGERPRINT_PREFIX = "# requirements sha256: "
# Every environment runs Python 3.11 on x86_64 Linux; the CUDA builds resolve the same way without a GPU here.
COMPILE_OPTIONS = ("--generate-hashes", "--python-version", "3.11", "--python-platform", "x86_64-manylinux_2_28",
                   "--no-header", "--quiet")


@dataclass(frozen=True)
class Lock:
    """One environment's lock and the requirements it is generated from (a requirements file or pyproject.toml)."""

    requirements: Path
    lock: Path

    def requirement_lines(self) -> list[str]:
        """What decides the lock: the requirement and option lines, not the comments or the rest of pyproject."""
        if self.requirements.name == "pyproject.toml":
            project = tomllib.loads(self.requirements.read_text())["project"]
            return [*project["dependencies"], *project["optional-dependencies"]["test"]]
        lines = (line.split("#", 1)[0].strip() for line in self.requirements.read_text().splitlines())
        return [line for line in lines if line]

    def fingerprint(self) -> str:
        return hashlib.sha256("\n".join(self.requirement_lines()).encode()).hexdigest()

    def recorded_fingerprint(self) -> str | None:
        with self.lock.open() as lines:
            first = lines.readline().strip()
        return first.removeprefix(FINGERPRINT_PREFIX) if first.startswith(FINGERPRINT_PREFIX) else None

    def check(self) -> None:
        """Refuse a lock that is missing or was generated from other requirements, naming the command to run."""
        if not self.lock.is_file():
            raise OrchestratorError(f"lock file {self.lock} is missing; generate it with `{REGENERATE}`")
        if self.recorded_fingerprint() != self.fingerprint():
            raise OrchestratorError(f"lock file {self.lock} no longer matches {self.requirements}: regenerate it with "
                                    f"`{REGENERATE}` and commit it")

    def pins(self) -> list[tuple[str, str]]:
        """(name, version) of every package the lock pins: its `name==version \\` lines."""
        found = (re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s\\;]+)", line) for line in self.lock.read_text().splitlines())
        return [(m.group(1), m.group(2)) for m in found if m]

    def packages_sha256(self) -> str:
        """What the rows of an environment built from this lock record as packages_sha256."""
        # Imported here: `make setup` runs this module's `check` in a bare venv, before pyarrow is there.
        from bench_contract.measure.device import packages_sha256

        return packages_sha256(self.pins())

    def compile_command(self, uv: str, output: Path) -> list[str]:
        extras = ["--extra", "test"] if self.requirements.name == "pyproject.toml" else []
        return [uv, "pip", "compile", *COMPILE_OPTIONS, *extras, "--output-file", str(output), str(self.requirements)]

    def write(self, uv: str) -> None:
        """Resolve the requirements with uv and write the lock, its fingerprint first. uv keeps the versions the
        current lock pins wherever the requirements still allow them (it reads its output file as preferences),
        so a changed pin changes what it needs to, not every package that had a release since."""
        with tempfile.TemporaryDirectory() as tmp:
            output = Path(tmp) / self.lock.name
            if self.lock.is_file():
                shutil.copyfile(self.lock, output)
            proc = subprocess.run(self.compile_command(uv, output), capture_output=True, text=True, check=False)
            if proc.returncode != 0:
                raise OrchestratorError(f"uv could not resolve {self.requirements} (exit {proc.returncode}):\n"
                                        + proc.stderr.strip())
            pins = "".join(line for line in output.read_text().splitlines(keepends=True) if not line.startswith("#"))
        header = (f"{FINGERPRINT_PREFIX}{self.fingerprint()}\n"
                  f"# Every package of the environment, pinned with its hashes: generated from "
                  f"{self.requirements.name} by `{REGENERATE}`; do not edit.\n")
        self.lock.write_text(header + pins)


ORCHESTRATOR = Lock(PROJECT_ROOT / "pyproject.toml", PROJECT_ROOT / "requirements-orchestrator.lock")
JAX = {recipe: Lock(PROJECT_ROOT / "jax_backend" / f"requirements-{recipe}.txt",
                    PROJECT_ROOT / "jax_backend" / f"requirements-{recipe}.lock")
       for recipe in ("cpu", "cuda12", "cuda13")}
TORCH = Lock(PROJECT_ROOT / "torch_backend" / "requirements.txt", PROJECT_ROOT / "torch_backend" / "requirements.lock")
EVERY_LOCK = (ORCHESTRATOR, *JAX.values(), TORCH)


def by_lock_path(path: str) -> Lock:
    for lock in EVERY_LOCK:
        if lock.lock == Path(path).resolve():
            return lock
    raise OrchestratorError(f"{path} is not one of the lock files: {', '.join(str(x.lock) for x in EVERY_LOCK)}")


def main(argv: list[str]) -> int:
    try:
        if len(argv) >= 2 and argv[0] == "check":
            for path in argv[1:]:
                by_lock_path(path).check()
        elif len(argv) == 2 and argv[0] == "write":
            for lock in EVERY_LOCK:
                print(f"locking {lock.requirements.relative_to(PROJECT_ROOT)} -> {lock.lock.relative_to(PROJECT_ROOT)}")
                lock.write(argv[1])
        else:
            print("usage: python -m orchestrator.run.locks check LOCK ... | write UV", file=sys.stderr)
            return 2
    except OrchestratorError as exc:
        print(exc, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
