"""``perception fleet --budget-ms``'s printed verdict over its drives' results, without a cluster: the run
itself (:func:`perception.fleet.run_fleet`) stands in with the drives' summaries as workers return them."""

from __future__ import annotations

from pathlib import Path

import pytest

from perception.cli import main
from perception.fleet import DriveSummary, FleetDrive, FleetOptions, FleetOutcome
from perception.fleet._report import fleet_totals, write_report
from perception.fleet._summary import BudgetResult, Replayed
from perception.metrics import LatencySketch, RunCounters

MS = 1_000_000


def _drive(name: str, status: dict[str, dict[str, int]], passed: bool = True) -> DriveSummary:
    """A drive of 100 frames under 200 ms, with ``status`` per sensor."""
    sketch = LatencySketch()
    for ms in range(100):
        sketch.add((50 + ms) * MS)
    late = sum(counts.get("late", 0) for counts in status.values())
    counters = RunCounters(100, 100, 100 - late, late, 0, 200.0, 0, sensor_status=status)
    violations = () if passed else ("total",)
    return DriveSummary(
        name,
        f"{name}.mcap",
        replayed=Replayed(counters, {"total": sketch.percentiles()}),
        budget=BudgetResult(200.0, 99.0, passed, violations),
        total_sketch=sketch.to_dict(),
    )


def _fleet(
    drives: list[DriveSummary], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> tuple[int, str]:
    """``perception fleet --budget-ms 200`` whose run returns ``drives``; its exit code and what it printed."""
    import perception.fleet

    async def run_fleet(found: list[FleetDrive], options: FleetOptions, stop: object = None) -> FleetOutcome:
        assert [d.name for d in found] == [d.name for d in drives]
        options.out.mkdir()
        totals = fleet_totals(drives)
        report = write_report(options.out, drives, {"workers": 2}, fleet=totals)
        return FleetOutcome(drives=drives, totals=totals, report=report)

    monkeypatch.setattr(perception.fleet, "run_fleet", run_fleet)
    for d in drives:
        (tmp_path / d.drive).write_bytes(b"\x89MCAP0\r\n")  # never opened: the run stands in
    argv = ["fleet", *(str(tmp_path / d.drive) for d in drives), "--out", str(tmp_path / "out"), "--budget-ms", "200"]
    code = main([*argv, "--no-progress"])
    return code, capsys.readouterr().out


def test_a_pass_says_which_sensors_were_late_or_failed_in_how_many_frames_of_every_drive(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # A late sensor's time is cut at the join deadline: its frames meet a budget it did not. `perception
    # budget` says so beside its verdict; `perception fleet` printed a bare 'PASS' with the camera late in 30
    # of one drive's 100 frames and 10 of the other's (its summaries carried no per-sensor counts). It says
    # now which sensors were not ok in how many of every drive's frames, with perception budget's line.
    a = _drive("a", {"cam_front": {"ok": 70, "late": 30}, "lidar_top": {"ok": 100}})
    b = _drive("b", {"cam_front": {"ok": 90, "late": 10}, "lidar_top": {"ok": 98, "error": 2}})
    code, printed = _fleet([a, b], tmp_path, monkeypatch, capsys)
    assert code == 0  # the verdict and the exit code stay the latencies'
    assert (
        "budget 200 ms at p99: PASS; without every sensor: cam_front late in 40 of 200, lidar_top error in 2 of "
        "200 (a late sensor's time is counted only up to the join deadline)\n"
    ) in printed


def test_a_fail_names_the_drives_and_a_fleet_of_whole_frames_prints_the_verdict_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    whole = {"cam_front": {"ok": 100}, "lidar_top": {"ok": 100}}
    code, printed = _fleet([_drive("a", whole), _drive("b", whole)], tmp_path, monkeypatch, capsys)
    assert code == 0 and "budget 200 ms at p99: PASS\n" in printed
    skipped = {"cam_front": {"ok": 100}, "lidar_top": {"ok": 96, "skipped": 4}}
    drives = [_drive("a", whole), _drive("b", skipped, passed=False)]
    (tmp_path / "again").mkdir()
    code, printed = _fleet(drives, tmp_path / "again", monkeypatch, capsys)
    assert code == 1
    assert "budget 200 ms at p99: FAIL (b); without every sensor: lidar_top skipped in 4 of 200\n" in printed
