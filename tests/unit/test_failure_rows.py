"""A failing task still writes one failure row that says why, published atomically, apart from the results;
its exit code stays non-zero. The backend here is a stand-in for jax/torch: the runner is what is tested."""

import os
import signal

import numpy as np
import pytest

from bench_contract.models.weights import ParamSpec
from bench_contract.run import runner
from bench_contract.run.batch_search import SearchError
from bench_contract.run.failure import exception_reason, failure_path, read_failure
from bench_contract.spec import JobSpec


class StandInBackend:
    """Runs `body(rows)` as its use case: the runner's handling of what happens there is under test."""

    framework = "jax"
    libraries = ["numpy"]
    def __init__(self, body):
        self.body = body

    def prepare(self, spec):
        return runner.DeviceSetup(kind="cpu", count=1, framework_version="0", precision_policy="fp32")

    def param_specs(self, model, sample_shape, num_classes, variant, graph=None):
        return [ParamSpec("w", (2, 2), "zeros")]

    def use_case(self, spec, backend, data, weights, rows):
        """Stands in for the contract's use-case flow (runner.run_use_case)."""
        self.body(rows)


def run_stand_in(backend, argv):
    return runner.main(backend, argv, use_case=backend.use_case)


def spec_file(tmp_path, **overrides):
    values = dict(campaign="c", cell_id="jax-cell", pair_key="cell", framework="jax", benchmark="digits",
                  use_case=1, model="mlp", batch_size=32, precision="fp32", epochs=2,
                  results_path=str(tmp_path / "camp" / "rows" / "jax" / "jax-cell.parquet"),
                  init_weights_path=str(tmp_path / "init.npz"))
    values.update(overrides)
    path = tmp_path / "spec.json"
    path.write_text(JobSpec(**values).to_json())
    return path, JobSpec(**values)


def test_the_failure_row_lives_apart_from_the_results(tmp_path):
    rows = tmp_path / "camp" / "rows" / "torch" / "torch-x.parquet"
    assert failure_path(rows) == tmp_path / "camp" / "failures" / "torch" / "torch-x.parquet"
    assert failure_path(tmp_path / "out.parquet") == tmp_path / "out.failure.parquet"


def digits_steps(batch_size=32, epochs=2):
    from bench_contract.data.loading import load_dataset

    return len(load_dataset("digits", "real", None, 2048).x_train) // batch_size * epochs


def train_steps(n, then):
    def body(rows):
        for step in range(n):
            rows.add("train_loss", 1.0, "nats", epoch=0, step=step)
        then()
    return body


def test_an_exception_writes_a_failure_row_and_exits_1(tmp_path, capsys):
    path, spec = spec_file(tmp_path)

    def crash():
        raise ValueError("the data went away")

    code = run_stand_in(StandInBackend(train_steps(3, crash)), [str(path)])
    assert code == 1
    assert not os.path.exists(spec.results_path)
    row = read_failure(failure_path(spec.results_path))
    total = digits_steps()
    assert row["failure_reason"] == f"exception: ValueError: the data went away (at step 3/{total})"
    assert (row["status"], row["steps_done"], row["steps_total"], row["exit_code"]) == ("failed", 3, total, 1)
    assert row["cell_id"] == "jax-cell" and row["campaign"] == "c" and row["hostname"]
    assert "ValueError: the data went away" in row["error"]
    assert capsys.readouterr().err.strip().splitlines()[-1] == "error: jax backend failed: the data went away"


def test_out_of_memory_is_named_as_such(tmp_path):
    path, spec = spec_file(tmp_path)

    def allocate():
        np.ones(1 << 62, dtype=np.uint8)  # numpy raises MemoryError (_ArrayMemoryError) for 4 EiB

    assert run_stand_in(StandInBackend(train_steps(1, allocate)), [str(path)]) == 1
    assert read_failure(failure_path(spec.results_path))["failure_reason"].startswith("out of memory: ")


