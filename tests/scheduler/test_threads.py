"""The client's native thread pools while a runtime is open (perception/scheduler/_threads.py)."""

from __future__ import annotations

from typing import Any, cast

import anyio
import numba
import pytest
from threadpoolctl import threadpool_info, threadpool_limits

from perception.config import RuntimeConfig, from_data
from perception.fusion import _kernels, _track_kernels
from perception.scheduler import InferClient, Runtime
from perception.scheduler._threads import CLIENT_NATIVE_THREADS, client_thread_limits, client_thread_report


def _blas_threads() -> dict[str, int]:
    """Threads of each BLAS library loaded in this process (numpy's, scipy's, ... each its own pool)."""
    return {str(lib["filepath"]): int(lib["num_threads"]) for lib in threadpool_info() if lib["user_api"] == "blas"}


def _limited(before: dict[str, int]) -> dict[str, int]:
    return {lib: CLIENT_NATIVE_THREADS for lib in before}


def test_limits_apply_while_inside_nest_and_restore() -> None:
    # A known start, whatever the host's default: 2 threads where a library has them (one built or loaded
    # single-threaded stays at 1, as the whole suite's process showed: numpy's and another's BLAS side by side).
    with threadpool_limits(limits=2, user_api="blas"):
        before = _blas_threads()
        assert 2 in before.values()
        with client_thread_limits():
            assert _blas_threads() == _limited(before)
            with client_thread_limits():  # a second runtime in the same process
                assert _blas_threads() == _limited(before)
            assert _blas_threads() == _limited(before)  # the first is still open
        assert _blas_threads() == before
    report = client_thread_report()
    assert "blas" in report and "numba" in report


@pytest.mark.anyio
async def test_an_open_runtime_limits_blas_and_restores_it_on_close() -> None:
    cfg = from_data(
        RuntimeConfig,
        {
            "server": {"url": "localhost:1"},
            "sensors": [{"name": "lidar", "kind": "lidar", "model": "m", "transport": "grpc"}],
            "trigger": {"rate_hz": 10},
            "fusion": {"enabled": False},
        },
    )
    with threadpool_limits(limits=2, user_api="blas"), anyio.fail_after(60):
        before = _blas_threads()
        assert 2 in before.values()
        # a client that is never called: no models checked, no frame processed
        async with Runtime(cfg, client=cast(InferClient, object()), check_models=False, fusion=None):
            assert _blas_threads() == _limited(before)
        assert _blas_threads() == before


def test_no_fusion_kernel_starts_a_numba_thread_pool() -> None:
    dispatcher = numba.core.registry.CPUDispatcher
    kernels: list[Any] = [f for m in (_kernels, _track_kernels) for f in vars(m).values() if isinstance(f, dispatcher)]
    assert kernels
    assert not [k.py_func.__name__ for k in kernels if k.targetoptions.get("parallel")]
