"""A task's progress: lines in its log as it runs and a heartbeat file, from the training loop, the
inference loop and the batch search, never inside a timed step; the orchestrator reads the heartbeats."""

import contextlib
import json
import subprocess
import time
import types

import numpy as np
import pytest
from helpers import rows_for_test, spec, write_manifest

from bench_contract.data.datasets import Dataset
from bench_contract.measure import timing
from bench_contract.run import batch_search, progress
from bench_contract.run.progress import ProgressReporter, heartbeat_path, interval_from_env
from bench_contract.spec import JobSpec

STEP_S = 0.010  # what one fake device step takes on the fake clock
SLOW_LOG_S = 3.0  # what one progress line takes: far longer than a step, so that any line inside a step shows


class FakeClock:
    """One clock for the step timer and the reporter; a step and a progress line each move it on."""

    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


class FakeOps:
    parameter_count = 1

    def __init__(self, clock):
        self.clock, self.steps = clock, 0

    def to_device(self, x, y=None):
        return x if y is None else (x, y)

    def train_step(self, batch):
        self.clock.now += STEP_S
        self.steps += 1
        return 1.0 / self.steps

    def forward(self, x):
        self.clock.now += STEP_S
        return np.zeros((len(x), 2), np.float32)

    @contextlib.contextmanager
    def passes(self, x):
        yield lambda: self.forward(x)

    def compile(self, x):
        return {}

    def synchronize(self, out):
        pass

    def compilations(self):
        return 0

    compiles_lazily = False

    def loss_scale(self):
        return None  # no loss scaling

    def loss_value(self, out):
        return float(out)

    def to_numpy(self, out):
        return out

    def predict(self, x):
        return np.zeros(len(x), np.int64)

    def flops_per_step(self, batch):
        from bench_contract.measure.flops import Flops

        return Flops(100.0, "fake")


def progress_spec(tmp_path, **overrides):
    """A short training cell whose results go under tmp_path, where its heartbeat is looked for."""
    values = {"cell_id": "jax-cell", "pair_key": "cell", "batch_size": 4, "epochs": 2, "warmup_steps": 3,
              "timed_steps": 6, "min_duration_s": 0.0,
              "results_path": str(tmp_path / "c" / "rows" / "jax" / "jax-cell.parquet")}
    return spec(**(values | overrides))


def slow_reporter(tmp_path, clock, lines, interval_s=0.05):
    def say(line):
        lines.append(line)
        clock.now += SLOW_LOG_S

    return ProgressReporter(tmp_path / "heartbeat.json", "jax-cell", "jax", interval_s, clock=clock, say=say)


def use_fake_clock(monkeypatch, clock):
    fake_time = types.SimpleNamespace(perf_counter=clock, time=time.time)
    monkeypatch.setattr(timing, "time", fake_time)


def test_training_reports_steps_and_epochs_outside_the_timed_steps(tmp_path, monkeypatch):
    from bench_contract.run.training import run_training

    clock, lines = FakeClock(), []
    use_fake_clock(monkeypatch, clock)
    x, y = np.zeros((20, 3), np.float32), np.zeros(20, np.int64)
    data = Dataset("digits", "synthetic", x, y, x[:4], y[:4], x[:4], y[:4], 2)
    s = progress_spec(tmp_path)
    rows = rows_for_test()
    run_training(s, data, FakeOps(clock), rows, progress=slow_reporter(tmp_path, clock, lines))

    # Every timed step took exactly the fake device's 10 ms: the 3 s progress lines fell between steps.
    step_times = [r["value"] for r in rows.rows if r["metric"] == "step_time"]
    assert step_times == pytest.approx([STEP_S * 1e3] * 7)
    # 5 steps per epoch, 2 epochs: the start, a line per step (each line is slower than the interval), an epoch
    # summary per epoch, and the end.
    steps = [int(line.split("step ")[1].split("/")[0]) for line in lines if ", step " in line]
    assert steps == sorted(steps) and steps[-1] == 10 and len(set(steps)) >= 5
    assert lines[0].startswith("training, epoch 1/2, step 0/10 (0%)") and "batch size 4" in lines[0]
    assert any("epoch 2/2, step 10/10 (100%)" in line and "epoch 2 done in" in line for line in lines)
    assert "steps/s" in lines[3] and "ETA" in lines[3] and "loss" in lines[3]
    assert lines[-1].startswith("training") and "training done in" in lines[-1]
    beat = json.loads((tmp_path / "heartbeat.json").read_text())
    assert (beat["phase"], beat["step"], beat["steps_total"], beat["cell_id"]) == ("training", 10, 10, "jax-cell")


