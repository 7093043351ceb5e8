"""Triton's per-request trace (``--trace-config triton``, ``level=TIMESTAMPS``): the flags and the reader.

With ``log-frequency=1`` Triton 2.51 writes each request's trace, as soon as the request completes, to
a file of its own, ``<file>.<n>`` (``n`` = 0, 1, ...): a JSON array whose objects are, per trace id, one
``{"id", "model_name", "model_version", "request_id"}`` and one ``{"id", "timestamps": [{"name",
"ns"}]}`` per event. Measured on the bundled server: the file appears within a few milliseconds of the
response (at ``log-frequency=0`` nothing is written before shutdown, at ``N > 1`` only every N traces).

:class:`TraceReader` reads such a directory incrementally: a file still being written (a partial object,
no closing ``]``) is read up to its last complete object and again once it has grown; a closed file is
deleted once read when the reader owns the directory (so a long run keeps neither files nor memory).

Clocks: the timestamps are the server host's ``steady_clock`` in ns. Only differences of one request's
own timestamps are used (its queue, compute input/infer/output and total), so the server may be on
another host and no offset to the client's monotonic clock is ever needed. (On Linux the embedded
server's ``steady_clock`` is ``CLOCK_MONOTONIC``, the client's ``time.monotonic_ns``; nothing relies on it.)
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["TRACE_EVENTS", "RequestTrace", "TraceReader", "trace_flags"]

log = logging.getLogger(__name__)

#: The server timestamps of one request, in the order Triton records them.
TRACE_EVENTS = (
    "REQUEST_START",
    "QUEUE_START",
    "COMPUTE_START",
    "COMPUTE_INPUT_END",
    "COMPUTE_OUTPUT_START",
    "COMPUTE_END",
    "REQUEST_END",
)

#: Each server stage (the names of Triton's statistics, :data:`perception.types.SERVER_STAGES`) as the
#: difference of two timestamps: exactly how Triton's statistics accumulate them per request.
_STAGE_BOUNDS = {
    "queue": ("QUEUE_START", "COMPUTE_START"),
    "compute_input": ("COMPUTE_START", "COMPUTE_INPUT_END"),
    "compute_infer": ("COMPUTE_INPUT_END", "COMPUTE_OUTPUT_START"),
    "compute_output": ("COMPUTE_OUTPUT_START", "COMPUTE_END"),
}

#: A file that still does not parse this long after its last change is abandoned (a server killed mid-write).
_STALE_S = 10.0


def trace_flags(file: Path) -> list[str]:
    """``tritonserver`` flags writing every request's timestamps to ``<file>.<n>`` as it completes."""
    return [
        f"--trace-config=triton,file={file}",
        "--trace-config=triton,log-frequency=1",
        "--trace-config=level=TIMESTAMPS",
        "--trace-config=rate=1",
    ]


@dataclass(frozen=True, slots=True)
class RequestTrace:
    """One request as Triton traced it: its id (the client's ``request_id``), model and event times."""

    request_id: str
    model: str
    version: str
    #: Event name (:data:`TRACE_EVENTS`) -> server steady-clock ns.
    timestamps: Mapping[str, int]

    def stages(self) -> dict[str, int] | None:
        """``queue``, ``compute_input``, ``compute_infer``, ``compute_output`` (ns) and their ``total``;
        None when a timestamp is missing (a request that failed before compute).

        The stages are Triton's statistics' (the same timestamp differences), cut where the response
        left (``INFER_RESPONSE_COMPLETE``): the python backend closes ``compute_output`` only after its
        stub has cleaned up, measured up to 20 ms after the response was sent on a loaded 2-core host.
        The client never waits for that part (:attr:`after_response_ns`), so it is not the request's.
        """
        ts = self.timestamps
        if any(a not in ts or b not in ts for a, b in _STAGE_BOUNDS.values()):
            return None
        cut = ts.get("INFER_RESPONSE_COMPLETE", ts["COMPUTE_END"])

        def at(event: str) -> int:
            return min(ts[event], max(cut, ts["QUEUE_START"]))

        out = {stage: max(0, at(b) - at(a)) for stage, (a, b) in _STAGE_BOUNDS.items()}
        out["total"] = sum(out.values())
        return out

    @property
    def after_response_ns(self) -> int:
        """Server time counted by Triton's statistics after the response left (see :meth:`stages`)."""
        ts = self.timestamps
        if "COMPUTE_END" not in ts or "INFER_RESPONSE_COMPLETE" not in ts:
            return 0
        return max(0, ts["COMPUTE_END"] - ts["INFER_RESPONSE_COMPLETE"])

    @property
    def request_ns(self) -> int | None:
        """REQUEST_START to REQUEST_END: the whole request as the server saw it."""
        ts = self.timestamps
        return ts["REQUEST_END"] - ts["REQUEST_START"] if "REQUEST_END" in ts and "REQUEST_START" in ts else None


