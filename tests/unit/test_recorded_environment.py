"""The environment variables a row records: those that change what a framework computes or how fast."""

from bench_contract.measure.device import recorded_environment


def test_the_allocators_settings_are_recorded_beside_the_frameworks(monkeypatch):
    """A CPU run's speed follows its allocator (docs/measurement.md, page faults): a row must say which it had."""
    allocator = {"GLIBC_TUNABLES": "glibc.malloc.hugetlb=1", "MALLOC_ARENA_MAX": "2",
                 "LD_PRELOAD": "/usr/lib/libjemalloc.so.2", "THP_MEM_ALLOC_ENABLE": "1"}
    for name, value in allocator.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_enable_fast_math=false")
    monkeypatch.setenv("JAXTORCH_UNRELATED", "x")
    recorded = recorded_environment()
    assert {name: recorded.get(name) for name in allocator} == allocator
    assert recorded["XLA_FLAGS"] == "--xla_cpu_enable_fast_math=false"
    assert "JAXTORCH_UNRELATED" not in recorded
