"""A drive's fleet summary is one typed record (DriveSummary) from the worker to the report and the CLI."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from perception.fleet._report import fleet_totals, write_report
from perception.fleet._summary import BudgetResult, DriveSummary, Replayed
from perception.metrics import LatencySketch, RunCounters

LATENCY = {"total": {"n": 3, "p50": 10.0, "p99": 30.0}, "stages": {"fusion": {"p50": 1.0, "p99": 2.0}}}


def _ran(name: str, p99: float, **kw: object) -> DriveSummary:
    latency = {**LATENCY, "total": {**LATENCY["total"], "p99": p99}}
    replayed = Replayed(RunCounters(3, 3, 2, 1, 0, 100.0, 0), latency, mAP=0.5)
    return DriveSummary(name, f"{name}.mcap", pid=1, host="h", ground_truth=True, urls=("u",), replayed=replayed, **kw)  # type: ignore[arg-type]


def test_the_summary_round_trips_through_its_json() -> None:
    s = _ran("a", 30.0, budget=BudgetResult(50.0, 99.0, False, ("total p99",)), evaluated=True, wall_s=1.5)
    data = json.loads(json.dumps(s.to_json()))
    assert data["frames"] == 3 and data["mAP"] == 0.5 and data["error"] is None and data["modes"] is None
    assert "total_sketch" not in data and "error_type" not in data
    back = DriveSummary.from_json(data)
    assert back == s and back.over_budget and back.p99_ms == 30.0
    failed = DriveSummary("b", "b.mcap").failed(ValueError("boom"))
    assert (failed.status, failed.error, failed.error_type, failed.frames) == ("failed", "boom", "ValueError", 0)
    assert "frames" not in failed.to_json() and DriveSummary.from_json(failed.to_json()) == failed
    with pytest.raises(AttributeError):
        failed.statsu  # type: ignore[attr-defined]  # noqa: B018


def test_the_report_sorts_and_totals_typed_summaries(tmp_path: Path) -> None:
    sketch = LatencySketch()
    for ms in (10, 20, 30):
        sketch.add(ms * 1_000_000)
    drives = [
        _ran("fast", 20.0, total_sketch=sketch.to_dict()),
        DriveSummary("broken", "broken.mcap", status="failed", error="cannot read"),
        _ran("slow", 90.0, retries=("attempt 1: worker died",)),
    ]
    report = write_report(tmp_path, drives, {"workers": 1})
    assert [d["name"] for d in report["drives"]] == ["broken", "slow", "fast"]
    t = report["totals"]
    assert (t["frames"], t["ok"], t["degraded"], t["retried"], t["by_status"]) == (6, 4, 2, 1, {"ok": 2, "failed": 1})
    assert t["latency_ms"]["n"] == 3 and t["mean_drive_mAP"] == 0.5
    assert json.loads((tmp_path / "fleet.json").read_text())["drives"][0]["error"] == "cannot read"


def test_the_fleet_totals_are_one_typed_record_written_as_fleet_json_s_totals(tmp_path: Path) -> None:
    # The CLI prints the totals from FleetTotals (fleet_totals), the report writes the same record: a
    # misspelt total raises instead of a KeyError in the CLI's dict reads after the whole run.
    drives = [
        _ran("a", 20.0),
        dataclasses.replace(_ran("b", 40.0), ground_truth=False),
        DriveSummary("broken", "broken.mcap", status="failed", error="cannot read"),
    ]
    t = fleet_totals(drives)
    assert (t.drives, t.frames, t.ok, t.degraded, dict(t.by_status)) == (3, 6, 4, 2, {"failed": 1, "ok": 2})
    assert (t.drives_with_mAP, t.drives_without_ground_truth, t.mean_drive_mAP) == (2, ("b",), 0.5)
    report = write_report(tmp_path, drives, {"workers": 1}, fleet=t)
    assert report["totals"] == t.to_json() == json.loads((tmp_path / "fleet.json").read_text())["totals"]
    assert report["totals"]["drives_without_ground_truth"] == ["b"]
    assert write_report(tmp_path, drives, {"workers": 1})["totals"] == t.to_json()  # computed when not given
    with pytest.raises(AttributeError):
        t.frame  # type: ignore[attr-defined]  # noqa: B018


def test_a_drive_read_back_from_its_published_summary_is_pooled_in_the_totals() -> None:
    # A drive whose worker had published fleet_drive.json when a stop came is read back from it: its frames were
    # counted in the totals, its latency left out of the pooled percentiles (the sketch was not written out).
    fast, slow = LatencySketch(), LatencySketch()
    for ms in range(1, 101):
        fast.add(ms * 1_000_000)
        slow.add(500_000_000)
    a = _ran("a", 99.0, total_sketch=fast.to_dict())
    b = DriveSummary.from_json(
        json.loads(json.dumps(_ran("b", 500.0, total_sketch=slow.to_dict()).to_json(sketch=True)))
    )
    assert b.total_sketch is not None
    totals = fleet_totals([a, b])
    assert totals.latency_ms["n"] == 200 and totals.latency_ms["max"] == 500.0
    assert "total_sketch" not in _ran("c", 1.0, total_sketch=fast.to_dict()).to_json()  # fleet.json's: without


#: A drive of 100 frames whose camera was late in 30 (its time cut at the join deadline: the latencies pass).
LATE_CAMERA = {"cam_front": {"ok": 70, "late": 30}, "lidar_top": {"ok": 100}}


def _counted(name: str, status: dict[str, dict[str, int]], **kw: object) -> DriveSummary:
    """A drive of 100 frames that met a 200 ms budget, with ``status`` per sensor."""
    degraded = max((n for counts in status.values() for s, n in counts.items() if s != "ok"), default=0)
    counters = RunCounters(100, 100, 100 - degraded, degraded, 0, 200.0, 0, sensor_status=status)
    replayed = Replayed(counters, {"total": {"n": 100, "p50": 80.0, "p99": 150.0}})
    return DriveSummary(name, f"{name}.mcap", replayed=replayed, budget=BudgetResult(200.0, 99.0, True), **kw)  # type: ignore[arg-type]


def test_a_drive_s_summary_carries_its_sensors_statuses_and_drop_reasons() -> None:
    # The worker's summary kept the frame counts only (the per-sensor counts stayed in the drive's
    # report.json): the fleet could not say that a sensor was late in 30 % of a drive's frames.
    counters = RunCounters(10, 10, 7, 1, 2, 200.0, 0, sensor_status=LATE_CAMERA, drop_reasons={"overload": 2})
    s = DriveSummary("a", "a.mcap", replayed=Replayed(counters, LATENCY))
    data = json.loads(json.dumps(s.to_json()))
    assert data["sensor_status"] == LATE_CAMERA and data["drop_reasons"] == {"overload": 2}
    assert DriveSummary.from_json(data) == s  # a drive read back from its fleet_drive.json too


def test_the_totals_pool_every_drive_s_sensor_statuses_and_fleet_md_states_them(tmp_path: Path) -> None:
    # Two drives (two workers' results) each passing 200 ms at p99 with the camera late in some frames, and
    # one with every sensor ok: the totals add the sensors' statuses, and fleet.md says which sensors were
    # not ok in how many frames (perception.metrics.incomplete_note, as perception budget's report.md).
    drives = [
        _counted("a", LATE_CAMERA),
        _counted("b", {"cam_front": {"ok": 90, "late": 10}, "lidar_top": {"ok": 99, "error": 1}}),
        _counted("c", {"cam_front": {"ok": 100}, "lidar_top": {"ok": 100}}),
    ]
    t = fleet_totals(drives)
    pooled = {"cam_front": {"ok": 260, "late": 40}, "lidar_top": {"ok": 299, "error": 1}}
    assert t.sensor_status == pooled and t.counters().sensor_status == pooled
    assert (t.counters().frames, t.counters().usable) == (300, 300)
    report = write_report(tmp_path, drives, {"workers": 2}, fleet=t)
    assert report["totals"]["sensor_status"] == pooled
    by_name = {d["name"]: d for d in json.loads((tmp_path / "fleet.json").read_text())["drives"]}
    assert by_name["a"]["sensor_status"] == LATE_CAMERA
    md = (tmp_path / "fleet.md").read_text()
    note = "without every sensor: cam_front late in 40 of 300, lidar_top error in 1 of 300"
    assert f"- frames {note} (a late sensor's time is counted only up to the join deadline)\n" in md
    rows = {line.split(" | ")[0]: line for line in md.splitlines() if line.startswith("| ")}
    assert "| pass; without every sensor: cam_front late in 30 of 100 (a late sensor's time" in rows["| a"]
    assert "| pass |" in rows["| c"]  # every sensor ok: a bare pass
    whole = write_report(tmp_path, drives[2:], {"workers": 1})
    assert "without every sensor" not in (tmp_path / "fleet.md").read_text() and whole["totals"]["sensor_status"]
