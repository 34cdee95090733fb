"""A count of XLA compilations in this process, from JAX's own monitoring events.

JAX records one `/jax/core/compile/backend_compile_duration` event for every program it hands to XLA to
compile (a jit cache hit records none). Counting them around a timed step shows a recompilation inside the
timed region: a new input shape or dtype, or a function re-traced because a static argument changed. The
event name is `jax._src.dispatch.BACKEND_COMPILE_EVENT`; it is spelled out here so that a rename in a later
JAX shows up as a failing test rather than as a silent zero.

With JAX's persistent compilation cache on (JAX_COMPILATION_CACHE_DIR; the test suite runs with one), a program
found on disk is loaded instead of compiled: still a recompilation of the timed step (the jit cache missed, and
the step waited for the load). JAX 0.10 times the load under the same event (`compile_or_get_cached` inside
it), so it is counted; tests/backends/test_measurement.py fails if a later JAX stops doing so.
"""

from __future__ import annotations

import time

import jax

BACKEND_COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"

_count = 0


def _on_duration(event: str, duration: float, **kwargs) -> None:
    global _count
    if event == BACKEND_COMPILE_EVENT:
        _count += 1


jax.monitoring.register_event_duration_secs_listener(_on_duration)


def count() -> int:
    """Compilations so far in this process."""
    return _count


def ahead_of_time(jitted, *args):
    """(the compiled function, {metric: seconds}, the traced jaxpr) of a jitted function for these arguments'
    shapes (the jaxpr is what XLA compiled: jax_backend.census reads it), timed as
    PyTorch's compile time is (torch.compile's first call minus a steady one: Dynamo's tracing, then Inductor's
    code generation): `compile_time` is tracing and lowering to StableHLO plus XLA's compilation, and the two
    parts are recorded too (`lowering_time`, `xla_compile_time`). XLA's part alone left out about a fifth of
    the MLP's (1.78 s against 0.44 s of lowering)."""
    start = time.perf_counter()
    traced = jitted.trace(*args)
    lowered = traced.lower()
    lowering = time.perf_counter() - start
    start = time.perf_counter()
    compiled = lowered.compile()
    xla = time.perf_counter() - start
    return compiled, {"compile_time": lowering + xla, "lowering_time": lowering, "xla_compile_time": xla}, traced.jaxpr
