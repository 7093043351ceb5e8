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
