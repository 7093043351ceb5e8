"""Per-frame client/server split of every request: from Triton's per-request trace, or its statistics.

Triton counts, per model, successful requests and the nanoseconds they spent in its queue, copying
inputs in (``compute_input``), running the model (``compute_infer``) and copying outputs out
(``compute_output``). With one frame in flight, the difference between two snapshots taken around a
frame is exactly that frame's requests -- provided the count difference equals the number of requests
this client sent to the model for the frame. :class:`ServerSplitter` checks that, and otherwise marks
the model's split unavailable for the frame with the reason; it never guesses. It works against any
Triton (embedded or external) and needs nothing from the models.

Two sources, one split (the same stages, ``overhead`` and checks, :func:`_split_sensors`):

* :class:`TraceSplitter` reads Triton's per-request trace (``--trace-config triton``, which the
  embedded server turns on: ``server.trace``). Each request carries its frame and sensors in its id, so
  it works at any number of frames in flight. In Triton 2.51 the trace file can only be set when the
  server is launched, on the server's host: an external server's trace is not readable here.
* :class:`ServerSplitter` diffs Triton's cumulative statistics around each frame: any Triton, but only
  with one frame in flight (described below). ``report.json`` says which (``server_split.source``).

Triton updates the statistics a moment after the response is sent (measured: about one request in
five is not yet counted when its answer arrives), so each model's snapshot waits (a bounded poll, in
:meth:`perception.triton.TritonClient.model_statistics`) until every answered request of the frame is
counted, and is then read once. The snapshots are taken between frames, outside any frame's timed
path: the caller holds the next frame back meanwhile (``replay_drive`` does, see ``server_split``).

Exact when this client is the only one using the models. Other clients' requests show up as a count
that does not match (or as server time well beyond the request's time in flight) and make the split
unavailable for the frame; the one case it cannot see is another client's request being counted while
one of ours is not yet, within the same poll -- then the frame would carry the other request's time.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import anyio

from perception.errors import PerceptionError
from perception.kinds import kind_def
from perception.triton import RequestTrace, TraceReader
from perception.types import SERVER_STAGES, FrameResult, FrameStatus, SensorStatus

__all__ = ["FrameRequest", "ServerSplitter", "TraceSplitter", "frame_requests", "with_in_flight"]

log = logging.getLogger(__name__)


class Statistics(Protocol):
    """``models -> model -> cumulative statistics``, waiting until each model's counters in ``at_least``
    reach their values (then or at its bound, one snapshot), all models from one read per poll:
    :meth:`perception.triton.TritonClient.models_statistics`."""

    def __call__(
        self, models: Sequence[str], *, at_least: Mapping[str, Mapping[str, int]] | None = None
    ) -> Awaitable[Mapping[str, Mapping[str, int]]]: ...


_SENT = (SensorStatus.OK, SensorStatus.ERROR, SensorStatus.LATE)


@dataclass(frozen=True, slots=True)
class FrameRequest:
    """One request of a frame: its model, the sensors it carried (several for a camera batch) and
    whether it was answered (``ok``) or may have reached the server without an answer (late, failed)."""

    model: str
    sensors: tuple[str, ...]
    ok: bool


def frame_requests(
    result: FrameResult, sensors: Sequence[tuple[str, str, str]], *, batched_cameras: bool
) -> list[FrameRequest]:
    """The requests behind ``result``; ``sensors`` are ``(name, kind, model)`` as configured.

    A sensor that was missing or skipped sent nothing, nor one whose answer was an earlier frame's,
    reused while frames are shed (``SensorResult.reused_age_ns``). With batched camera requests the sensors of a
    batching kind (cameras) of one model share one request, answered when any of them is ok (a camera
    whose image the client failed to decode is left out of the batch, not sent; one the model could not
    decode was sent, and is an error of an answered request).
    """
    out: list[FrameRequest] = []
    batches: dict[str, list[tuple[str, SensorStatus]]] = {}
    for name, kind, model in sensors:
        r = result.sensors.get(name)
        if r is None or r.status not in _SENT or r.reused_age_ns is not None:
            continue  # nothing sent: missing, skipped, or an earlier frame's answer reused (overload)
        if batched_cameras and kind_def(kind).contract.batched:  # as the dispatcher groups them
            batches.setdefault(model, []).append((name, r.status))
        else:
            out.append(FrameRequest(model, (name,), r.status is SensorStatus.OK))
    for model, members in batches.items():
        ok = [n for n, st in members if st is SensorStatus.OK]
        out.append(FrameRequest(model, tuple(ok) if ok else tuple(n for n, _ in members), bool(ok)))
    return out


def with_in_flight(result: FrameResult) -> FrameResult:
    """``result`` with each answered sensor's ``in_flight`` (= request - serialize) in its latency tree."""
    sensors = {name: _in_flight(stages) for name, stages in result.latency.sensors.items()}
    return dataclasses.replace(result, latency=dataclasses.replace(result.latency, sensors=sensors))


