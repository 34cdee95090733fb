"""The largest-batch search: doubling then bisection, out-of-memory failures as data, the plan's rules."""

import pytest
from helpers import settings

from bench_contract.run.batch_search import Attempt, classify, search
from orchestrator.errors import UsageError
from orchestrator.plan import matrix
from orchestrator.plan.settings import parse_memory_size


def fits_up_to(largest):
    return lambda b: Attempt(b, b <= largest, "fits" if b <= largest else "out of memory: test")


def test_doubles_then_bisects_to_the_exact_limit_for_small_batches():
    found, attempts = search(fits_up_to(37), start=1, limit=1000)
    assert found == 37
    assert [a.batch_size for a in attempts] == [1, 2, 4, 8, 16, 32, 64, 48, 40, 36, 38, 37]
    assert [a.fits for a in attempts][-6:] == [False, False, False, True, False, True]


def test_large_limits_are_found_to_within_one_part_in_32():
    found, attempts = search(fits_up_to(100_000), start=1024, limit=2**20)
    failed = min(a.batch_size for a in attempts if not a.fits)
    assert found <= 100_000 < failed and failed - found <= found // 32
    assert len(attempts) < 15


def test_a_limit_that_is_never_reached_and_a_start_that_does_not_fit():
    assert search(fits_up_to(10**9), start=3, limit=40)[0] == 40
    found, attempts = search(fits_up_to(5), start=8, limit=100)
    assert found == 0 and len(attempts) == 1


@pytest.mark.parametrize("code, stderr, oom", [
    (-9, "", True),
    (1, "jax.errors.JaxRuntimeError: RESOURCE_EXHAUSTED: Out of memory allocating 2980172968 bytes.", True),
    (1, "RuntimeError: [enforce fail at alloc_cpu.cpp:127] DefaultCPUAllocator: can't allocate memory", True),
    (1, "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", True),
    (1, "ValueError: training diverged: loss is nan", False),
    (2, "usage: python -m jax_backend.run SPEC.json", False),
])
def test_only_memory_failures_count_as_out_of_memory(code, stderr, oom):
    reason = classify(code, f"Traceback (most recent call last):\n{stderr}\nerror: backend failed")
    assert (reason is not None) == oom
    if oom:
        assert reason.startswith("out of memory:")


def test_memory_sizes_parse_like_slurm_and_bad_ones_are_refused():
    assert parse_memory_size("6G") == 6 * 2**30 and parse_memory_size("512m") == 512 * 2**20
    for bad in ("6", "six G", "5X", "10K"):
        with pytest.raises(UsageError):
            parse_memory_size(bad)


def test_a_search_cell_starts_at_one_by_default_and_is_named_for_it():
    cells = matrix.expand("mnist", 1, [], ["mlp"], [], [], settings(batch_search=True))
    assert [c.batch_size for c in cells] == [1, 1]
    assert all("-maxbatch-" in c.cell_id for c in cells)
    plain = matrix.expand("mnist", 1, [], ["mlp"], [1], [], settings())
    assert plain[0].cell_id != cells[0].cell_id


@pytest.mark.parametrize("use_case, batches, overrides, message", [
    (1, [8, 16], {}, "starts from one batch size"),
    (2, [8], {}, "searches on one device"),
    (1, [128], {"batch_search_limit": 64}, "above --max-batch-limit"),
])
def test_search_requests_that_cannot_run_are_refused(use_case, batches, overrides, message):
    with pytest.raises(UsageError, match=message):
        matrix.expand("mnist", use_case, [], ["mlp"], batches, [], settings(batch_search=True, **overrides))


@pytest.mark.parametrize("overrides, message", [
    ({"trace_steps": 2, "nodes": 2}, "traces one process"),
    ({"trace_steps": 2, "batch_search": True}, "do not combine"),
    ({"trace_steps": -1}, "cannot be negative"),
])
def test_trace_requests_that_cannot_run_are_refused(overrides, message):
    with pytest.raises(UsageError, match=message):
        settings(**overrides)
