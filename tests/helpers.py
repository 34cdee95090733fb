"""Helpers shared by the test layers: run the real CLI in a subprocess, find the framework environments."""

from __future__ import annotations

import gzip
import json
import os
import re
import shlex
import signal
import struct
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

REPO_ROOT = Path(__file__).resolve().parents[1]
MAIN_PY = REPO_ROOT / "main.py"
ENVS = {fw: REPO_ROOT / ".envs" / fw for fw in ("jax", "torch")}
# The repeated measurements of a run, made brief: 5 timed repeats and no minimum duration, where a campaign's
# defaults are 50 and 1 s. With the defaults, the per-example loop alone of a DP-SGD cell took 43 s of its 61 s
# (PyTorch, MNIST MLP, batch 32) and the pipelined throughput 7 of JAX's 24 s. Tests that check what a run records
# and computes take these; the timing rules have tests of their own (tests/unit/test_vectorization_batch.py,
# test_timing_stats.py), and the user's example on the cluster keeps the defaults (test_users_example.py).
BRIEF_TIMING = {"timed_steps": 5, "min_duration_s": 0.0}
BRIEF_TIMING_ARGS = ("--timed-steps", "5", "--min-duration", "0")  # the same, as the command line takes them


def run_cli(*args: str, env: dict | None = None, timeout: float = 600, cwd: Path | None = None):
    """`python main.py ARGS` with the orchestrator's interpreter, as a user would type it: a new process with these
    arguments, environment (this process's by default) and working folder, its output captured."""
    env = env if env is not None else dict(os.environ)
    return run_fresh(Path(sys.executable), [str(MAIN_PY), *args], env, Path(cwd or REPO_ROOT), timeout)


def dry_run(tmp_path: Path, *args: str, env: dict | None = None):
    """`python main.py --dry-run ARGS` (run_cli), its results in tmp_path/r and its scripts in tmp_path/s unless ARGS
    say otherwise."""
    return run_cli("--dry-run", "--results-dir", str(tmp_path / "r"), "--scripts-dir", str(tmp_path / "s"), *args,
                   env=env)


def run_in_env(framework: str, *argv: str, env: dict | None = None, timeout: float = 600,
               cwd: Path = REPO_ROOT) -> subprocess.CompletedProcess:
    """`python ARGV` (a script, `-m MODULE` or `-c CODE`) in a new process of the framework's interpreter, our
    repository importable, output captured; `env` adds to this process's environment."""
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), **(env or {})}
    return run_fresh(env_python(framework), list(argv), env, cwd, timeout)


def probe_arrays(framework: str, probe: str, out: Path, *args: str, timeout: float = 600) -> dict[str, np.ndarray]:
    """Run tests/backends/PROBE with `framework`'s interpreter (run_in_env) and ARGS, which name `out`, and return the
    arrays it saved there (np.savez): a probe's results, compared across frameworks by the test."""
    proc = run_in_env(framework, str(REPO_ROOT / "tests" / "backends" / probe), *args, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-3000:]
    with np.load(out) as f:
        return {k: f[k] for k in f.files}


def run_fresh(python: Path, argv: list[str], env: dict, cwd: Path, timeout: float) -> subprocess.CompletedProcess:
    """`python ARGV` in a new interpreter, output captured."""
    return subprocess.run([str(python), *argv], capture_output=True, text=True, timeout=timeout, cwd=cwd, env=env,
                          stdin=subprocess.DEVNULL)


def wait_until(condition: Callable[[], object], proc: subprocess.Popen | None = None, seconds: float = 120,
               what: str = "the condition", poll_s: float = 0.05):
    """Poll until `condition()` is true, and return its value. Tests order processes by what they see happen, never
    by a sleep: a loaded machine stretches a process's start past any sleep (in one CI run a second collect started
    after the first had finished). Fails, with the process's output, when `proc` ends first or after `seconds`
    (then killed, so that reading its output cannot hang)."""
    until = time.monotonic() + seconds
    while not (value := condition()):
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"{what}: the process ended first (exit {proc.returncode}): {proc.communicate()}")
        if time.monotonic() >= until:
            if proc is not None:
                proc.kill()
            raise AssertionError(f"{what} did not happen within {seconds:.0f} s: {proc and proc.communicate()}")
        time.sleep(poll_s)
    return value


