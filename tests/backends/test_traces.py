"""Profiler traces on demand: extra steps under each framework's profiler after the measurement, written
beside the results in Chrome's trace format (what Perfetto opens), and parsed back here."""

import gzip
import json
from pathlib import Path

import pytest
from helpers import metric
from test_backends import FRAMEWORKS, make_spec, run_backend

from bench_contract.measure.tracing import trace_files, trace_folder
from bench_contract.results import read_task_table

CELLS = {
    "training": dict(use_case=1, epochs=1, warmup_steps=2),
    "inference": dict(benchmark="mnist", model="cnn", model_variant="tiny", use_case=5, batch_size=4,
                      data_source="synthetic", warmup_steps=1, timed_steps=3, min_duration_s=0.0),
}


@pytest.mark.parametrize("kind", CELLS)
@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_a_traced_cell_writes_a_trace_that_parses_and_is_marked(tmp_path, framework, kind):
    spec = make_spec(framework, tmp_path, trace_steps=2, **CELLS[kind])
    proc = run_backend(framework, spec, tmp_path)
    assert proc.returncode == 0, proc.stderr
    df = read_task_table(spec.results_path).to_pandas()
    assert metric(df, "trace_steps") == 2 and metric(df, "traced_step_time_p50") > 0
    assert "trace_steps" in json.loads(df.framework_options.iloc[0])
    # The traced steps come after the measurement and are not among its timed steps.
    assert len(df[df.metric == "step_time"]) == metric(df, "timed_steps")
    files = trace_files(trace_folder(spec))
    assert files and all(Path(f).is_relative_to(trace_folder(spec)) for f in files)
    events = [e for f in files for e in load_trace_events(f)]
    complete = [e for e in events if e.get("ph") == "X"]  # complete events: a name, a start and a duration
    assert len(complete) > 10 and all("ts" in e and "dur" in e for e in complete)


def test_an_untraced_cell_writes_no_trace(tmp_path):
    spec = make_spec("jax", tmp_path, epochs=1)
    assert run_backend("jax", spec, tmp_path).returncode == 0
    assert not trace_folder(spec).exists()
    assert "trace_steps" not in set(read_task_table(spec.results_path).to_pandas().metric)


def load_trace_events(path: Path) -> list[dict]:
    """The events of a Chrome-format trace (what Perfetto's JSON importer reads): a list, or traceEvents."""
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt") as f:
        data = json.load(f)
    events = data["traceEvents"] if isinstance(data, dict) else data
    if not isinstance(events, list):
        raise ValueError(f"{path} holds no list of trace events")
    return events

