"""A batch-search try counts as out of memory only when the error that ended it says so (its failure row, or
without one the end of its log, or a SIGKILL), never because a line somewhere in its log mentions memory: XLA
on a GPU prints allocator warnings with "out of memory" in runs that go on."""

import subprocess

import pytest
from helpers import spec

from bench_contract.run import batch_search
from bench_contract.run.batch_search import SearchError, backend_try
from bench_contract.run.failure import write_failure
from bench_contract.spec import JobSpec

# What XLA's GPU allocator prints when an allocation must wait or retry; the run goes on.
XLA_WARNING = ("W0000 00:00:1712345678.901234 4242 bfc_allocator.cc:291] Allocator (GPU_0_bfc) ran out of memory "
               "trying to allocate 2.19GiB with freed_by_count=0. The caller indicates that this is not a failure, "
               "but this may mean that there could be performance gains if more memory were available.")
LOG = f"loading\n{XLA_WARNING}\n" + "".join(f"step {i}\n" for i in range(10))


def search_spec(tmp_path):
    """JAX's digits MLP searching for its largest batch from 8, its weights and results under tmp_path."""
    return spec(cell_id="jax-search", batch_size=8, batch_search=True, results_path=str(tmp_path / "cell.parquet"),
                init_weights_path=str(tmp_path / "init.npz"))


def one_try(monkeypatch, tmp_path, returncode, stderr, failure_reason=None):
    """Run backend_try once at batch 64 with the backend process stood in for: it exits with `returncode`,
    prints `stderr`, and writes a failure row with `failure_reason` as the runner does for an exception."""

    def run(args, **kwargs):
        spec = JobSpec.read(args[-1])
        if failure_reason is not None:
            write_failure(spec.results_path, {}, status="failed", reason=failure_reason,
                          phase="running the use case", exit_code=returncode)
        return subprocess.CompletedProcess(args, returncode, "", stderr)

    monkeypatch.setattr(batch_search.subprocess, "run", run)
    return backend_try(search_spec(tmp_path), tmp_path)(64)


def test_an_allocator_warning_in_a_try_that_failed_otherwise_is_not_out_of_memory(monkeypatch, tmp_path):
    reason = "exception: FloatingPointError: training diverged: loss is nan at step 1 (epoch 0) (at step 1/2)"
    with pytest.raises(SearchError, match="for a reason other than memory"):
        one_try(monkeypatch, tmp_path, 1, LOG + f"error: jax backend failed: {reason}\n", reason)


def test_a_native_crash_after_an_allocator_warning_is_not_out_of_memory(monkeypatch, tmp_path):
    with pytest.raises(SearchError, match="for a reason other than memory"):
        one_try(monkeypatch, tmp_path, -11, LOG + "Fatal Python error: Segmentation fault\n")


def test_an_allocator_warning_in_a_try_that_ran_is_a_fit(monkeypatch, tmp_path):
    assert one_try(monkeypatch, tmp_path, 0, LOG).fits


@pytest.mark.parametrize("returncode, stderr, failure_reason, expected", [
    # The runner's failure row names the out-of-memory exception (bench_contract.run.failure.exception_reason).
    (1, LOG, "out of memory: XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory allocating 2980172968 bytes. "
             "(at step 0/2)", "out of memory: XlaRuntimeError: RESOURCE_EXHAUSTED"),
    (1, LOG, "out of memory: OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB (at step 0/2)",
     "out of memory: OutOfMemoryError: CUDA out of memory"),
    # XLA's CPU kernels under an address-space cap: a generic error, still the allocation that failed.
    (1, LOG, "exception: XlaRuntimeError: INTERNAL: YNNPACK operation failed (at step 0/2)",
     "out of memory: exception: XlaRuntimeError: INTERNAL: YNNPACK operation failed"),
    # No failure row: killed by the kernel's out-of-memory killer, or aborted by the C++ allocator.
    (-9, LOG, None, "out of memory: killed by SIGKILL"),
    (-6, LOG + "terminate called after throwing an instance of 'std::bad_alloc'\n  what():  std::bad_alloc\n", None,
     "out of memory: what():  std::bad_alloc"),
])
def test_the_error_that_ended_the_try_decides(monkeypatch, tmp_path, returncode, stderr, failure_reason, expected):
    attempt = one_try(monkeypatch, tmp_path, returncode, stderr, failure_reason)
    assert not attempt.fits and attempt.reason.startswith(expected), attempt.reason


@pytest.mark.parametrize("gpus, device", [(1, "auto"), (0, "auto"), (1, "cpu")])
def test_a_memory_cap_goes_to_the_gpu_on_a_gpu_and_to_the_address_space_on_a_cpu(monkeypatch, tmp_path, gpus, device):
    """Under an address-space cap CUDA cannot start (it reserves far more address space than memory), so on a GPU
    every try would have been 'out of memory': there the try's spec carries the cap for its backend's allocator."""
    seen = {}

    def run(args, preexec_fn=None, **kwargs):
        seen.update(spec=JobSpec.read(args[-1]), preexec_fn=preexec_fn)
        return subprocess.CompletedProcess(args, 0, "", "")

    monkeypatch.setattr(batch_search.subprocess, "run", run)
    monkeypatch.setattr(batch_search, "gpus_on_node", lambda: gpus)
    cap = 4 * 2**30
    spec = JobSpec(**(search_spec(tmp_path).__dict__ | {"memory_limit_bytes": cap, "device": device}))
    assert backend_try(spec, tmp_path)(64).fits
    on_gpu = gpus > 0 and device != "cpu"
    assert (seen["preexec_fn"] is None) == on_gpu
    assert seen["spec"].memory_limit_bytes == (cap if on_gpu else 0)
    fraction = batch_search.device_memory_fraction(seen["spec"], 80 * 2**30)
    assert fraction == (pytest.approx(0.05) if on_gpu else None)
    assert batch_search.device_memory_fraction(seen["spec"], 2**30) in (None, 1.0)  # never more than the GPU


def test_validates_parity_spec_is_not_a_capped_try():
    """Backends prepare validate's ParitySpec on a GPU too; it has no batch-search fields (a crash on the H200)."""
    from bench_contract.run.parity import ParitySpec

    spec = ParitySpec(model="resnet50", variant="full", benchmark="imagenet", sample_shape=(3, 224, 224),
                      num_classes=1000, batch_size=2, precision="fp32", seed=0, device="gpu", weights_path="w.npz",
                      input_path="x.npy", output_dir=".")
    assert batch_search.try_memory_cap(spec) == 0 and batch_search.device_memory_fraction(spec, 2**30) is None