def shell_wait_for(path: Path, seconds: int = 120) -> str:
    """A bash line that waits until `path` exists (at most `seconds`): a fake tool held until the test says go."""
    return f'for _ in $(seq {seconds * 20}); do [ -e "{path}" ] && break; sleep 0.05; done\n'


def driver_passthrough() -> str:
    """A bash line for a stand-in environment's `python` (a shell script): it hands the paired job's driver
    (bench_contract.run.driver, which needs Python and the contract only) to this real interpreter, so that the
    stand-in stands in for the backends alone."""
    return f'if [ "${{2:-}}" = bench_contract.run.driver ]; then exec {shlex.quote(sys.executable)} "$@"; fi\n'


def default_signals() -> None:
    """For Popen's preexec_fn: the child starts with SIGINT, SIGTERM and SIGHUP at their default actions, as from a
    login shell, whatever this test run inherited (under nohup SIGHUP is ignored, in a background job SIGINT;
    a command keeps such a disposition, orchestrator.signals)."""
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, signal.SIG_DFL)


def env_python(framework: str) -> Path:
    return ENVS[framework] / "bin" / "python"


def probe_json(framework: str, code: str, timeout: float = 600):
    """Run `code` in the framework's environment, from the repository root, and return the JSON its last line of
    output holds (a probe prints its findings as one JSON object); a probe that fails fails the test with its
    stderr."""
    proc = run_in_env(framework, "-c", code, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.splitlines()[-1])


def missing_envs() -> list[str]:
    return [fw for fw in ENVS if not env_python(fw).exists()]


def leave_out_heavy_unless_asked(config, items: list) -> None:
    """Deselect the tests marked heavy (a full-size model, many minutes) unless the -m expression names them
    (`make test-heavy`): a plain `pytest` or `make test` does not start a quarter-hour run by surprise. Called by
    tests/conftest.py when pytest has collected the tests."""
    if "heavy" in (config.option.markexpr or ""):
        return
    heavy = [item for item in items if item.get_closest_marker("heavy")]
    if heavy:
        config.hook.pytest_deselected(items=heavy)
        items[:] = [item for item in items if item not in heavy]


def write_idx(path: Path, array: np.ndarray) -> None:
    """Write an unsigned-byte IDX file (MNIST's format), gzipped when the name ends in .gz."""
    header = struct.pack(">HBB", 0, 0x08, array.ndim) + struct.pack(f">{array.ndim}I", *array.shape)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "wb") as f:
        f.write(header + array.astype(np.uint8).tobytes())


def write_mnist_folder(folder: Path, train: int, test: int) -> Path:
    """A folder with the four standard MNIST files, random pixels and labels, some gzipped, some not."""
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    write_idx(folder / "train-images-idx3-ubyte.gz", rng.integers(0, 256, (train, 28, 28)))
    write_idx(folder / "train-labels-idx1-ubyte", rng.integers(0, 10, (train,)))
    write_idx(folder / "t10k-images-idx3-ubyte", rng.integers(0, 256, (test, 28, 28)))
    write_idx(folder / "t10k-labels-idx1-ubyte.gz", rng.integers(0, 10, (test,)))
    return folder


def settings(use_case: int | None = None, **overrides):
    """A request's settings (orchestrator.plan.settings.RunSettings) as the planning tests take them: one epoch of
    256 synthetic examples, plain SGD at 0.01, seed 0, one warm-up step, the device left to the node; for use case 2
    or 4 (data parallel), two processes on one node. `overrides` replace any of these or set any other field."""
    from orchestrator.plan.settings import RunSettings

    values = {"epochs": 1, "learning_rate": 0.01, "optimizer": "sgd", "seed": 0, "warmup_steps": 1,
              "data_source": "synthetic", "data_dir": None, "synthetic_samples": 256, "device": "auto"}
    if use_case in (2, 4):
        values |= {"nodes": 1, "tasks_per_node": 2}
    return RunSettings(**(values | overrides))