def test_inference_reports_each_stage_of_its_batch_size_outside_the_timed_passes(tmp_path, monkeypatch):
    from bench_contract.run.inference import run_inference

    clock, lines = FakeClock(), []
    use_fake_clock(monkeypatch, clock)
    s = progress_spec(tmp_path, use_case=5)
    rows = rows_for_test()
    run_inference(s, np.zeros((4, 3), np.float32), FakeOps(clock), rows,
                  progress=slow_reporter(tmp_path, clock, lines))
    passes = [r["value"] for r in rows.rows if r["metric"] == "step_time"]
    assert passes == pytest.approx([STEP_S * 1e3] * 6)
    assert [line.split(": ", 1)[1].split(",")[0] for line in lines] == [
        "compiling", "first pass after compilation", "timing at least 6 passes and 0 s", "6 passes timed"]
    assert all(line.startswith("inference, batch size 4: ") for line in lines)
    assert "100 passes/s" in lines[-1] and "median 10 ms" in lines[-1]


def test_lines_come_at_most_every_interval_but_phase_and_epoch_ends_always(tmp_path):
    clock, lines = FakeClock(), []
    reporter = ProgressReporter(None, interval_s=10.0, clock=clock, say=lines.append)
    reporter.start("training", steps_total=100, epochs=1)
    for step in range(1, 101):
        clock.now += 1.0
        reporter.step(step, epoch=0, loss=1.0 / step)
    reporter.note("epoch 1 done", step=100)
    assert len(lines) == 1 + 10 + 1  # the start, one per 10 s of steps, the epoch's end
    assert "step 10/100 (10%)" in lines[1] and "1 steps/s" in lines[1] and "ETA 1m30s" in lines[1]


def test_only_the_writer_rank_reports(tmp_path):
    lines = []
    reporter = ProgressReporter(tmp_path / "hb.json", enabled=False, say=lines.append)
    reporter.start("training", steps_total=10, epochs=1)
    reporter.step(5)
    reporter.note("epoch 1 done")
    assert lines == [] and not (tmp_path / "hb.json").exists()


def test_the_heartbeat_sits_beside_rows_and_failures_where_collect_and_status_never_look(tmp_path):
    from orchestrator.results.task_files import task_files
    from orchestrator.run.status import result_problem

    results = tmp_path / "camp" / "rows" / "torch" / "torch-cell.parquet"
    assert heartbeat_path(results) == tmp_path / "camp" / "progress" / "torch" / "torch-cell.json"
    assert heartbeat_path(tmp_path / "one.parquet") == tmp_path / "one.progress.json"
    reporter = ProgressReporter.for_spec(progress_spec(tmp_path, framework="torch", cell_id="torch-cell",
                                              results_path=str(results)))
    reporter.say = lambda line: None
    reporter.start("training", steps_total=10, epochs=1)
    assert heartbeat_path(results).is_file()
    assert task_files(tmp_path, tmp_path / "merged.parquet") == {}  # no result yet, and the heartbeat is none
    assert result_problem(str(results)) == "no file"