@pytest.mark.parametrize("error, reason", [
    (MemoryError(), "out of memory: MemoryError"),
    (RuntimeError("RESOURCE_EXHAUSTED: Out of memory while trying to allocate 8 bytes"),
     "out of memory: RuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate 8 bytes"),
    (type("OutOfMemoryError", (RuntimeError,), {})("CUDA out of memory. Tried to allocate 2 GiB\nmore"),
     "out of memory: OutOfMemoryError: CUDA out of memory. Tried to allocate 2 GiB"),
    (RuntimeError("[enforce fail at alloc_cpu.cpp:117] DefaultCPUAllocator: can't allocate memory"),
     "out of memory: RuntimeError: [enforce fail at alloc_cpu.cpp:117] DefaultCPUAllocator: can't allocate memory"),
    (KeyError("w"), "exception: KeyError: 'w'"),
])
def test_framework_out_of_memory_errors_are_recognised(error, reason):
    assert exception_reason(error) == reason


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGUSR1])
def test_a_stop_signal_records_how_far_the_task_got(tmp_path, capsys, signum):
    path, spec = spec_file(tmp_path)
    previous = {s: signal.getsignal(s) for s in runner.STOP_SIGNALS}
    try:
        code = run_stand_in(StandInBackend(train_steps(7, lambda: os.kill(os.getpid(), signum))), [str(path)])
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    name = signal.Signals(signum).name
    assert code == 128 + signum
    row = read_failure(failure_path(spec.results_path))
    assert row["failure_reason"] == f"terminated by {name} at step 7/{digits_steps()}"
    assert (row["status"], row["signal"], row["steps_done"]) == ("terminated", name, 7)
    assert not os.path.exists(spec.results_path)
    assert capsys.readouterr().err.strip().splitlines()[-1].startswith(f"error: jax backend terminated by {name}")


def test_a_later_success_removes_the_failure_row(tmp_path):
    path, spec = spec_file(tmp_path)

    def crash():
        raise RuntimeError("first attempt")

    assert run_stand_in(StandInBackend(train_steps(1, crash)), [str(path)]) == 1
    assert failure_path(spec.results_path).exists()
    assert run_stand_in(StandInBackend(train_steps(2, lambda: None)), [str(path)]) == 0
    assert os.path.exists(spec.results_path) and not failure_path(spec.results_path).exists()


def test_a_failure_before_the_spec_is_read_writes_nothing(tmp_path):
    assert run_stand_in(StandInBackend(train_steps(1, lambda: None)), [str(tmp_path / "nope.json")]) == 1
    assert list(tmp_path.iterdir()) == []


def test_the_failed_steps_arrays_are_freed_before_the_failure_row_is_written(tmp_path, monkeypatch):
    """The exception's frames hold what the failed step allocated; the row is written after they are gone, so a
    task that ran out of memory under a limit has its memory back when pyarrow writes (a CI run saw pyarrow spin
    for 10 minutes writing a try's row beside the arrays)."""
    import weakref

    path, _ = spec_file(tmp_path)
    held = []

    def fail_holding_an_array(rows):
        activations = np.ones(1 << 20)
        held.append(weakref.ref(activations))
        raise MemoryError("the next allocation did not fit")

    alive_when_written = []
    write = runner.write_failure
    monkeypatch.setattr(runner, "write_failure",
                        lambda *args, **kwargs: alive_when_written.append(held[0]() is not None) or write(*args, **kwargs))
    assert run_stand_in(StandInBackend(fail_holding_an_array), [str(path)]) == 1
    assert alive_when_written == [False]


def test_a_failed_batch_search_names_its_cell_and_the_search(tmp_path, monkeypatch):
    """A search cell's failure row had no identity (cell_id None) and said 'while reading the job spec'."""
    path, spec = spec_file(tmp_path, batch_search=True)

    def fail(spec):
        raise SearchError("the try at batch size 8 failed for a reason other than memory")

    monkeypatch.setattr(runner, "run_search", fail)
    assert run_stand_in(StandInBackend(lambda rows: None), [str(path)]) == 1
    row = read_failure(failure_path(spec.results_path))
    assert (row["cell_id"], row["campaign"]) == ("jax-cell", "c")
    assert row["phase"] == "searching for the largest batch that fits"
    assert row["failure_reason"].endswith("(while searching for the largest batch that fits)")
