"""Both frameworks of a cell compute on the same CPUs with the same thread count: the task's CPUs are
decided once (bench_contract.run.cpu_binding) and every row records them. The frameworks themselves are in
tests/backends/test_bound_cpus.py; here the decision, the binding of a real process and the runner's record."""

import json
import os
import re
import subprocess
import sys
from typing import ClassVar

import pytest
from helpers import spec

from bench_contract.models.weights import ParamSpec
from bench_contract.run import cpu_binding, runner
from bench_contract.run.failure import failure_path, read_failure

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.parametrize("env, count, source", [
    ({"SLURM_CPUS_PER_TASK": "4", "OMP_NUM_THREADS": "2"}, 4, "SLURM_CPUS_PER_TASK=4"),
    ({"OMP_NUM_THREADS": "2"}, 2, "OMP_NUM_THREADS=2"),  # the profile's cpus_per_task, exported by the script
    ({}, None, "nothing sets a CPU count"),
])
def test_the_count_is_slurms_else_the_profiles_else_none(env, count, source):
    got, said = cpu_binding.requested_count(env)
    assert got == count and said.startswith(source)


def test_a_slurm_index_that_is_not_a_number_is_refused_in_one_sentence():
    with pytest.raises(cpu_binding.BindingError, match="SLURM_LOCALID='x' is not a whole number"):
        cpu_binding.slurm_index({"SLURM_LOCALID": "x"}, "SLURM_LOCALID")


@pytest.mark.parametrize("value", ["0", "two", "2(x3)", "-1"])
def test_a_count_that_is_not_a_positive_number_is_refused_in_one_sentence(value):
    with pytest.raises(cpu_binding.BindingError, match=re.escape(f"SLURM_CPUS_PER_TASK='{value}' is not a positive")):
        cpu_binding.requested_count({"SLURM_CPUS_PER_TASK": value})


@pytest.mark.parametrize("available, count, local_id, chosen", [
    (range(8), 2, 0, (0, 1)),
    (range(8), 2, 1, (2, 3)),  # the second task of the node: other CPUs than the first
    (range(8), 2, 3, (6, 7)),
    (range(8), 3, 2, (0, 1, 2)),  # two blocks of 3 only: the third task shares the first block
    ([4, 5], 2, 1, (4, 5)),  # Slurm bound the task already: its CPUs, whatever its local id
    (range(4), None, 0, (0, 1, 2, 3)),  # nothing asks for fewer: every CPU of the affinity
    (range(2), 4, 0, (0, 1)),  # asked for more than it has: what it has
])
def test_each_task_of_a_node_takes_its_own_block_of_the_affinity(available, count, local_id, chosen):
    assert cpu_binding.choose_cpus(available, count, local_id)[0] == chosen


def test_jobs_on_one_unbound_node_turn_the_first_block_with_their_job_id():
    """The local cluster's two one-CPU nodes share this machine, and Slurm binds nothing: jobs 12779 and 12780,
    one on each, would otherwise both take CPU 0 and leave CPU 1 idle."""
    assert cpu_binding.choose_cpus(range(2), 1, 0, job_id=12779)[0] == (1,)
    assert cpu_binding.choose_cpus(range(2), 1, 0, job_id=12780)[0] == (0,)
    tasks = [cpu_binding.choose_cpus(range(8), 2, local_id, job_id=5)[0] for local_id in range(4)]
    assert len(set(tasks)) == 4  # the tasks of one job still take a block each


def test_tasks_of_one_node_do_not_share_cpus_while_there_are_enough():
    picks = [set(cpu_binding.choose_cpus(range(16), 4, task)[0]) for task in range(4)]
    assert set().union(*picks) == set(range(16)) and sum(map(len, picks)) == 16
    assert "shared" in cpu_binding.choose_cpus(range(16), 4, 4)[1]


def test_cpu_lists_are_written_as_taskset_writes_them():
    assert cpu_binding.compact_cpu_list([8, 0, 1, 2, 3, 10, 11]) == "0-3,8,10-11"
    assert cpu_binding.compact_cpu_list([5]) == "5"