def test_a_heartbeat_that_cannot_be_written_does_not_stop_the_task(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("")
    reporter = ProgressReporter(blocker / "sub" / "hb.json", say=lambda line: None)  # its folder is a file
    reporter.start("training", steps_total=10, epochs=1)
    reporter.note("epoch 1 done")
    assert reporter.heartbeat is None and "could not write the heartbeat" in capsys.readouterr().err


@pytest.mark.parametrize("raw, expected", [("", progress.DEFAULT_INTERVAL_S), ("0.5", 0.5), ("30", 30.0)])
def test_the_interval_comes_from_the_environment(raw, expected):
    assert interval_from_env({progress.INTERVAL_ENV: raw}) == expected


@pytest.mark.parametrize("raw", ["0", "-1", "soon", "nan"])
def test_a_bad_interval_is_refused_in_one_sentence(raw):
    with pytest.raises(ValueError, match=f"BENCH_PROGRESS_INTERVAL_S must be a positive number of seconds, got '{raw}'"):
        interval_from_env({progress.INTERVAL_ENV: raw})


def test_the_batch_search_reports_each_try_and_keeps_its_heartbeat_fresh_while_one_runs(tmp_path, monkeypatch):
    s = progress_spec(tmp_path, batch_search=True, batch_size=16, batch_search_limit=256)
    lines, beats_during_tries = [], []
    reporter = ProgressReporter(heartbeat_path(s.results_path), s.cell_id, "jax", 0.02, say=lines.append)
    reporter.start("batch search")

    def beat() -> float:
        return json.loads(heartbeat_path(s.results_path).read_text())["updated_unix"]

    def run(args, **kwargs):  # a try: fits up to 64, out of memory above; it reports nothing, and lasts until the
        before = beat()      # heartbeat has moved on (or 30 s, far past the 0.02 s interval: a loaded machine's
        deadline = time.monotonic() + 30  # scheduling delays the beat, it cannot stop it)
        while beat() <= before and time.monotonic() < deadline:
            time.sleep(0.01)
        beats_during_tries.append(beat() > before)
        fits = JobSpec.read(args[-1]).batch_size <= 64
        return subprocess.CompletedProcess(args, 0 if fits else 1, "", "" if fits else "RESOURCE_EXHAUSTED: oom")

    monkeypatch.setattr(batch_search.subprocess, "run", run)
    largest, _ = batch_search.search(batch_search.backend_try(s, tmp_path, reporter), 16, 256)
    assert largest == 64 and all(beats_during_tries)
    assert lines[1:5] == ["batch search, try 1: batch size 16", "batch search, try 1: batch size 16 fits",
                          "batch search, try 2: batch size 32", "batch search, try 2: batch size 32 fits"]
    assert "batch search, try 4: batch size 128 does not fit (out of memory: RESOURCE_EXHAUSTED: oom)" in lines


# --- the orchestrator's reader ---------------------------------------------------------------------------

def campaign_with_heartbeats(tmp_path):
    """A campaign of three cells: one mid-training, one whose heartbeat is garbage, one that wrote none."""
    folder = tmp_path / "camp"
    cells = [{"framework": fw, "array_index": i, "cell_id": f"{fw}-{i}",
              "results": str(folder / "rows" / fw / f"{fw}-{i}.parquet")} for fw, i in (("jax", 0), ("jax", 1),
                                                                                        ("torch", 0))]
    write_manifest(folder, cells)
    clock = FakeClock()
    reporter = ProgressReporter(heartbeat_path(cells[0]["results"]), "jax-0", "jax", 10.0, clock=clock,
                                say=lambda line: None)
    reporter.start("training", steps_total=2160, epochs=30)
    clock.now += 20.0
    reporter.step(216, epoch=2, loss=0.4123)
    heartbeat_path(cells[1]["results"]).write_text("{not json")
    return folder


def test_the_reader_gives_each_cell_its_phase_epoch_step_loss_rate_eta_and_age(tmp_path):
    from orchestrator.plan.manifest import load_manifest
    from orchestrator.run.progress import cell_progress, progress_line

    folder = campaign_with_heartbeats(tmp_path)
    now = time.time() + 4
    first, garbage, none = (cell_progress(cell, now) for cell in load_manifest(folder).cells)
    beat = first.beat
    assert (beat["phase"], beat["epoch"], beat["epochs"], beat["step"], beat["steps_total"]) == \
        ("training", 2, 30, 216, 2160)
    assert beat["loss"] == pytest.approx(0.4123) and beat["steps_per_s"] == pytest.approx(10.8)
    assert beat["eta_s"] == pytest.approx(1944 / 10.8) and 3 <= first.age_s <= 5 and not first.stale
    assert progress_line(first) == ("jax 0 (jax-0): training, epoch 3/30, step 216/2160 (10%), loss 0.4123, "
                                    "10.8 steps/s, ETA 3m00s; 4s ago")
    assert garbage.beat is None and none.beat is None
    assert progress_line(garbage) == "jax 1 (jax-1): no progress reported yet"
    assert progress_line(none) == "torch 0 (torch-0): no progress reported yet"


def test_a_heartbeat_much_older_than_its_interval_is_called_stale(tmp_path):
    from orchestrator.plan.manifest import load_manifest
    from orchestrator.run.progress import cell_progress, progress_line, progress_lines

    folder = campaign_with_heartbeats(tmp_path)
    cell = load_manifest(folder).cells[0]
    fresh = cell_progress(cell, time.time() + 100)  # 10 s interval: stale only after 2 minutes
    old = cell_progress(cell, time.time() + 600)
    assert not fresh.stale and old.stale
    assert "STALE: no heartbeat for 10m00s (expected every 10s)" in progress_line(old)
    manifest = json.loads((folder / "manifest.json").read_text())["cells"]
    running = [types.SimpleNamespace(**cell) for cell in manifest[:1]]  # watch passes its running CellStatus
    assert progress_lines(running, time.time() + 600) == [progress_line(old)]


def test_the_local_executor_can_show_a_task_log_while_it_is_written(tmp_path):
    """The task waits until the terminal has shown its first line: only a live stream lets it finish."""
    from orchestrator.run.progress import run_streaming

    flag, log, shown = tmp_path / "shown", tmp_path / "task.log", []

    def show(line):
        shown.append(line)
        flag.touch()

    script = (f"echo first; for i in $(seq 200); do [ -e {flag} ] && break; sleep 0.05; done; "
              f"[ -e {flag} ] && echo second || echo 'not shown live'; echo to stderr >&2; exit 3")
    code = run_streaming(["bash", "-c", script], log, show)
    assert code == 3 and shown == ["first", "second", "to stderr"]
    assert log.read_text() == "first\nsecond\nto stderr\n"