def _in_flight(stages: Mapping[str, int]) -> dict[str, int]:
    out = dict(stages)
    if "request" in out and "serialize" in out:
        out["in_flight"] = max(0, out["request"] - out["serialize"])
    return out


def _delta(before: Mapping[str, int], after: Mapping[str, int], key: str) -> int:
    return int(after.get(key, 0)) - int(before.get(key, 0))


class ServerSplitter:
    """Adds Triton's own time to each frame's latency tree (see the module docs).

    ``source`` is ``"statistics"``; ``gated``: frames must be dispatched one at a time.

    Call :meth:`start` once before the first frame, then :meth:`attribute` with every frame's result,
    in order, each before the next frame is dispatched.
    """

    def __init__(
        self,
        statistics: Statistics,
        sensors: Sequence[tuple[str, str, str]],
        *,
        batched_cameras: bool,
        query_timeout_s: float = 15.0,
    ) -> None:
        """``query_timeout_s`` bounds each snapshot (the statistics' own wait for the frame's requests
        to be counted included)."""
        self._statistics = statistics
        self._sensors = tuple(sensors)
        self._batched = batched_cameras
        self._models = tuple(sorted({model for _, _, model in self._sensors}))
        self._query_s = query_timeout_s
        self._last: dict[str, Mapping[str, int] | None] = {}
        self._tainted: set[str] = set()

    source = "statistics"
    gated = True

    @property
    def models(self) -> tuple[str, ...]:
        return self._models

    async def start(self) -> None:
        """The baseline snapshot of every model."""
        self._last = await self._snapshot(self._models)

    async def _snapshot(
        self, models: Sequence[str], expected: Mapping[str, int] | None = None
    ) -> dict[str, Mapping[str, int] | None]:
        """One snapshot of each model (one statistics read for all of them); a model in ``expected``
        waits until Triton has counted that many more requests (their success and each stage) than in
        the previous snapshot. A failed read leaves every model without its snapshot (``None``)."""
        at_least: dict[str, Mapping[str, int]] = {}
        for model in models:
            before, n = self._last.get(model), (expected or {}).get(model)
            if before is not None and n:
                at_least[model] = {
                    f"{k}_count": int(before.get(f"{k}_count", 0)) + n for k in ("success", *SERVER_STAGES)
                }
        try:
            with anyio.fail_after(self._query_s):
                got = await self._statistics(models, at_least=at_least or None)
        except (PerceptionError, TimeoutError) as exc:
            log.warning("statistics of models %s unavailable: %s", ", ".join(models), exc)
            return dict.fromkeys(models)
        return {model: got.get(model) for model in models}

    async def attribute(self, result: FrameResult) -> FrameResult:
        """``result`` with Triton's time per model (``latency.server``) and, for a sensor whose model
        served exactly this one request in the frame, ``server_*``, ``in_flight`` and ``overhead`` in
        its latency tree; a model whose time cannot be attributed exactly is in
        ``latency.server_unavailable`` with the reason."""
        result = with_in_flight(result)
        if result.status is FrameStatus.DROPPED:
            return result  # nothing was sent
        requests = frame_requests(result, self._sensors, batched_cameras=self._batched)
        answered: dict[str, list[FrameRequest]] = {}
        unsettled: dict[str, int] = {}
        for req in requests:
            if req.ok:
                answered.setdefault(req.model, []).append(req)
            else:
                unsettled[req.model] = unsettled.get(req.model, 0) + 1
        tainted, self._tainted = self._tainted, set(unsettled)
        expected = {m: len(rs) for m, rs in answered.items() if m not in unsettled and m not in tainted}
        snaps = await self._snapshot(self._models, expected)
        server: dict[str, dict[str, int]] = {}
        unavailable: dict[str, str] = {}
        sensors = {name: dict(stages) for name, stages in result.latency.sensors.items()}
        for model in self._models:
            before, after = self._last.get(model), snaps.get(model)
            self._last[model] = after
            ours = answered.get(model, [])
            if not ours and model not in unsettled and model not in tainted:
                continue
            reason = self._problem(model, ours, unsettled.get(model, 0), model in tainted, before, after)
            if reason is None:
                assert before is not None and after is not None
                entry = {stage: _delta(before, after, f"{stage}_ns") for stage in SERVER_STAGES}
                entry["total"] = sum(entry.values())
                if len(ours) == 1:
                    reason = _split_sensors(sensors, ours[0], entry)
                if reason is None:
                    server[model] = {"requests": len(ours), **entry}
                    continue
            unavailable[model] = reason
        latency = dataclasses.replace(result.latency, sensors=sensors, server=server, server_unavailable=unavailable)
        return dataclasses.replace(result, latency=latency)

    def _problem(
        self,
        model: str,
        ours: Sequence[FrameRequest],
        unsettled: int,
        tainted: bool,
        before: Mapping[str, int] | None,
        after: Mapping[str, int] | None,
    ) -> str | None:
        if before is None or after is None:
            return "statistics unavailable (the statistics query failed)"
        if unsettled:
            return f"request not answered ({unsettled} late or failed request(s) of this frame)"
        if tainted:
            return "previous frame not settled (its late or failed request may have run during this frame)"
        n = len(ours)
        ok, failed = _delta(before, after, "success_count"), _delta(before, after, "fail_count")
        if failed == 0 and all(_delta(before, after, f"{k}_count") == n for k in ("success", *SERVER_STAGES)):
            return None
        if ok < n:
            return f"statistics not updated (Triton counted {ok} of this frame's {n} request(s) in time)"
        return f"other traffic (Triton counted {ok} successful and {failed} failed requests; this frame sent {n})"