def spec(framework: str = "jax", /, **overrides):
    """A cell's job spec (bench_contract.spec.JobSpec) as the tests of what a spec decides take it: `framework`'s
    digits MLP in use case 1, batch 32, fp32, cell `<framework>-x` of pair x in campaign c. `overrides` replace any
    of these (framework too) or set any other field."""
    from bench_contract.spec import JobSpec

    framework = overrides.pop("framework", framework)
    values = {"campaign": "c", "cell_id": f"{framework}-x", "pair_key": "x", "framework": framework,
              "benchmark": "digits", "use_case": 1, "model": "mlp", "batch_size": 32, "precision": "fp32"}
    return JobSpec(**(values | overrides))


def result_context(**values) -> dict:
    """A complete result context (every context column, empty or zero) with the given values."""
    from bench_contract.results import CONTEXT_FIELDS

    ctx = {f.name: "" if f.type == "string" else 0 for f in CONTEXT_FIELDS}
    ctx.update(schema_version=1, model_variant="full")
    ctx.update(values)
    return ctx


def cell_record(**values) -> dict:
    """A manifest's cell (orchestrator.plan.manifest.CellEntry) as JSON: its framework, array_index, cell_id and
    results from `values`, the rest as the first trial of digits' MLP in a one-framework script unless given."""
    return {"script": values["framework"], "system": "", "trial": 0, "pair_key": values["cell_id"], "model": "mlp",
            "batch_size": 32, "precision": "fp32", **values}


def manifest_record(folder: Path, cells: list[dict], **fields) -> dict:
    """A campaign's manifest as this version writes it (orchestrator.plan.manifest), as JSON, for a test's hand-made
    campaign: each cell needs its framework, array_index, cell_id and results (the rest as the first trial of
    digits' MLP in a one-framework script), one script per framework that its cells imply, and `fields` replace
    the rest (campaign: the folder's name; executor: local)."""
    from orchestrator.plan.manifest import VERSION

    cells = [cell_record(**c) for c in cells]
    scripts: dict[str, dict] = {}
    for cell in cells:
        name = f"{cell['script']}_digits_1.sh"
        script = scripts.setdefault(cell["script"], {
            "name": name, "path": name, "campaign_copy": str(folder / "scripts" / name), "sha256": "",
            "array_tasks": 0, "trials": 1, "system": cell["system"], "specs_files": {}})
        script["array_tasks"] = max(script["array_tasks"], cell["array_index"] + 1)
    return {"version": VERSION, "campaign": folder.name, "benchmark": "digits", "use_cases": [1],
            "created_at": "2026-01-01T00:00:00+00:00", "command": "python main.py --benchmark digits --use-case 1",
            "git_commit": "", "executor": "local", "profile": {}, "scripts": scripts, "cells": cells,
            "submissions": {}, **fields}


def write_manifest(folder: Path, cells: list[dict], **fields) -> Path:
    """manifest_record's manifest written as the campaign folder's manifest.json."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "manifest.json").write_text(json.dumps(manifest_record(folder, cells, **fields)))
    return folder / "manifest.json"


def read_manifest(results: Path) -> dict:
    """The manifest of the one campaign in a results folder, as JSON."""
    (path,) = results.glob("*/manifest.json")
    return json.loads(path.read_text())


def typed_manifest(folder: Path, cells: list[dict], **fields):
    """manifest_record's manifest as the typed model it is read as (orchestrator.plan.manifest.Manifest)."""
    from orchestrator.plan.manifest import Manifest, from_json

    return from_json(Manifest, manifest_record(folder, cells, **fields))


def write_spec_run(root: Path, run_spec, throughput: float, device: tuple[str, str] = ("cpu", "CPU X"), cpus: int = 2,
                   context: dict | None = None, metrics: dict | None = None):
    """One run's task file as a backend writes it: the context made from `run_spec` as the backend makes it
    (bench_contract.run.runner.base_context), on `device` (kind, model) with `cpus` CPUs and as many intra-op
    threads, `context` replacing any context column; its throughput, then each of `metrics` (name: (value, unit)).
    Written where the campaign's rows go (root/<campaign>/rows/<framework>/<cell id>.parquet); returns the rows as a
    frame, with the context's columns."""
    import pandas as pd

    from bench_contract.results import ResultRows
    from bench_contract.run.runner import base_context

    machine = {"device_kind": device[0], "device_model": device[1], "bound_cpus": cpus, "intra_op_threads": cpus}
    values = result_context(**(base_context(run_spec) | machine | (context or {})))
    rows = ResultRows(values)
    rows.add("throughput", throughput, "samples/s")
    for name, (value, unit) in (metrics or {}).items():
        rows.add(name, value, unit)
    rows.write(root / run_spec.campaign / "rows" / run_spec.framework / f"{run_spec.cell_id}.parquet")
    return pd.DataFrame(rows.rows).assign(**values)