@dataclass
class _File:
    offset: int = 0  # bytes parsed into complete objects
    traces: dict[int, dict[str, object]] = field(default_factory=dict)


class TraceReader:
    """New complete request traces from the files ``<stem>.<n>`` of ``directory`` (see module docs).

    ``delete``: remove each file once fully read (only for a directory the caller owns).
    """

    def __init__(self, directory: Path, *, stem: str = "trace.json", delete: bool = True) -> None:
        self._dir = Path(directory)
        self._prefix = stem + "."
        self._delete = delete
        self._files: dict[str, _File] = {}
        self._done: set[str] = set()  # closed files kept (delete=False): never read again
        self._decoder = json.JSONDecoder()

    @property
    def directory(self) -> Path:
        return self._dir

    def poll(self) -> list[RequestTrace]:
        """Every trace completed since the last call (in file order); never raises for a file's content."""
        out: list[RequestTrace] = []
        try:
            names = sorted((e.name for e in os.scandir(self._dir) if e.name.startswith(self._prefix)), key=_file_order)
        except OSError as exc:
            log.debug("trace directory %s unreadable: %s", self._dir, exc)
            return out
        for name in names:
            if name not in self._done:
                out.extend(self._read(name))
        return out

    def _read(self, name: str) -> list[RequestTrace]:
        path = self._dir / name
        state = self._files.setdefault(name, _File())
        try:
            with path.open("rb") as fh:
                fh.seek(state.offset)
                data = fh.read()
                mtime = os.fstat(fh.fileno()).st_mtime
        except OSError:
            return []
        text = data.decode("utf-8", errors="replace")
        pos, closed = 0, False
        while True:
            while pos < len(text) and text[pos] in " \t\r\n[,":
                pos += 1
            if pos >= len(text):
                break
            if text[pos] == "]":
                closed = True
                break
            try:
                obj, end = self._decoder.raw_decode(text, pos)
            except json.JSONDecodeError:
                break  # a partial object: read again when the file has grown
            pos = end
            if isinstance(obj, dict):
                _merge(state.traces, obj)
        state.offset += len(text[:pos].encode("utf-8", errors="replace"))
        done = [tid for tid, t in state.traces.items() if closed or ("REQUEST_END" in _ts(t) and "model_name" in t)]
        out = [tr for tid in done if (tr := _complete(state.traces.pop(tid))) is not None]
        stale = not closed and pos < len(text) and _age(mtime) > _STALE_S
        if closed or stale:
            if stale:
                log.warning("trace file %s ends in a partial record; skipped", path)
            del self._files[name]
            if self._delete:
                try:
                    path.unlink()
                except OSError:
                    self._done.add(name)
            else:
                self._done.add(name)
        return out


def _file_order(name: str) -> tuple[int, str]:
    suffix = name.rsplit(".", 1)[-1]
    return (int(suffix), name) if suffix.isdigit() else (-1, name)


def _age(mtime: float) -> float:
    return time.time() - mtime


def _ts(trace: Mapping[str, object]) -> dict[str, int]:
    ts = trace.get("timestamps")
    return ts if isinstance(ts, dict) else {}


def _merge(traces: dict[int, dict[str, object]], obj: Mapping[str, object]) -> None:
    tid = obj.get("id")
    if not isinstance(tid, int):
        return
    entry = traces.setdefault(tid, {"timestamps": {}})
    stamps = obj.get("timestamps")
    if isinstance(stamps, list):
        ts = _ts(entry)
        for s in stamps:
            if isinstance(s, dict) and isinstance(s.get("name"), str) and isinstance(s.get("ns"), int):
                ts.setdefault(s["name"], s["ns"])
    for key in ("model_name", "model_version", "request_id"):
        if key in obj:
            entry[key] = obj[key]


def _complete(entry: Mapping[str, object]) -> RequestTrace | None:
    model, rid = entry.get("model_name"), entry.get("request_id")
    if not isinstance(model, str) or not isinstance(rid, str):
        return None
    return RequestTrace(
        request_id=rid, model=model, version=str(entry.get("model_version", "")), timestamps=dict(_ts(entry))
    )
