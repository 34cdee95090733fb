"""How far a running task is: a line in its log now and then, and a small heartbeat file that `watch` reads.

A cell can run for a quarter of an hour (30 epochs of DP-SGD on a CPU) or for hours; without this, its log
says nothing between the start and the end. The training loop, the inference loop and the batch search
report here, and this module prints one flushed line at most every `interval_s` seconds (the environment
variable BENCH_PROGRESS_INTERVAL_S, default DEFAULT_INTERVAL_S), plus one at each phase's start and end and
at each epoch's end. Each line also rewrites the heartbeat, atomically, at

    <campaign>/progress/<framework>/<cell>.json      beside rows/ and failures/ (see heartbeat_path)

It is JSON, never a *.parquet inside a rows folder, so collect and status never take it for a result.

Reporting cannot change a measurement: the loops call it between steps, after a step's clock has stopped
and its energy window has closed; it reads only the host clock and values the loop already holds on the
host (the loss it reads every step anyway), so it adds no wait for the device, and the time between lines
is the host's time, not a synchronisation of its own. Only the writer (rank 0) reports: every rank runs
the same global steps.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench_contract.atomic import publish
from bench_contract.run.topology import topology_for
from bench_contract.spec import JobSpec

INTERVAL_ENV = "BENCH_PROGRESS_INTERVAL_S"
# Often enough that a person watching sees it move; rare enough that a day-long job's log stays readable.
DEFAULT_INTERVAL_S = 10.0
HEARTBEAT_VERSION = 1
HEARTBEAT_SUFFIX = ".json"


def heartbeat_path(results_path: str | os.PathLike[str]) -> Path:
    """Where the heartbeat of the task that writes `results_path` goes: <campaign>/progress/<fw>/<cell>.json
    for the campaign layout (<campaign>/rows/<fw>/<cell>.parquet, as failure_path reads it), else
    <stem>.progress.json beside the result."""
    path = Path(results_path)
    if path.parent.parent.name == "rows":
        return path.parent.parent.parent / "progress" / path.parent.name / (path.stem + HEARTBEAT_SUFFIX)
    return path.with_name(f"{path.stem}.progress{HEARTBEAT_SUFFIX}")


def interval_from_env(env: dict[str, str] | None = None) -> float:
    env = os.environ if env is None else env
    raw = env.get(INTERVAL_ENV, "")
    if not raw:
        return DEFAULT_INTERVAL_S
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise ValueError(f"{INTERVAL_ENV} must be a positive number of seconds, got {raw!r}")
    return value


def duration(seconds: float) -> str:
    """A duration for a person: 42s, 2m38s, 1h05m."""
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def describe(beat: dict[str, Any]) -> str:
    """The heartbeat's fields as one line: phase, epoch, step/total, loss, steps/s, ETA, and what it says
    besides. The task prints it, and the orchestrator shows it per cell (orchestrator.run.progress)."""
    parts = [beat.get("phase") or "starting"]
    if beat.get("epoch") is not None and beat.get("epochs"):
        parts.append(f"epoch {beat['epoch'] + 1}/{beat['epochs']}")
    if beat.get("step") is not None:
        total = beat.get("steps_total")
        percent = f" ({100 * beat['step'] / total:.0f}%)" if total else ""
        parts.append(f"step {beat['step']}" + (f"/{total}{percent}" if total else ""))
    if beat.get("loss") is not None:
        parts.append(f"loss {beat['loss']:.4g}")
    if beat.get("steps_per_s"):
        parts.append(f"{beat['steps_per_s']:.3g} steps/s")
    if beat.get("eta_s") is not None:
        parts.append(f"ETA {duration(beat['eta_s'])}")
    if beat.get("detail"):
        parts.append(beat["detail"])
    return ", ".join(parts)


def say_flushed(line: str) -> None:
    print(f"progress: {line}", flush=True)  # flushed: a log read while the task runs must show it now


@dataclass
class ProgressReporter:
    """One task's progress: `start` a phase, report `step`s (throttled) and `note`s (always shown)."""

    heartbeat: Path | None  # None: no heartbeat file (a spec without a result path), lines only
    cell_id: str = ""
    framework: str = ""
    interval_s: float = DEFAULT_INTERVAL_S
    enabled: bool = True  # False on every rank but the writer
    clock: Callable[[], float] = time.monotonic
    say: Callable[[str], None] = say_flushed
    beat: dict[str, Any] = field(default_factory=dict)  # the heartbeat's fields, as last shown
    last_shown: float | None = None
    rate_mark: tuple[float, int] | None = None  # (time, step) where the current steps/s window began

    @classmethod
    def for_spec(cls, spec: JobSpec, writer: bool | None = None) -> ProgressReporter:
        """The task's reporter; `writer` says whether this process is rank 0 (default: from Slurm's variables)."""
        writer = topology_for(spec).is_writer if writer is None else writer
        return cls(heartbeat_path(spec.results_path) if spec.results_path else None, spec.cell_id, spec.framework,
                   interval_from_env(), enabled=writer)

    def start(self, phase: str, *, steps_total: int | None = None, epochs: int | None = None,
              detail: str = "") -> None:
        """A new phase (training, evaluation, inference, batch search): always shown."""
        self.beat = {"phase": phase, "epoch": 0 if epochs else None, "epochs": epochs,
                     "step": 0 if steps_total else None, "steps_total": steps_total, "loss": None,
                     "steps_per_s": None, "eta_s": None, "detail": detail}
        self.rate_mark = (self.clock(), 0)
        self.show()

    def step(self, step: int, *, epoch: int | None = None, loss: float | None = None) -> None:
        """`step` steps of the phase are done. Shown when interval_s has passed since the last line."""
        if not self.enabled:
            return
        now = self.clock()
        if self.last_shown is not None and now - self.last_shown < self.interval_s:
            return
        self.beat.update(step=step, loss=loss, detail="", **({} if epoch is None else {"epoch": epoch}))
        self.update_rate(now, step)
        self.show(now)

    def note(self, detail: str, **fields: Any) -> None:
        """An event worth a line of its own (an epoch's end, a batch size timed, a try that did not fit)."""
        if not self.enabled:
            return
        self.beat.update(detail=detail, **fields)
        if fields.get("step") is not None:
            self.update_rate(self.clock(), fields["step"])
        self.show()

    def keep_alive(self) -> None:
        """Between pieces of work that are no steps (evaluation chunks): refresh the heartbeat when interval_s
        has passed, without a line, so that watch can tell a long evaluation from a task that is gone."""
        if not self.enabled:
            return
        now = self.clock()
        if self.last_shown is None or now - self.last_shown >= self.interval_s:
            self.write_heartbeat(now)

    @contextmanager
    def kept_alive(self) -> Iterator[None]:
        """While the block waits on something that reports nothing (a batch-search try, a process of its own),
        a thread refreshes the heartbeat every interval_s. The block must not report meanwhile."""
        if not self.enabled or self.heartbeat is None:
            yield
            return
        stop = threading.Event()

        def beat() -> None:
            while not stop.wait(self.interval_s):
                self.write_heartbeat(self.clock())

        thread = threading.Thread(target=beat, name="heartbeat", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()

    def update_rate(self, now: float, step: int) -> None:
        """Steps/s since the last estimate (the recent rate, not the average since a compiling first step)
        and the time left at that rate."""
        since, done = self.rate_mark or (now, step)
        if now > since and step > done:
            self.beat["steps_per_s"] = (step - done) / (now - since)
            total = self.beat.get("steps_total")
            self.beat["eta_s"] = (total - step) / self.beat["steps_per_s"] if total else None
            self.rate_mark = (now, step)

    def show(self, now: float | None = None) -> None:
        if not self.enabled:
            return
        now = self.clock() if now is None else now
        self.say(describe(self.beat))
        self.write_heartbeat(now)

    def write_heartbeat(self, now: float) -> None:
        self.last_shown = now
        if self.heartbeat is None:
            return
        beat = {"version": HEARTBEAT_VERSION, "cell_id": self.cell_id, "framework": self.framework, **self.beat,
                "interval_s": self.interval_s, "updated_unix": time.time(),
                "updated_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
                "host": socket.gethostname(), "pid": os.getpid()}
        text = json.dumps(beat, sort_keys=True)
        try:
            publish(self.heartbeat, lambda tmp: tmp.write_text(text))
        except OSError as exc:  # a full or read-only disk must not end a measurement: the log still shows it
            print(f"progress: could not write the heartbeat {self.heartbeat} ({exc}); going on without it",
                  file=sys.stderr, flush=True)
            self.heartbeat = None
