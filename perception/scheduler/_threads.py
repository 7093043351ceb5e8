"""The client's native thread pools, set deliberately while a runtime is open.

The runtime's own threads are the event loop, its decode and fusion workers (anyio's worker threads)
and a callback thread; every other pool in the client process comes from a native library and was not
asked for. Left alone, OpenBLAS starts one thread per core and, after each large ``@`` or
``np.linalg.inv``, keeps its helper spinning for about 100 ms: on a 2-core host that is a core taken
from the models (measured on the bundled drive, lockstep against an external server: 128.5 -> 47 ms of
client CPU per frame with ``OPENBLAS_NUM_THREADS=1``; issue 44). The frame path's array work is small
(a few thousand points, tens of objects), so one thread is the fastest for it anyway.

* **BLAS and OpenMP** (numpy's and scipy's OpenBLAS, an OpenMP runtime some library loaded): limited to
  :data:`CLIENT_NATIVE_THREADS` with ``threadpoolctl`` when the first runtime opens, restored when the last
  one closes. Libraries are limited in process (no environment variable): the Triton server's models,
  which run in processes of their own, keep the threading of their configuration.
* **numba**: fusion's kernels are compiled without ``parallel=True``, so numba never starts its threading
  layer in the client (:func:`client_thread_report` says so; ``tests/scheduler/test_threads.py`` checks
  that no kernel asks for it).
* **onnxruntime**: the client opens no inference session (models run in the server); its pools are per
  session, so there is nothing to limit here.
"""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["CLIENT_NATIVE_THREADS", "client_thread_limits", "client_thread_report"]

log = logging.getLogger(__name__)

#: Threads of each native pool (BLAS, OpenMP) in the client while a runtime is open (module docstring).
CLIENT_NATIVE_THREADS = 1


class _Limits:
    """The process's one limit: how many runtimes hold it, and threadpoolctl's limiter while any does."""

    lock = threading.Lock()
    holders = 0
    limiter: Any = None


def client_thread_report() -> dict[str, object]:
    """The client's native pools now: ``{"blas": {library: threads}, "openmp": {...}, "numba": ...}``."""
    from threadpoolctl import threadpool_info

    out: dict[str, Any] = {"blas": {}, "openmp": {}}
    for lib in threadpool_info():
        out.setdefault(str(lib["user_api"]), {})[str(lib["prefix"])] = int(lib["num_threads"])
    parallel = sys.modules.get("numba.np.ufunc.parallel")
    launched = bool(getattr(parallel, "_is_initialized", False))
    out["numba"] = "threading layer started" if launched else "no pool (no parallel kernels)"
    return out


@contextmanager
def client_thread_limits() -> Iterator[None]:
    """Limit the client's native pools to :data:`CLIENT_NATIVE_THREADS` while inside (nestable, thread-safe:
    the first entry limits, the last exit restores what was there before)."""
    with _Limits.lock:
        if _Limits.holders == 0:
            from threadpoolctl import threadpool_limits

            _Limits.limiter = threadpool_limits(limits=CLIENT_NATIVE_THREADS)
            log.debug("client native thread pools limited: %s", client_thread_report())
        _Limits.holders += 1
    try:
        yield
    finally:
        with _Limits.lock:
            _Limits.holders -= 1
            if _Limits.holders == 0 and _Limits.limiter is not None:
                _Limits.limiter.restore_original_limits()
                _Limits.limiter = None