def write_result(path: str | Path, cell_id: str = "c") -> Path:
    """A whole result file at path, one row, as a backend writes it (bench_contract.results.result_problem
    accepts it): for tests of status and resubmit, which ask only whether a cell has a readable result."""
    from bench_contract.results import ResultRows

    rows = ResultRows(result_context(cell_id=cell_id, framework="jax", benchmark="digits", model="mlp"))
    rows.add("throughput", 1.0, "samples/s")
    return rows.write(path)


def task_file(root: Path, framework: str, batch: int, throughput: float, device: str = "CPU X",
              accuracy: float | None = 0.97, use_case: int = 1, world_size: int | None = None,
              campaign: str = "", step_times_ms: list[float] = (), metrics: dict[str, float] | None = None) -> Path:
    """One task's result file as a backend writes it, with given values, for collect and report tests."""
    from bench_contract.results import ResultRows

    suffix = f"-uc{use_case}-{world_size}" if world_size else ""
    ctx = result_context(framework=framework, benchmark="digits", use_case=use_case, model="mlp", batch_size=batch,
                         precision="fp32", device_model=device, cell_id=f"{framework}-{batch}{suffix}",
                         campaign=campaign)
    rows = ResultRows(ctx)
    rows.add("throughput", throughput, "samples/s")
    if accuracy is not None:
        rows.add("test_accuracy", accuracy, "fraction")
        rows.add("train_loss", 1.0, "nats", epoch=0, step=0)
    if world_size is not None:
        rows.add("world_size", world_size, "processes")
    for name, value in (metrics or {}).items():  # None: recorded as not available, as a backend does
        if value is None:
            rows.add_unavailable(name, "", "not measured in this test")
        else:
            rows.add(name, value, "")
    for step, ms in enumerate(step_times_ms):
        rows.add("step_time", ms, "ms", epoch=0, step=step)
    return rows.write(root / f"camp{use_case}" / "rows" / framework / f"{ctx['cell_id']}.parquet")


def merged_results(root: Path) -> None:
    """Two cells per framework on one CPU model, collected into root/merged.parquet."""
    for batch, (jax, torch) in {32: (2000.0, 1000.0), 64: (3000.0, 2000.0)}.items():
        task_file(root, "jax", batch, jax)
        task_file(root, "torch", batch, torch)
    assert run_cli("collect", "--results-dir", str(root)).returncode == 0


def doctor_rows(stdout: str) -> dict[str, tuple[str, str]]:
    """check name -> (ok/FAIL, detail), from doctor's table."""
    rows = {}
    for line in stdout.splitlines()[2:]:
        parts = re.split(r"\s{2,}", line.strip(), maxsplit=2)
        if len(parts) == 3:
            rows[parts[0]] = (parts[1], parts[2])
    return rows
def write_cifar10_folder(folder: Path, per_batch: int, nested: bool = True) -> Path:
    """CIFAR-10's python batches as the archive unpacks them (cifar-10-batches-py/), random pixels and labels.

    Written like the real files: pickled dicts with bytes keys, a uint8 array of 3072-byte rows and a list of
    labels, pickle protocol 2."""
    import pickle

    target = folder / "cifar-10-batches-py" if nested else folder
    target.mkdir(parents=True)
    rng = np.random.default_rng(1)
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        batch = {b"batch_label": name.encode(), b"labels": [int(v) for v in rng.integers(0, 10, per_batch)],
                 b"data": rng.integers(0, 256, (per_batch, 3072)).astype(np.uint8),
                 b"filenames": [f"img_{i}.png".encode() for i in range(per_batch)]}
        with open(target / name, "wb") as f:
            pickle.dump(batch, f, protocol=2)
    return folder


