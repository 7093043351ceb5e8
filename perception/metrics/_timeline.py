"""Every frame's latency tree as a timeline: Chrome trace-event JSON, which Perfetto (ui.perfetto.dev) and
chrome://tracing open (``--trace-out FILE``).

The file is a JSON array of events, written as frames complete (constant memory at any drive length):

* one process per run (``process_name``: the command and drive);
* a frame track: the frame as a complete (``X``) event with its stages nested in order, ``schedule_wait``,
  ``dispatch``, ``join_wait``, ``fusion_wait`` (for its predecessor's fusion),
  ``fusion_handoff`` (the fusion call's handoff to its thread and back), ``fusion``, ``tracking``; ``args``
  carry its status and ``deadline_missed``; a frame over its deadline is in category
  ``frame,deadline_missed`` and gets an instant event ``deadline missed`` at its end;
* one track per sensor: its request (``<sensor>``, the sensor's ``total``) with ``preprocess`` then
  ``request``, which holds ``serialize`` then ``in_flight``, which holds ``server`` (Triton's
  ``queue``, ``compute_input``, ``compute_infer``, ``compute_output`` in order) when the split is known;
* flow events (``s``/``f``) from the frame's ``dispatch`` to each of its requests.

Frames in flight together overlap, so frames go to lanes (the first lane free at the frame's start) and
each lane has its own frame track and sensor tracks: ``frame`` / ``lidar_top`` in lane 0, ``frame #1`` /
``lidar_top #1`` in lane 1, and so on.

Every interval is a duration of the frame's latency tree placed as the tree defines it: a frame starts
at ``LatencyTree.start_ns`` and its stages follow one another; every request starts when dispatch does
(the tree's own reading: ``dispatch`` lasts until the last answer). Within ``in_flight`` the server's
block is centred: the tree has its duration, not where the network/gRPC overhead fell around it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from perception.types import FUSION_HANDOFF, SERVER_STAGES, FrameResult, FrameStatus

__all__ = ["ChromeTrace", "timeline_sink"]

#: The frame's stages in the order they happen (others, if any, follow in the tree's order).
FRAME_STAGES = ("schedule_wait", "dispatch", "join_wait", "fusion_wait", FUSION_HANDOFF, "fusion", "tracking")
_PID = 1
_LANE_TIDS = 100  # tid = lane * 100 + track (0: the frame, 1..: sensors)


def _us(ns: int) -> float:
    return round(ns / 1e3, 3)


class ChromeTrace:
    """Writes frame results (:meth:`add`, in any order) as a Chrome trace-event file (see module docs)."""

    def __init__(self, path: Path, *, process_name: str = "perception") -> None:
        self._path = Path(path)
        self._name = process_name
        self._fh: IO[str] | None = None
        self._first = True
        self._t0: int | None = None
        self._lane_ends: list[int] = []
        self._tracks: dict[tuple[int, str], int] = {}  # (lane, sensor) -> tid
        self._flow = 0

    def __enter__(self) -> ChromeTrace:
        self._path.parent.mkdir(parents=True, exist_ok=True)
        self._fh = self._path.open("w", encoding="utf-8")
        self._fh.write("[\n")
        self._emit({"ph": "M", "pid": _PID, "name": "process_name", "args": {"name": self._name}})
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._fh is not None:
            self._fh.write("\n]\n")
            self._fh.close()
            self._fh = None

    def _emit(self, event: Mapping[str, Any]) -> None:
        assert self._fh is not None, "ChromeTrace used outside its `with` block"
        if not self._first:
            self._fh.write(",\n")
        self._first = False
        self._fh.write(json.dumps(event, separators=(",", ":")))

    def _track(self, lane: int, sensor: str | None) -> int:
        key = (lane, sensor or "")
        tid = self._tracks.get(key)
        if tid is None:
            tid = lane * _LANE_TIDS + len([k for k in self._tracks if k[0] == lane])
            self._tracks[key] = tid
            suffix = f" #{lane}" if lane else ""
            self._emit(
                {
                    "ph": "M",
                    "pid": _PID,
                    "tid": tid,
                    "name": "thread_name",
                    "args": {"name": (sensor or "frame") + suffix},
                }
            )
            self._emit({"ph": "M", "pid": _PID, "tid": tid, "name": "thread_sort_index", "args": {"sort_index": tid}})
        return tid

    def _x(
        self, tid: int, name: str, start_ns: int, dur_ns: int, cat: str, args: Mapping[str, Any] | None = None
    ) -> None:
        assert self._t0 is not None
        event: dict[str, Any] = {
            "ph": "X",
            "pid": _PID,
            "tid": tid,
            "name": name,
            "cat": cat,
            "ts": _us(start_ns - self._t0),
            "dur": _us(max(0, dur_ns)),
        }
        if args:
            event["args"] = dict(args)
        self._emit(event)

    def _lane(self, start: int, end: int) -> int:
        for i, busy_until in enumerate(self._lane_ends):
            if busy_until <= start:
                self._lane_ends[i] = end
                return i
        self._lane_ends.append(end)
        return len(self._lane_ends) - 1

    def add(self, r: FrameResult) -> None:
        lt = r.latency
        if r.status is FrameStatus.DROPPED or not lt.start_ns:
            return  # never processed: nothing happened on any track
        if self._t0 is None:
            self._t0 = lt.start_ns
        start, end = lt.start_ns, lt.start_ns + lt.total_ns
        lane = self._lane(start, end)
        ftid = self._track(lane, None)
        missed = r.deadline_missed
        args = {"frame_id": r.frame_id, "t_ns": r.t_ns, "status": r.status.value, "deadline_missed": missed}
        if r.reason:
            args["reason"] = r.reason
        self._x(ftid, f"frame {r.frame_id}", start, lt.total_ns, "frame,deadline_missed" if missed else "frame", args)
        order = [s for s in FRAME_STAGES if s in lt.stages] + [s for s in lt.stages if s not in FRAME_STAGES]
        t = start
        dispatch_start = start + lt.stages.get("schedule_wait", 0)
        for stage in order:
            self._x(ftid, stage, t, lt.stages[stage], "stage", {"frame_id": r.frame_id})
            t += lt.stages[stage]
        if missed:
            self._emit(
                {
                    "ph": "i",
                    "s": "t",
                    "pid": _PID,
                    "tid": ftid,
                    "name": "deadline missed",
                    "cat": "deadline_missed",
                    "ts": _us(end - self._t0),
                    "args": {"frame_id": r.frame_id, "total_ms": _us(lt.total_ns) / 1e3},
                }
            )
        for sensor, stages in lt.sensors.items():
            self._sensor(r, lane, ftid, dispatch_start, sensor, stages)

    def _sensor(self, r: FrameResult, lane: int, ftid: int, t: int, sensor: str, stages: Mapping[str, int]) -> None:
        assert self._t0 is not None
        tid = self._track(lane, sensor)
        res = r.sensors.get(sensor)
        status = res.status.value if res is not None else "unknown"
        total = stages.get("total", 0)
        self._flow += 1
        flow = {"pid": _PID, "name": "request", "cat": "request", "id": self._flow}
        self._emit({**flow, "ph": "s", "tid": ftid, "ts": _us(t - self._t0)})
        self._emit({**flow, "ph": "f", "bp": "e", "tid": tid, "ts": _us(t - self._t0)})
        args: dict[str, Any] = {"frame_id": r.frame_id, "status": status}
        if res is not None and res.model:
            args["model"] = res.model
        if res is not None and res.error:
            args["error"] = res.error
        why = r.latency.server_unavailable.get(res.model) if res is not None and res.model else None
        if why:
            args["server_unavailable"] = why
        self._x(tid, sensor, t, total, "sensor", args)
        pre = stages.get("preprocess", 0)
        if "preprocess" in stages:
            self._x(tid, "preprocess", t, pre, "client")
        if "request" not in stages:
            return
        req_start = t + pre
        self._x(tid, "request", req_start, stages["request"], "client")
        ser = stages.get("serialize", 0)
        self._x(tid, "serialize", req_start, ser, "client")
        in_flight = stages.get("in_flight")
        if in_flight is None:
            return
        fly_start = req_start + ser
        self._x(tid, "in_flight", fly_start, in_flight, "network")
        server = stages.get("server_total")
        if server is None:
            return
        s = fly_start + max(0, in_flight - server) // 2
        self._x(
            tid,
            "server",
            s,
            server,
            "server",
            {"frame_id": r.frame_id, "overhead_ms": _us(stages.get("overhead", 0)) / 1e3},
        )
        for stage in SERVER_STAGES:
            ns = stages.get(f"server_{stage}", 0)
            self._x(tid, f"server_{stage}", s, ns, "server")
            s += ns


def timeline_sink(path: Path, *, process_name: str) -> Callable[..., ChromeTrace]:
    """A replay sink (``replay_drive(sinks=[...])``) writing the run's :class:`ChromeTrace` to ``path``."""

    def sink(*_: object) -> ChromeTrace:
        return ChromeTrace(path, process_name=process_name)

    return sink
