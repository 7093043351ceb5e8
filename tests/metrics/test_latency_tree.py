"""The latency tree's pure parts: which requests a frame made, records, aggregation and budget rows."""

from __future__ import annotations

import dataclasses

from perception.metrics import (
    LatencyAccumulator,
    ServerSplit,
    budget_rows,
    frame_record,
    server_section,
    with_in_flight,
)
from perception.metrics._budget import NO_DATA
from perception.metrics._server_split import frame_requests
from perception.types import FrameResult, FrameStatus, LatencyTree, SensorResult, SensorStatus

MS = 1_000_000
SENSORS = [
    ("lidar", "lidar", "lidar_model"),
    ("cam_a", "camera", "cam_model"),
    ("cam_b", "camera", "cam_model"),
    ("radar", "radar", "radar_model"),
]


def _result(statuses: dict[str, SensorStatus], **latency: object) -> FrameResult:
    models = {name: model for name, _, model in SENSORS}
    sensors = {n: SensorResult(n, st, model=models[n]) for n, st in statuses.items()}
    return FrameResult(0, 0, FrameStatus.OK, sensors, latency=LatencyTree(**latency))  # type: ignore[arg-type]


def test_batched_cameras_are_one_request_and_unanswered_requests_are_flagged() -> None:
    r = _result(
        {
            "lidar": SensorStatus.OK,
            "cam_a": SensorStatus.OK,
            "cam_b": SensorStatus.ERROR,  # failed decoding: left out of the batch, which was answered
            "radar": SensorStatus.LATE,
        }
    )
    reqs = {(q.model, q.sensors, q.ok) for q in frame_requests(r, SENSORS, batched_cameras=True)}
    assert reqs == {
        ("lidar_model", ("lidar",), True),
        ("cam_model", ("cam_a",), True),
        ("radar_model", ("radar",), False),
    }
    per_camera = frame_requests(r, SENSORS, batched_cameras=False)
    assert [(q.sensors, q.ok) for q in per_camera if q.model == "cam_model"] == [
        (("cam_a",), True),
        (("cam_b",), False),
    ]
    missing = _result({"lidar": SensorStatus.MISSING, "radar": SensorStatus.SKIPPED})
    assert frame_requests(missing, SENSORS, batched_cameras=True) == []


def test_records_and_aggregates_carry_the_split_and_the_reasons() -> None:
    stages = {"total": 30 * MS, "preprocess": 1 * MS, "serialize": 2 * MS, "request": 29 * MS}
    server = {"queue": 1 * MS, "compute_input": 0, "compute_infer": 20 * MS, "compute_output": 0, "total": 21 * MS}
    r = _result(
        {"lidar": SensorStatus.OK, "cam_a": SensorStatus.OK, "cam_b": SensorStatus.OK, "radar": SensorStatus.OK},
        total_ns=40 * MS,
        sensors={"lidar": stages, "cam_a": stages, "cam_b": stages, "radar": stages},
        server={"lidar_model": {"requests": 1, **server}, "cam_model": {"requests": 2, **server}},
        server_unavailable={"radar_model": "other traffic (Triton counted 3 ...)"},
    )
    r = with_in_flight(r)
    assert r.latency.sensors["lidar"]["in_flight"] == 27 * MS
    rec = frame_record(r)
    lat = rec["latency_ms"]
    assert lat["server"]["lidar_model"] == {"requests": 1, "queue": 1.0, "compute_input": 0.0,
                                           "compute_infer": 20.0, "compute_output": 0.0, "total": 21.0}  # fmt: skip
    assert lat["sensors"]["radar"]["server_unavailable"].startswith("other traffic")
    assert "only their sum is known" in lat["sensors"]["cam_a"]["server_unavailable"]
    acc = LatencyAccumulator(budget_ns=100 * MS)
    acc.add(r)
    assert acc.server_split() == {
        "cam_model": {"frames": 1, "unavailable": {}},
        "lidar_model": {"frames": 1, "unavailable": {}},
        "radar_model": {"frames": 0, "unavailable": {"other traffic": 1}},
    }
    assert acc.summary()["latency_ms"]["server"]["lidar_model"]["compute_infer"]["p50"] == 20.0
    md = "\n".join(server_section(
        dataclasses.replace(acc.report(), server_split=ServerSplit(per_frame=True, models=acc.server_split())), acc
    ))
    assert "lidar_model.compute_infer" in md and "radar_model: server time attributed in 0 frame(s)" in md


def test_budget_rows_show_the_client_server_split_and_never_pass_unmeasured_budgets() -> None:
    tree = {"total": 30 * MS, "preprocess": MS, "serialize": 2 * MS, "request": 29 * MS, "in_flight": 27 * MS,
            "server_total": 21 * MS, "server_compute_infer": 20 * MS, "overhead": 6 * MS}  # fmt: skip
    acc = LatencyAccumulator(budget_ns=100 * MS)
    acc.add(
        _result({"lidar": SensorStatus.OK}, total_ns=40 * MS, stages={"dispatch": 30 * MS}, sensors={"lidar": tree})
    )
    budgets = {"lidar.server_compute_infer": 10.0, "lidar": 50.0, "camera.overhead": 5.0}
    rows = {r.stage: r for r in budget_rows(acc, 100.0, budgets, 99.0)}
    expected = {"total", "dispatch", "lidar.total", "lidar.preprocess", "lidar.serialize", "lidar.in_flight",
                "lidar.server_total", "lidar.overhead", "lidar.server_compute_infer", "camera.overhead"}  # fmt: skip
    assert set(rows) == expected
    assert rows["lidar.server_compute_infer"].verdict == "FAIL"  # 20 ms > 10 ms
    assert rows["lidar.total"].verdict == "ok" and rows["lidar.total"].budget_ms == 50.0
    assert rows["camera.overhead"].verdict == NO_DATA


def test_sensors_of_any_batching_kind_share_a_request() -> None:
    """A registered kind whose model batches (like the camera) is grouped as the dispatcher groups it."""
    import dataclasses

    from perception.kinds import CAMERA, register_kind, unregister_kind

    register_kind(dataclasses.replace(CAMERA, name="thermal_split"))
    try:
        sensors = [("th_a", "thermal_split", "th_model"), ("th_b", "thermal_split", "th_model")]
        ok = {n: SensorResult(n, SensorStatus.OK, model="th_model") for n in ("th_a", "th_b")}
        r = FrameResult(0, 0, FrameStatus.OK, ok)
        reqs = [(q.model, q.sensors) for q in frame_requests(r, sensors, batched_cameras=True)]
        assert reqs == [("th_model", ("th_a", "th_b"))]
    finally:
        unregister_kind("thermal_split")