def write_image_folder(folder: Path, classes: int, per_class: int, split: str = "val") -> Path:
    """An ImageNet-style folder: <split>/<class>/<n>.JPEG, random pixels, sizes that vary in both directions."""
    from PIL import Image

    rng = np.random.default_rng(2)
    for c in range(classes):
        target = folder / split / f"n{c:08d}"
        target.mkdir(parents=True)
        for i in range(per_class):
            height, width = int(rng.integers(40, 120)), int(rng.integers(40, 120))
            pixels = rng.integers(0, 256, (height, width, 3)).astype(np.uint8)
            Image.fromarray(pixels).save(target / f"img_{i:03d}.JPEG", quality=90)
    return folder


def metric(df, name: str) -> float:
    """The one value of a summary metric in a task's result rows."""
    values = df.loc[df.metric == name, "value"]
    assert len(values) == 1, f"expected one {name} row, found {len(values)}"
    return float(values.iloc[0])


def curve(df, name: str = "train_loss") -> np.ndarray:
    """A metric's values in a task's result rows, step by step: the training loss by default."""
    return df[df.metric == name].sort_values("step")["value"].to_numpy()


def prefixed(arrays: dict, prefix: str) -> dict:
    """The arrays of a probe's .npz whose keys start with `prefix`/, keyed by the rest of the key."""
    return {key.split("/", 1)[1]: value for key, value in arrays.items() if key.startswith(prefix + "/")}


def rows_for_test():
    from bench_contract.results import ResultRows

    return ResultRows(result_context())


def write_text_folder(folder: Path, train: int, test: int) -> Path:
    """The nlp format: train.tsv and test.tsv, `<label>\\t<text>` per line. Two classes whose texts share
    filler words and differ by their topic words, some lines longer than the sequence length, mixed case and
    punctuation, and a blank line (skipped)."""
    folder.mkdir(parents=True)
    rng = np.random.default_rng(3)
    topics = {"sport": ["goal", "match", "team", "Score"], "science": ["atom", "cell", "Gene", "orbit"]}
    filler = ["the", "a", "of", "and", "today", "news", "über", "x2"]

    def lines(count: int) -> str:
        out = []
        for i in range(count):
            label = list(topics)[i % 2]
            length = int(rng.integers(3, 200))
            words = [str(rng.choice(topics[label] if rng.random() < 0.3 else filler)) for _ in range(length)]
            out.append(f"{label}\t{' '.join(words)}, end.")
        return "\n".join(out[:1] + [""] + out[1:]) + "\n"

    (folder / "train.tsv").write_text(lines(train), encoding="utf-8")
    (folder / "test.tsv").write_text(lines(test), encoding="utf-8")
    return folder


