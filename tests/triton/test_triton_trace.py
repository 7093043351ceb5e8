"""Reading Triton's per-request trace files (no server: the files as Triton 2.51 writes them)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from perception.triton import TraceReader, trace_flags
from perception.triton._trace import TRACE_EVENTS


def _trace(tid: int, request_id: str, t0: int = 1_000_000, model: str = "lidar_detector") -> list[dict[str, Any]]:
    """One request's trace objects, as Triton writes them at level TIMESTAMPS (events 1 ms apart, then
    the gRPC frontend's own events after REQUEST_END)."""
    objs: list[dict[str, Any]] = [{"id": tid, "model_name": model, "model_version": 1, "request_id": request_id}]
    objs += [{"id": tid, "timestamps": [{"name": n, "ns": t0 + i * 1_000_000}]} for i, n in enumerate(TRACE_EVENTS)]
    objs.append({"id": tid, "timestamps": [{"name": "GRPC_SEND_END", "ns": t0 + 9_000_000}]})
    return objs


def _text(objs: list[dict[str, Any]]) -> str:
    return json.dumps(objs, separators=(",", ":"))


def test_flags_name_the_file_and_write_every_request_at_once(tmp_path: Path) -> None:
    flags = trace_flags(tmp_path / "trace.json")
    assert f"--trace-config=triton,file={tmp_path / 'trace.json'}" in flags
    assert "--trace-config=triton,log-frequency=1" in flags and "--trace-config=level=TIMESTAMPS" in flags


def test_one_file_per_request_gives_its_stages_and_is_deleted(tmp_path: Path) -> None:
    (tmp_path / "trace.json.0").write_text(_text(_trace(1, "warmup-0")))
    (tmp_path / "trace.json.1").write_text(_text(_trace(2, "7:lidar_top", t0=5_000_000)))
    (tmp_path / "other.log").write_text("not a trace")
    reader = TraceReader(tmp_path)
    traces = reader.poll()
    assert [t.request_id for t in traces] == ["warmup-0", "7:lidar_top"]
    tr = traces[1]
    assert tr.model == "lidar_detector" and tr.version == "1"
    # queue = COMPUTE_START - QUEUE_START, ... each 1 ms here; total their sum
    assert tr.stages() == {
        "queue": 1_000_000,
        "compute_input": 1_000_000,
        "compute_infer": 1_000_000,
        "compute_output": 1_000_000,
        "total": 4_000_000,
    }
    assert tr.request_ns == 6_000_000
    assert tr.after_response_ns == 0  # no INFER_RESPONSE_COMPLETE: nothing known after the response
    assert sorted(os.listdir(tmp_path)) == ["other.log"]  # read files are gone
    assert reader.poll() == []


def test_time_after_the_response_left_is_not_the_requests(tmp_path: Path) -> None:
    """The python backend closes compute_output after its response was sent (measured on Triton 2.51):
    the client never waited for that part, so the stages end at the response."""
    objs = _trace(1, "4:lidar_top")  # COMPUTE_OUTPUT_START at +4 ms, COMPUTE_END at +5 ms
    objs.append({"id": 1, "timestamps": [{"name": "INFER_RESPONSE_COMPLETE", "ns": 1_000_000 + 4_250_000}]})
    (tmp_path / "trace.json.0").write_text(_text(objs))
    (tr,) = TraceReader(tmp_path).poll()
    stages = tr.stages()
    assert stages is not None
    assert stages["compute_output"] == 250_000 and stages["total"] == 3_250_000
    assert tr.after_response_ns == 750_000


def test_a_partial_file_is_read_as_it_grows(tmp_path: Path) -> None:
    text = _text(_trace(3, "1:radar_front") + _trace(4, "1:cam_front,cam_left"))
    path = tmp_path / "trace.json.0"
    reader = TraceReader(tmp_path, delete=False)
    cut = text.index('"REQUEST_END"') + 5  # mid-object, before the first trace's end
    path.write_text(text[:cut])
    assert reader.poll() == []
    second = text.index('{"id":4')
    path.write_text(text[: second + 10])  # the first trace complete, the second just begun
    (first,) = reader.poll()
    assert first.request_id == "1:radar_front" and first.stages() is not None
    path.write_text(text)
    (again,) = reader.poll()  # nothing read twice
    assert again.request_id == "1:cam_front,cam_left"
    assert reader.poll() == []
    assert path.exists()  # not the reader's to delete


def test_a_trace_without_compute_has_no_stages_and_junk_is_skipped(tmp_path: Path) -> None:
    objs = _trace(5, "2:lidar_top")
    objs = [o for o in objs if not any(s["name"] == "COMPUTE_START" for s in o.get("timestamps", []))]
    (tmp_path / "trace.json.0").write_text(_text([*objs, {"id": "x"}, 17, {"no": "id"}]))
    (tr,) = TraceReader(tmp_path).poll()
    assert tr.stages() is None


def test_a_file_that_never_completes_is_abandoned(tmp_path: Path) -> None:
    path = tmp_path / "trace.json.0"
    path.write_text(_text(_trace(6, "3:lidar_top"))[:40])
    old = time.time() - 60
    os.utime(path, (old, old))
    reader = TraceReader(tmp_path)
    assert reader.poll() == []
    assert not path.exists()