#: Triton closes a request's accounting a moment after its response left (measured: up to ~4 ms over
#: the client's whole time in flight on a loaded 2-core host), so the server's time may exceed the
#: client's by this much before it is taken for another request's.
OVERRUN_NS = 5_000_000
OVERRUN_FRACTION = 0.05


def _split_sensors(
    sensors: dict[str, dict[str, int]], req: FrameRequest, entry: Mapping[str, int], *, overrun: str = "other traffic"
) -> str | None:
    """Put the request's server stages and overhead in each of its sensors' trees; a reason instead when
    the server's time clearly exceeds the request's time in flight (then it is not this request's).
    ``overhead`` is never negative: where Triton's accounting outlasts the client's view it is 0."""
    for name in req.sensors:
        stages = sensors.get(name, {})
        in_flight = stages.get("in_flight")
        if in_flight is None:
            return "no client timing (the client does not report its serialisation time)"
        if entry["total"] > in_flight * (1 + OVERRUN_FRACTION) + OVERRUN_NS:
            return (
                f"{overrun} (server time {entry['total'] / 1e6:.3f} ms exceeds the request's "
                f"{in_flight / 1e6:.3f} ms in flight)"
            )
    compute = sum(entry[f"compute_{part}"] for part in ("input", "infer", "output"))
    for name in req.sensors:
        stages = sensors[name]
        stages.update({f"server_{stage}": ns for stage, ns in entry.items()})
        stages["server_compute"] = compute  # queue vs compute: what pipelining changes
        stages["overhead"] = max(0, stages["in_flight"] - entry["total"])
    return None


#: After this many frames without a single trace, :class:`TraceSplitter` stops waiting for traces.
_TRACELESS_FRAMES = 3