def write_graph_file(folder: Path, nodes: int, classes: int = 3, features: int = 12) -> Path:
    """The gnn format: graph.npz with edges (2, E), features (N, F), labels (N,) and boolean split masks;
    edges given in one direction only, with a duplicate and a self-loop, as files in the wild have them."""
    folder.mkdir(parents=True)
    rng = np.random.default_rng(4)
    labels = rng.integers(classes, size=nodes)
    same = [(i, j) for i in range(nodes) for j in range(i + 1, nodes) if labels[i] == labels[j] and rng.random() < 0.15]
    edges = np.array(same + [same[0], (0, 0)]).T
    x = np.eye(classes, features)[labels] + rng.standard_normal((nodes, features))
    order = rng.permutation(nodes)
    masks = {name: np.zeros(nodes, bool) for name in ("train_mask", "val_mask", "test_mask")}
    masks["test_mask"][order[: nodes // 5]] = True
    masks["val_mask"][order[nodes // 5 : 2 * nodes // 5]] = True
    masks["train_mask"][order[2 * nodes // 5 :]] = True
    np.savez(folder / "graph.npz", edges=edges.astype(np.int64), features=x.astype(np.float32),
             labels=labels.astype(np.int64), **masks)
    return folder


def profile_file(tmp_path: Path, text: str) -> Path:
    """A site profile (tmp_path/site.toml) that says `text`."""
    path = tmp_path / "site.toml"
    path.write_text(text)
    return path


def fake_tools(bin_dir: Path, env: dict | None = None, **tools: str) -> dict:
    """Commands faked at the subprocess boundary: each of `tools` (name=the body of a bash script) an executable in
    bin_dir (made if missing; a tool already there is replaced). Returns `env` (default: this process's environment)
    with bin_dir first on PATH, for a test that runs a command; a test that runs the code in process sets its PATH
    from it. Also writes a stand-in environment's `python` (bin_dir: the environment's bin), where PATH is not used."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    for name, body in tools.items():
        (bin_dir / name).write_text("#!/bin/bash\n" + body)
        (bin_dir / name).chmod(0o755)
    env = dict(os.environ if env is None else env)
    return {**env, "PATH": f"{bin_dir}:{env.get('PATH', '')}"}


def fake_sbatch(calls: Path, then: str = "", answer: str | None = None, job_name: bool = False) -> str:
    """The fake `sbatch`, as a body for fake_tools: each call appends one line to `calls`, its arguments (after its
    job name, with `job_name`: SBATCH_JOB_NAME, which the orchestrator sets, else the --job-name of the script's
    #SBATCH lines, which submitit writes; in $name for the lines that follow), runs `then` (bash lines), and prints
    `answer`, by default as `sbatch --parsable` does: job ids 4001, 4002, ... by the number of calls so far."""
    named, line = "", '"$*"'
    if job_name:
        named = 'name=${SBATCH_JOB_NAME:-$(sed -n "s/^#SBATCH --job-name=//p" "${@: -1}" 2>/dev/null)}\n'
        line = '"$name $*"'
    record = f'echo {line} >> "{calls}"\n'
    if answer is None:
        answer = f'n=$(wc -l < "{calls}")\necho "$((4000 + n))"\n'
    return "".join(part if part.endswith("\n") else part + "\n" for part in (named, record, then, answer) if part)


def fake_queue(tmp_path: Path, sacct: list[str] = (), squeue: list[str] = ()) -> tuple[dict, Path]:
    """squeue and sacct (fake_tools, in tmp_path/bin) that print these lines, as the orchestrator asks for them
    ("70_0 PENDING", "70_0|COMPLETED"), each call logged as "<command> <arguments>" in tmp_path/calls. Returns
    (environment, the log)."""
    log = tmp_path / "calls"

    def answering(name: str, lines: list[str]) -> str:
        return f'echo "{name} $*" >> "{log}"\n' + "".join(f"echo '{line}'\n" for line in lines)

    return fake_tools(tmp_path / "bin", sacct=answering("sacct", sacct), squeue=answering("squeue", squeue)), log


def fake_slurm_site(tmp_path: Path, commands: dict[str, str], profile_text: str = "",
                    profile_name: str = "p.toml") -> tuple[dict, Path, Path]:
    """A Slurm site faked at the subprocess boundary, for the unit tests: `commands` (name -> bash body) on PATH beside
    fake_sbatch's sbatch (unless `commands` has its own), which numbers its jobs 4001, 4002, ... and records each
    call's arguments, one line per call; empty framework environments (submission checks that their interpreters
    exist) and a profile naming them, then `profile_text`. SLURM_CONF is left out of the environment, so nothing
    reaches a real cluster. Returns (environment, the file of sbatch calls, the profile)."""
    calls = tmp_path / "sbatch_calls.txt"
    env = fake_tools(tmp_path / "fakebin", **{"sbatch": fake_sbatch(calls), **commands})
    env.pop("SLURM_CONF", None)
    env_dir = tmp_path / "envs"
    for framework in ("jax", "torch"):
        (env_dir / framework / "bin").mkdir(parents=True)
        (env_dir / framework / "bin" / "activate").write_text("")
        (env_dir / framework / "bin" / "python").write_text("")
    profile = tmp_path / profile_name
    profile.write_text(f"env_dir = {json.dumps(str(env_dir))}\n{profile_text}")
    return env, calls, profile


def status_states(stdout: str) -> dict[str, tuple[str, str]]:
    """cell id -> (state, detail) from status's table."""
    rows = {}
    for line in stdout.splitlines():
        if line.startswith(("jax ", "torch ")):
            words = line.split(None, 4)
            state, _, detail = words[4].partition("  ")
            rows[words[2]] = (state.strip(), detail.strip())
    return rows


def bash_functions(**bodies: str) -> dict[str, str]:
    """Bash functions as `export -f` puts them in the environment, where a `bash -c` finds them (the paired
    script hands the driver its launch functions so)."""
    return {f"BASH_FUNC_{name}%%": f"() {{ {body}\n}}" for name, body in bodies.items()}

