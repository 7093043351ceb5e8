"""Per-frame client/server split of every request, from Triton's cumulative statistics.

Triton counts, per model, successful requests and the nanoseconds they spent in its queue, copying
inputs in (``compute_input``), running the model (``compute_infer``) and copying outputs out
(``compute_output``). With one frame in flight, the difference between two snapshots taken around a
frame is exactly that frame's requests -- provided the count difference equals the number of requests
this client sent to the model for the frame. :class:`ServerSplitter` checks that, and otherwise marks
the model's split unavailable for the frame with the reason; it never guesses. It works against any
Triton (embedded or external) and needs nothing from the models.

Why not Triton's trace API: in Triton 2.51 the trace file can only be set when the server is launched
(``--trace-config triton,file=...``; changing it at run time was removed), it is written on the
server's host, and only every ``log-frequency`` traces (a file per flush) or at shutdown. That suits
offline analysis of a server one controls, not a per-frame tree from any server as frames complete.

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
from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import anyio

from perception.errors import PerceptionError
from perception.kinds import kind_def
from perception.types import SERVER_STAGES, FrameResult, FrameStatus, SensorStatus

__all__ = ["FrameRequest", "ServerSplitter", "frame_requests", "with_in_flight"]

log = logging.getLogger(__name__)

class Statistics(Protocol):
    """``model -> cumulative statistics``, waiting until the counters in ``at_least`` reach their values
    (then or at its bound, one snapshot): :meth:`perception.triton.TritonClient.model_statistics`."""

    def __call__(self, model: str, *, at_least: Mapping[str, int] | None = None) -> Awaitable[Mapping[str, int]]: ...


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

    A sensor that was missing or skipped sent nothing. With batched camera requests the sensors of a
    batching kind (cameras) of one model share one request, answered when any of them is ok (a camera
    whose image failed to decode is left out of the batch, not sent).
    """
    out: list[FrameRequest] = []
    batches: dict[str, list[tuple[str, SensorStatus]]] = {}
    for name, kind, model in sensors:
        r = result.sensors.get(name)
        if r is None or r.status not in _SENT:
            continue
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

    @property
    def models(self) -> tuple[str, ...]:
        return self._models

    async def start(self) -> None:
        """The baseline snapshot of every model."""
        self._last = await self._snapshot(self._models)

    async def _query(
        self, model: str, out: dict[str, Mapping[str, int] | None], at_least: Mapping[str, int] | None = None
    ) -> None:
        try:
            with anyio.fail_after(self._query_s):
                out[model] = await self._statistics(model, at_least=at_least)
        except (PerceptionError, TimeoutError) as exc:
            log.warning("statistics of model %s unavailable: %s", model, exc)
            out[model] = None

    async def _snapshot(
        self, models: Sequence[str], expected: Mapping[str, int] | None = None
    ) -> dict[str, Mapping[str, int] | None]:
        """One snapshot of each model; a model in ``expected`` waits until Triton has counted that many
        more requests (their success and each stage) than in the previous snapshot."""
        out: dict[str, Mapping[str, int] | None] = {}
        async with anyio.create_task_group() as tg:
            for model in models:
                before, n = self._last.get(model), (expected or {}).get(model)
                at_least = None
                if before is not None and n:
                    at_least = {f"{k}_count": int(before.get(f"{k}_count", 0)) + n for k in ("success", *SERVER_STAGES)}
                tg.start_soon(self._query, model, out, at_least)
        return out

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


def _split_sensors(sensors: dict[str, dict[str, int]], req: FrameRequest, entry: Mapping[str, int]) -> str | None:
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
                f"other traffic (server time {entry['total'] / 1e6:.3f} ms exceeds the request's "
                f"{in_flight / 1e6:.3f} ms in flight)"
            )
    for name in req.sensors:
        stages = sensors[name]
        stages.update({f"server_{stage}": ns for stage, ns in entry.items()})
        stages["overhead"] = max(0, stages["in_flight"] - entry["total"])
    return None