class TraceSplitter:
    """Adds Triton's own time per request to each frame's latency tree from Triton's trace: at any number
    of frames in flight, since every request is identified by its id (``"<frame>:<sensors>"``, as the
    dispatcher names it; :mod:`perception.triton._trace` for the files and their clocks).

    The stages, ``server_*`` and ``overhead`` are those of :class:`ServerSplitter` (one definition:
    :func:`_split_sensors`), but per request: a model serving several requests in a frame, late or
    failed requests and other clients' traffic (other ids) need no exclusion. Call :meth:`start` once
    before the first frame, then :meth:`attribute` with the results in frame order; nothing needs
    holding back (``gated`` is False). A request whose trace does not appear within
    ``settle_timeout_s`` is in ``server_unavailable`` with the reason.
    """

    source = "trace"
    gated = False

    def __init__(
        self,
        reader: TraceReader,
        sensors: Sequence[tuple[str, str, str]],
        *,
        batched_cameras: bool,
        settle_timeout_s: float = 1.0,
        poll_s: float = 0.002,
    ) -> None:
        self._reader = reader
        self._sensors = tuple(sensors)
        self._batched = batched_cameras
        self._settle_s = settle_timeout_s
        self._poll_s = poll_s
        #: (frame id, sensor) -> its request's trace; frames up to ``_done`` are forgotten.
        self._traces: dict[tuple[int, str], RequestTrace] = {}
        self._done: int | None = None
        #: Frames with answered requests but no trace at all so far: a server that writes none (its trace
        #: off or unwritable) would otherwise cost every frame the settle timeout.
        self._traceless = 0
        self._found_any = False

    async def start(self) -> None:
        """Forget the traces so far (warm-up requests)."""
        self._reader.poll()

    def _take(self) -> None:
        for tr in self._reader.poll():
            frame, sep, names = tr.request_id.partition(":")
            if not sep or not frame.lstrip("-").isdigit():
                continue  # not a frame's request (warm-up, another client)
            fid = int(frame)
            if self._done is not None and fid <= self._done:
                continue  # a late request of a frame already reported
            for name in names.split(","):
                self._traces[(fid, name)] = tr

    async def attribute(self, result: FrameResult) -> FrameResult:
        """``result`` with ``server_*``, ``in_flight`` and ``overhead`` per answered sensor and Triton's
        time per model (``latency.server``, summed over the model's requests of the frame)."""
        result = with_in_flight(result)
        try:
            if result.status is FrameStatus.DROPPED:
                return result
            return await self._attribute(result)
        finally:
            self._forget(result.frame_id)

    async def _attribute(self, result: FrameResult) -> FrameResult:
        fid = result.frame_id
        answered = [r for r in frame_requests(result, self._sensors, batched_cameras=self._batched) if r.ok]
        settle = 0.0 if self._traceless >= _TRACELESS_FRAMES else self._settle_s
        give_up = time.monotonic() + settle
        self._take()
        while any((fid, r.sensors[0]) not in self._traces for r in answered) and time.monotonic() < give_up:
            await anyio.sleep(self._poll_s)
            self._take()
        sensors = {name: dict(stages) for name, stages in result.latency.sensors.items()}
        server: dict[str, dict[str, int]] = {}
        unavailable: dict[str, str] = {}
        for req in answered:
            tr = self._traces.get((fid, req.sensors[0]))
            entry = tr.stages() if tr is not None else None
            if entry is None:
                unavailable[req.model] = (
                    f"no trace (Triton wrote none for request {fid}:{','.join(req.sensors)} within {settle * 1e3:g} ms)"
                    if tr is None
                    else f"no trace (request {fid}:{','.join(req.sensors)} traced without compute timestamps)"
                )
                continue
            self._found_any = True
            # a request's own server time cannot exceed its time in flight: then the trace is another's
            reason = _split_sensors(sensors, req, entry, overrun="not this request's trace (a request id reused?)")
            if reason is not None:
                unavailable[req.model] = reason
                continue
            acc = server.setdefault(req.model, {"requests": 0, **dict.fromkeys((*SERVER_STAGES, "total"), 0)})
            acc["requests"] += 1
            for stage, ns in entry.items():
                acc[stage] += ns
        for model in unavailable:
            server.pop(model, None)
        if answered and not self._found_any:
            self._traceless += 1
            if self._traceless == _TRACELESS_FRAMES:
                log.warning(
                    "no trace of any request in %d frames from %s: the server writes none; not waiting for it",
                    _TRACELESS_FRAMES,
                    self._reader.directory,
                )
        latency = dataclasses.replace(result.latency, sensors=sensors, server=server, server_unavailable=unavailable)
        return dataclasses.replace(result, latency=latency)

    def _forget(self, frame_id: int) -> None:
        self._done = frame_id if self._done is None else max(self._done, frame_id)
        done = self._done
        for key in [k for k in self._traces if k[0] <= done]:
            del self._traces[key]