def bound_in_a_fresh_process(env: dict) -> str:
    """Bind a new Python process as a backend's entry point does; print its affinity and its threads'."""
    code = ("import os; from bench_contract.run import cpu_binding; import pyarrow; cpu_binding.bind_task_cpus(); "
            "print(sorted(os.sched_getaffinity(0)), "
            "sorted({c for t in os.listdir('/proc/self/task') for c in os.sched_getaffinity(int(t))}))")
    clean = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_") and k != "OMP_NUM_THREADS"}
    proc = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True, cwd=REPO_ROOT,
                          env={**clean, "PYTHONPATH": REPO_ROOT, **env}, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs a process allowed on two CPUs or more")
def test_a_process_is_bound_to_its_tasks_cpus_every_thread_of_it():
    first, second = sorted(os.sched_getaffinity(0))[:2]
    assert bound_in_a_fresh_process({"SLURM_CPUS_PER_TASK": "1"}) == f"[{first}] [{first}]"
    # The second task of the node takes the next CPU; pyarrow's threads, started before, are bound as well.
    assert bound_in_a_fresh_process({"SLURM_CPUS_PER_TASK": "1", "SLURM_LOCALID": "1"}) == f"[{second}] [{second}]"
    # A pack's second slot: task 0 of a step of its own, beside slot 0's in the same job, takes the next CPU too.
    assert bound_in_a_fresh_process({"SLURM_CPUS_PER_TASK": "1", "BENCH_PACK_SLOT": "1"}) == f"[{second}] [{second}]"


class ThreadedBackend:
    """A stand-in that reports its threads as a backend does (the number is fixed: it is the runner that is tested,
    and a backend's own look at the binding would raise a bad count's error itself)."""

    framework = "torch"
    libraries: ClassVar[list[str]] = ["numpy"]

    def prepare(self, spec):
        return runner.DeviceSetup(kind="cpu", count=1, framework_version="0", precision_policy="fp32",
                                  intra_op_threads=3, threads_source="stand-in threads")

    def param_specs(self, model, sample_shape, num_classes, variant, graph=None):
        return [ParamSpec("w", (2, 2), "zeros")]


def bound_spec(tmp_path, **overrides):
    """PyTorch's digits MLP at batch 4, its weights and results under tmp_path."""
    return spec("torch", batch_size=4, init_weights_path=str(tmp_path / "init.npz"),
                results_path=str(tmp_path / "rows" / "torch-x.parquet"), **overrides)


def test_every_row_records_the_bound_cpus_and_the_frameworks_threads(tmp_path, monkeypatch):
    monkeypatch.setattr(cpu_binding, "_binding", cpu_binding.Binding((0, 1, 2, 3, 8), "test binding"))
    rows = runner.run_spec(bound_spec(tmp_path), ThreadedBackend(), use_case=lambda *args: None)
    assert {name: rows.context[name] for name in ("bound_cpus", "bound_cpu_list", "cpu_binding", "intra_op_threads",
                                                  "intra_op_threads_source")} == {
        "bound_cpus": 5, "bound_cpu_list": "0-3,8", "cpu_binding": "test binding", "intra_op_threads": 3,
        "intra_op_threads_source": "stand-in threads"}
    assert json.loads(rows.context["device_details"])["cpu"]["usable_cpus"] >= 1


def test_a_bad_cpu_count_ends_the_task_with_a_failure_row_that_says_so(tmp_path, monkeypatch):
    monkeypatch.setattr(cpu_binding, "_binding", None)
    monkeypatch.setattr(cpu_binding, "_error", None)
    assert cpu_binding.bind_task_cpus({"SLURM_CPUS_PER_TASK": "two"}) is None  # remembered, not raised at import
    spec = bound_spec(tmp_path)
    path = tmp_path / "spec.json"
    path.write_text(spec.to_json())
    assert runner.main(ThreadedBackend(), [str(path)], use_case=lambda *args: None) != 0
    failure = read_failure(failure_path(spec.results_path))
    assert "SLURM_CPUS_PER_TASK='two' is not a positive whole number of CPUs" in failure["failure_reason"]
    assert not os.path.exists(spec.results_path)
