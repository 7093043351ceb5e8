"""report.json as one typed, versioned object: it round-trips, and a broken file is a clear error naming
the file and the key."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from perception.errors import ConfigError, ReportError
from perception.metrics import BudgetVerdict, LatencyAccumulator, ModelServed, RunCounters, RunReport, ServerSplit
from perception.metrics._run_report import REPORT_SCHEMA_VERSION
from perception.types import FrameResult, FrameStatus, LatencyTree, SensorResult, SensorStatus

MS = 1_000_000


def _accumulator() -> LatencyAccumulator:
    acc = LatencyAccumulator(budget_ns=100 * MS)
    for i in range(5):
        status = SensorStatus.OK if i != 3 else SensorStatus.LATE
        sensors = {"lidar_top": SensorResult("lidar_top", status, latency_ns=(20 + i) * MS)}
        stages = {"dispatch": (20 + i) * MS, "fusion": 2 * MS}
        latency = LatencyTree(total_ns=sum(stages.values()), stages=stages, sensors={"lidar_top": {"total": 20 * MS}})
        frame_status = FrameStatus.OK if status is SensorStatus.OK else FrameStatus.DEGRADED
        acc.add(FrameResult(i, i * 100 * MS, frame_status, sensors, (), latency))
    acc.add(FrameResult(5, 500 * MS, FrameStatus.DROPPED, {}, reason="queue overflow (drop-oldest)"))
    return acc


def _report() -> RunReport:
    acc = _accumulator()
    base = acc.report()
    return RunReport(
        base.counters,
        base.latency,
        drive="/drives/urban.mcap",
        rate="lockstep",
        models={"lidar_top": ModelServed("lidar_detector", ("1",))},
        alignment={"frames": 6, "dropped": {"late": 1}},
        server_ms={"lidar_detector": {"requests": 5.0, "queue_ms": 1.0, "total_ms": 21.0}},
        late_causes={"lidar_detector": {"late": 1, "server_ms": 21.0, "queue_ms": 1.0, "cause": "compute"}},
        server_split=ServerSplit(per_frame=False, why_not="turned off", models=acc.server_split()),
        interrupted=False,
        admission={"mode": "fixed", "peak": 1},
        image_size_mismatch={"cam_front": 2},
        server_crashes={"crashes": 1, "restarts": 1, "logs": ["/tmp/perception-tritonserver-x.log"]},
        quality={"mAP": 0.5, "per_class_ap": {"car": 0.5}},
        budget=BudgetVerdict(100.0, 99.0, ("total",), ({"stage": "total", "p99": 120.0},)),
    )


def test_a_report_round_trips_through_its_json(tmp_path: Path) -> None:
    report = _report()
    path = tmp_path / "report.json"
    report.write(path)
    data = json.loads(path.read_text())
    assert data["schema_version"] == REPORT_SCHEMA_VERSION
    assert RunReport.from_json(path) == report
    assert RunReport.from_json(data).to_json() == data
    # the layout report.json always had: the counters and latency_ms at the top, the budget's verdict
    assert data["frames"] == 6 and data["dropped"] == 1 and data["degraded"] == 1 and data["usable"] == 4
    assert data["latency_ms"]["total"]["n"] == 5 and set(data["latency_ms"]) == {"total", "stages", "sensors", "server"}
    assert data["sensor_status"] == {"lidar_top": {"ok": 4, "late": 1}}
    assert data["models"] == {"lidar_top": {"model": "lidar_detector", "versions": ["1"]}}
    assert data["budget"]["passed"] is False and data["budget"]["violations"] == ["total"]
    assert data["server_crashes"] == {"crashes": 1, "restarts": 1, "logs": ["/tmp/perception-tritonserver-x.log"]}
    assert data["server_split"] == {
        "per_frame": False,
        "source": None,
        "why_not": "turned off",
        "models": {},
    }


def test_the_accumulator_summary_is_the_report_s_json() -> None:
    acc = _accumulator()
    assert acc.summary() == acc.report().to_json()
    assert RunReport.from_json(acc.summary()) == acc.report()


def test_runs_counters_pooled_are_those_of_their_frames_accumulated_together() -> None:
    # A fleet's drives report their counters (not their accumulators): pooled, they are what one
    # accumulator of every drive's frames counts, per sensor and status and per drop reason too.
    first, second = _accumulator(), _accumulator()
    error = SensorResult("radar_front", SensorStatus.ERROR, error="model failed")
    late = SensorResult("lidar_top", SensorStatus.LATE)
    second.add(FrameResult(6, 600 * MS, FrameStatus.DEGRADED, {"lidar_top": late, "radar_front": error}, ()))
    merged = _accumulator()
    merged.merge(second)
    pooled = RunCounters.pooled([first.counters(), second.counters()])
    assert pooled == merged.counters()
    assert pooled.sensor_status == {"lidar_top": {"ok": 8, "late": 3}, "radar_front": {"error": 1}}
    assert (pooled.frames, pooled.dropped, dict(pooled.drop_reasons)) == (13, 2, {"queue overflow": 2})
    assert pooled.first_errors == {"radar_front": "model failed"} and pooled.deadline_ms == 100.0
    other = RunCounters(frames=1, ok=1, deadline_ms=200.0)
    assert RunCounters.pooled([first.counters(), other]).deadline_ms == 0.0  # no one deadline
    assert RunCounters.pooled([]) == RunCounters()


def test_a_report_without_schema_version_is_of_the_first() -> None:
    data = _report().to_json()
    del data["schema_version"]
    assert RunReport.from_json(data).schema_version == 1


def _broken(tmp_path: Path, change: Any) -> Path:
    data = _report().to_json()
    change(data)
    path = tmp_path / "report.json"
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize(
    ("change", "key", "message"),
    [
        (lambda d: d.pop("frames"), "frames", "missing"),
        (lambda d: d.pop("deadline_ms"), "deadline_ms", "missing"),
        (lambda d: d["latency_ms"]["total"].pop("p99"), "latency_ms.total.p99", "missing"),
        (lambda d: d["latency_ms"]["total"].pop("n"), "latency_ms.total.n", "missing"),
        (lambda d: d["latency_ms"]["stages"]["fusion"].pop("n"), "latency_ms.stages.fusion.n", "missing"),
        (lambda d: d["latency_ms"]["total"].update(n=True), "latency_ms.total.n", "expected an integer, got True"),
        (lambda d: d["latency_ms"]["total"].update(p50=True), "latency_ms.total.p50", "expected a number, got True"),
        (lambda d: d["latency_ms"]["stages"]["fusion"].update(max=False), "latency_ms.stages.fusion.max", "number"),
        (lambda d: d.update(frames="many"), "frames", "expected an integer, got 'many'"),
        (lambda d: d.update(ok=True), "ok", "expected an integer, got True"),
        (lambda d: d["latency_ms"]["stages"]["fusion"].update(p50="fast"), "latency_ms.stages.fusion.p50", "number"),
        (lambda d: d["sensor_status"]["lidar_top"].update(ok=1.5), "sensor_status.lidar_top.ok", "integer"),
        (lambda d: d.update(quality=[1, 2]), "quality", "expected an object, got list"),
        (lambda d: d["models"]["lidar_top"].pop("model"), "models.lidar_top.model", "missing"),
        (lambda d: d["server_split"].update(per_frame="yes"), "server_split.per_frame", "expected true or false"),
        (lambda d: d.update(interrupted=1), "interrupted", "expected true or false"),
        (lambda d: d.update(drive=3), "drive", "expected a string"),
        (lambda d: d.update(latency_ms=None), "latency_ms", "not a replay report"),
        (lambda d: d.update(schema_version=REPORT_SCHEMA_VERSION + 1), "schema_version", "newer version"),
        (lambda d: d.update(schema_version="2"), "schema_version", "expected an integer"),
    ],
)
def test_a_broken_report_names_its_file_and_key(tmp_path: Path, change: Any, key: str, message: str) -> None:
    path = _broken(tmp_path, change)
    with pytest.raises(ReportError, match=message) as err:
        RunReport.from_json(path)
    assert err.value.file == str(path) and err.value.key == key
    assert str(err.value).startswith(f"{path}: {key}: ")  # one line naming both
    assert isinstance(err.value, ConfigError)  # a user's input error: the CLI prints it, no traceback


def test_a_future_schema_says_to_upgrade(tmp_path: Path) -> None:
    path = _broken(tmp_path, lambda d: d.update(schema_version=REPORT_SCHEMA_VERSION + 1))
    with pytest.raises(ReportError, match=f"schema {REPORT_SCHEMA_VERSION + 1}.*upgrade"):
        RunReport.from_json(path)


def test_an_unreadable_report_names_its_file(tmp_path: Path) -> None:
    path = tmp_path / "report.json"
    with pytest.raises(ReportError, match="cannot read the report") as err:
        RunReport.from_json(path)
    assert err.value.file == str(path)
    path.write_text('{"frames": ')
    with pytest.raises(ReportError, match="not valid JSON") as err:
        RunReport.from_json(path)
    assert err.value.file == str(path)
    path.write_text("[1, 2]")
    with pytest.raises(ReportError, match="not a replay report: expected a JSON object"):
        RunReport.from_json(path)
    with pytest.raises(ReportError, match="missing") as err:  # decoded data: named by the file given
        RunReport.from_json({"latency_ms": {}}, file="somewhere/report.json")
    assert err.value.file == "somewhere/report.json" and err.value.key == "frames"
