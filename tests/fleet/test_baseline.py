"""Baseline comparison of two fleet runs (perception.fleet._baseline).

The runs are fleet-like output directories written into tmp_path with the package's own producers:
``frame_record`` lines in ``detections.jsonl``, ``LatencyAccumulator.summary()`` plus the
``DetectionEvaluator`` summary as ``quality`` in ``report.json`` -- the structure ``perception replay
--out`` writes, without running Triton.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable
from pathlib import Path

import pytest

from perception.cli import main
from perception.errors import ConfigError
from perception.evaluation import DetectionEvaluator
from perception.fleet._baseline import TOLERANCE_KEYS, BaselineComparison, Tolerances, compare_runs
from perception.metrics import LatencyAccumulator, frame_record, percentiles
from perception.types import (
    Detection3D,
    FrameResult,
    FrameStatus,
    GroundTruth,
    GroundTruthObject,
    LatencyTree,
    SensorResult,
    SensorStatus,
)

MS = 1_000_000
FRAMES = 20
SENSORS = ("lidar_top", "cam_front", "radar_front")
#: (label, x, y) of the objects of every frame
OBJECTS = (("car", 10.0, 0.0), ("car", -15.0, 5.0), ("pedestrian", 5.0, 5.0), ("cyclist", 20.0, -4.0))


def _detection(i: int, label: str, x: float, y: float, score: float) -> Detection3D:
    return Detection3D(i, label, score, (x, y, 0.0), (4.0, 2.0, 1.5), 0.0, (0.0, 0.0), (0.1, 0.1), ("lidar_top",))


def write_drive(
    root: Path,
    name: str,
    *,
    frames: int = FRAMES,
    slow: float = 1.0,
    fusion_ms: float = 0.2,
    cam_error: Iterable[int] = (),
    dropped: Iterable[int] = (),
    skip: Iterable[int] = (),
    sensors: tuple[str, ...] = SENSORS,
    objects: tuple[tuple[str, float, float], ...] = OBJECTS,
    quality: bool = True,
) -> Path:
    """A drive's replay outputs in ``root/name``. ``slow`` scales the lidar model's time (and so dispatch
    and the total); frames in ``cam_error`` have the camera failing (degraded) and miss the pedestrians
    only the camera saw; ``dropped`` frames are dropped, ``skip`` frames have no record."""
    cam_error, dropped, skip = set(cam_error), set(dropped), set(skip)
    out = root / name
    out.mkdir(parents=True)
    acc = LatencyAccumulator(budget_ns=200 * MS)
    ev = DetectionEvaluator(max_range_m=50)
    with (out / "detections.jsonl").open("w", encoding="utf-8") as f:
        for fid in range(frames):
            t_ns = 1_000 + fid * 100 * MS
            gt = GroundTruth(
                t_ns,
                tuple(
                    GroundTruthObject(k, label, (x, y, 0.0), (4.0, 2.0, 1.5), 0.0, (0.0, 0.0))
                    for k, (label, x, y) in enumerate(objects)
                ),
            )
            if fid in skip:
                continue
            if fid in dropped:
                result = FrameResult(fid, t_ns, FrameStatus.DROPPED, {}, reason="queue overflow (drop-oldest)")
                ev.add(t_ns, (), gt)
            else:
                lidar_ms = (40.0 + fid % 7) * slow
                cam_ms, radar_ms = 30.0 + fid % 5, 8.0 + fid % 3
                status = {s: SensorStatus.OK for s in sensors}
                if fid in cam_error and "cam_front" in status:
                    status["cam_front"] = SensorStatus.ERROR
                results = {
                    s: SensorResult(s, st, latency_ns=int(ms * MS), error=None if st is SensorStatus.OK else "INTERNAL")
                    for s, st, ms in (
                        (s, status[s], {"lidar_top": lidar_ms, "cam_front": cam_ms}.get(s, radar_ms)) for s in sensors
                    )
                }
                dispatch = max(r.latency_ns for r in results.values())
                stages = {
                    "schedule_wait": int(0.15 * MS),
                    "dispatch": dispatch,
                    "fusion": int(fusion_ms * MS),
                    "tracking": int(0.3 * MS),
                }
                latency = LatencyTree(
                    total_ns=sum(stages.values()),
                    stages=stages,
                    sensors={s: {"total": r.latency_ns, "request": r.latency_ns} for s, r in results.items()},
                )
                dets = tuple(
                    _detection(k, label, x, y, 0.9 - 0.01 * k)
                    for k, (label, x, y) in enumerate(objects)
                    if not (label == "pedestrian" and fid in cam_error)
                )
                frame_status = (
                    FrameStatus.OK if all(st is SensorStatus.OK for st in status.values()) else FrameStatus.DEGRADED
                )
                result = FrameResult(fid, t_ns, frame_status, results, dets, latency)
                ev.add(t_ns, dets, gt)
            acc.add(result)
            f.write(json.dumps(frame_record(result)) + "\n")
    report = acc.summary()
    report["drive"] = f"/drives/{name}.mcap"
    if quality:
        report["quality"] = ev.summary()
    (out / "report.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return out


def fleet(root: Path, names: Iterable[str] = ("urban_a", "highway_b"), **overrides: dict[str, object]) -> Path:
    """A fleet output: one drive per name; ``overrides[name]`` are that drive's write_drive arguments."""
    root.mkdir(parents=True)
    for n in names:
        write_drive(root, n, **overrides.get(n, {}))  # type: ignore[arg-type]
    return root


def _json_roundtrip(cmp: BaselineComparison) -> dict[str, object]:
    data = json.loads(json.dumps(cmp.as_dict(), allow_nan=False))
    assert isinstance(data, dict)
    return data


def test_identical_runs_have_no_regression(tmp_path: Path) -> None:
    base = fleet(tmp_path / "base")
    cur = fleet(tmp_path / "cur")
    cmp = compare_runs(cur, base, Tolerances())
    assert cmp.ok and cmp.regressions == ()
    assert [d.name for d in cmp.drives] == ["highway_b", "urban_a"]
    assert all(d.state == "compared" for d in cmp.drives)
    d = cmp.drive("urban_a")
    assert d.quality is not None and d.quality.delta == 0.0
    assert {c.label: c.baseline_gt for c in d.quality.classes} == {
        "car": 40,
        "cyclist": 20,
        "pedestrian": 20,
        "truck": 0,
    }
    assert d.status is not None and (d.status.compared, d.status.changed) == (FRAMES, 0)
    assert {(x.kind, x.name) for x in d.latency} >= {("total", "total"), ("stage", "fusion"), ("sensor", "cam_front")}
    data = _json_roundtrip(cmp)
    assert data["ok"] is True and data["regressions"] == []
    md = cmp.markdown_lines()
    assert md[0] == "## Baseline comparison" and any("no regression" in line for line in md)
    assert not any(line.startswith("### Regressions") for line in md)


def test_slower_model_is_a_latency_regression_naming_the_stage(tmp_path: Path) -> None:
    base = fleet(tmp_path / "base")
    cur = fleet(tmp_path / "cur", urban_a={"slow": 1.3})
    cmp = compare_runs(cur, base, Tolerances())
    assert not cmp.ok
    urban = cmp.drive("urban_a").regressions
    assert any(r.startswith("urban_a: stage dispatch p50") for r in urban)
    assert any(r.startswith("urban_a: stage dispatch p99") for r in urban)
    assert any(r.startswith("urban_a: sensor lidar_top p50") for r in urban)
    assert any(r.startswith("urban_a: total p50") for r in urban)
    assert not any("fusion" in r or "cam_front" in r or "AP" in r or "frames turned worse" in r for r in urban)
    assert cmp.drive("highway_b").regressions == ()
    # the pooled totals of both drives see it too
    assert any(r.startswith("all drives: stage dispatch p99") for r in cmp.regressions)
    reg = next(r for r in urban if r.startswith("urban_a: stage dispatch p50"))
    assert " ms (+" in reg and "%" in reg  # the numbers behind it
    d = cmp.drive("urban_a").latency_of("stage", "dispatch", "p50")
    assert d is not None and d.regressed and d.delta_pct is not None and 25 < d.delta_pct < 35
    md = "\n".join(cmp.markdown_lines())
    assert md.index("### Regressions") < md.index("### Per drive")


def test_failing_sensor_is_a_class_ap_and_status_regression(tmp_path: Path) -> None:
    base = fleet(tmp_path / "base")
    cur = fleet(tmp_path / "cur", highway_b={"cam_error": range(FRAMES)})
    cmp = compare_runs(cur, base, Tolerances())
    regs = cmp.drive("highway_b").regressions
    ped = [r for r in regs if "class pedestrian AP" in r]
    assert len(ped) == 1 and "ground truth 20 -> 20" in ped[0] and "detections 20 -> 0" in ped[0]
    assert not any("class car" in r or "class cyclist" in r for r in regs)
    assert any(r.startswith("highway_b: mAP") for r in regs)
    worse = [r for r in regs if "frames turned worse" in r]
    assert len(worse) == 1 and "20 of 20 frames" in worse[0] and "ok→degraded 20" in worse[0]
    assert "frame 0 ok→degraded (cam_front ok→error)" in worse[0]
    status = cmp.drive("highway_b").status
    assert status is not None and (status.worse, status.better) == (20, 0)
    assert status.first[0].sensors == (("cam_front", "ok", "error"),)
    assert cmp.drive("urban_a").regressions == ()
    assert any(r.startswith("all drives: class pedestrian AP") for r in cmp.regressions)
    data = _json_roundtrip(cmp)
    drive = data["drives"]["highway_b"]  # type: ignore[index]
    assert drive["quality"]["classes"]["pedestrian"]["detections"] == {"baseline": 20, "current": 0}
    assert drive["status"]["transitions"] == {"ok→degraded": 20}
    # turned around: the frames got better, quality rose -- nothing regressed
    back = compare_runs(base, cur, Tolerances())
    assert back.ok and back.drive("highway_b").status.better == 20  # type: ignore[union-attr]


def test_drive_missing_or_failed_in_the_current_run_is_a_regression(tmp_path: Path) -> None:
    base = fleet(tmp_path / "base", names=("a", "b", "c", "d"))
    (base / "nobase").mkdir()  # the baseline's drive failed: nothing to compare with
    (base / ".tmp-a").mkdir()  # hidden: ignored
    cur = fleet(tmp_path / "cur", names=("a", "c", "new", "nobase"))
    (cur / "d").mkdir()  # failed now: no report.json
    cmp = compare_runs(cur, base, Tolerances())
    states = {d.name: d.state for d in cmp.drives}
    assert states == {
        "a": "compared",
        "b": "missing",
        "c": "compared",
        "d": "failed",
        "new": "new",
        "nobase": "not_comparable",
    }
    assert cmp.regressions == (
        "b: missing from the current run",
        f"d: failed in the current run (no report.json in {cur / 'd'})",
    )
    data = _json_roundtrip(cmp)
    assert data["missing_in_current"] == ["b"] and data["failed_in_current"] == ["d"]
    assert data["only_in_current"] == ["new"] and data["not_comparable"] == ["nobase"]
    md = cmp.markdown_lines()
    assert "- nobase: not comparable (no report.json in the baseline)" in md
    assert "- new: only in the current run" in md


def test_an_earlier_run_s_drive_left_in_a_reused_out_is_not_this_run_s(tmp_path: Path) -> None:
    # OUT reused: 'b' is there from an earlier run, not replayed now. It was compared as this run's (its
    # stale numbers passing), hiding that the run did not replay a drive of the baseline.
    base = fleet(tmp_path / "base", names=("a", "b"))
    cur = fleet(tmp_path / "cur", names=("a", "b"))  # b: the earlier run's, as good as the baseline
    cmp = compare_runs(cur, base, Tolerances(), replayed=["a"])
    assert {d.name: d.state for d in cmp.drives} == {"a": "compared", "b": "missing"}
    assert cmp.regressions == ("b: missing from the current run",)


def test_a_baseline_s_drives_are_the_ones_its_fleet_json_lists(tmp_path: Path) -> None:
    # The baseline is a reused OUT: 'b' is an earlier run's drive directory, left there; the baseline run
    # replayed 'a' only (its fleet.json). 'b' was taken from the folder listing as a drive of the baseline,
    # and its absence now failed the gate ('b: missing from the current run').
    base = fleet(tmp_path / "base", names=("a", "b"))
    (base / "fleet.json").write_text(json.dumps({"drives": [{"name": "a", "status": "ok"}]}))
    cur = fleet(tmp_path / "cur", names=("a",))
    cmp = compare_runs(cur, base, Tolerances(), replayed=["a"])
    assert {d.name: d.state for d in cmp.drives} == {"a": "compared"}
    assert cmp.ok and cmp.regressions == ()
    # a drive it lists that the current run did not replay is still missing from it
    (base / "fleet.json").write_text(json.dumps({"drives": [{"name": "a"}, {"name": "b"}]}))
    assert compare_runs(cur, base, Tolerances(), replayed=["a"]).regressions == ("b: missing from the current run",)
    for bad in ("{", json.dumps({"drives": [{"nom": "a"}]}), "[]"):
        (base / "fleet.json").write_text(bad)
        with pytest.raises(ConfigError) as exc:
            compare_runs(cur, base, Tolerances(), replayed=["a"])
        assert exc.value.file == str(base / "fleet.json")


def test_every_drive_lost_in_the_current_run(tmp_path: Path) -> None:
    base = fleet(tmp_path / "base", names=("a",))
    (tmp_path / "cur").mkdir()
    cmp = compare_runs(tmp_path / "cur", base, Tolerances())
    assert cmp.regressions == ("a: missing from the current run",)
    assert cmp.quality is None and cmp.latency == () and cmp.status is None
    assert cmp.markdown_lines()  # renders without any compared drive


def test_changes_within_tolerance_are_ok(tmp_path: Path) -> None:
    base = fleet(tmp_path / "base", names=("a",))
    # +5 % on the lidar model, a tiny stage doubling (0.2 -> 0.4 ms: +100 % but under 1 ms), one frame
    # dropped (its objects missed: every class's AP a little lower)
    cur = fleet(tmp_path / "cur", names=("a",), a={"slow": 1.05, "fusion_ms": 0.4, "dropped": [7]})
    assert compare_runs(cur, base, Tolerances(status_changes=1, map_drop=0.1)).ok
    strict = compare_runs(cur, base, Tolerances(map_drop=0.1))
    assert strict.regressions == (
        "a: 1 of 20 frames turned worse (ok→dropped 1; at most 0 allowed): frame 7 ok→dropped "
        "(cam_front ok→absent, lidar_top ok→absent, radar_front ok→absent)",
    )
    default = compare_runs(cur, base, Tolerances(status_changes=1))
    assert [r.split(" AP ")[0] for r in default.regressions if " AP " in r] == [
        f"{who}: class {label}" for who in ("a", "all drives") for label in ("car", "cyclist", "pedestrian")
    ]
    tight = compare_runs(cur, base, Tolerances(latency_pct=2.0, latency_ms=0.1, status_changes=1, map_drop=0.1))
    assert any(r.startswith("a: stage dispatch p50") for r in tight.regressions)
    assert any(r.startswith("a: stage fusion p50") for r in tight.regressions)
    # a class AP drop inside a wide tolerance
    cam = fleet(tmp_path / "cam", names=("a",), a={"cam_error": range(FRAMES)})
    assert compare_runs(cam, base, Tolerances(map_drop=1.0, status_changes=FRAMES)).ok


def test_missing_frames_count_as_worse(tmp_path: Path) -> None:
    base = fleet(tmp_path / "base", names=("a",), a={"dropped": [3]})
    cur = fleet(tmp_path / "cur", names=("a",), a={"skip": [5, 6], "frames": FRAMES + 1})
    s = compare_runs(cur, base, Tolerances()).drive("a").status
    assert s is not None
    assert (s.worse, s.better, s.missing_in_current, s.new_in_current) == (2, 1, 2, 1)
    assert dict(s.transitions) == {"dropped→ok": 1, "ok→missing": 2}


def test_totals_are_gt_weighted_and_latency_is_pooled(tmp_path: Path) -> None:
    many = (*OBJECTS, ("car", 30.0, 10.0), ("car", 12.0, -20.0), ("pedestrian", -8.0, -3.0))
    base = fleet(tmp_path / "base", names=("few", "many"), many={"objects": many})
    cur = fleet(tmp_path / "cur", names=("few", "many"), few={"cam_error": range(FRAMES)}, many={"objects": many})
    cmp = compare_runs(cur, base, Tolerances(status_changes=FRAMES))
    few, many_q = cmp.drive("few").quality, cmp.drive("many").quality
    assert few is not None and many_q is not None and cmp.quality is not None
    assert (few.current_gt, many_q.current_gt) == (80, 140)
    expected = (few.current_map * 80 + many_q.current_map * 140) / 220  # type: ignore[operator]
    assert cmp.quality.current_map == pytest.approx(expected)
    ped = {c.label: c for c in cmp.quality.classes}["pedestrian"]
    ped_few = {c.label: c for c in few.classes}["pedestrian"]
    ped_many = {c.label: c for c in many_q.classes}["pedestrian"]
    assert ped.current_gt == 20 + 40
    assert ped.current_ap == pytest.approx((ped_few.current_ap * 20 + ped_many.current_ap * 40) / 60)  # type: ignore[operator]
    # pooled: the percentiles of both drives' frames, not a mean of the drives' percentiles
    totals = []
    for name in ("few", "many"):
        with (cur / name / "detections.jsonl").open(encoding="utf-8") as f:
            totals += [round(json.loads(line)["latency_ms"]["total"] * MS) for line in f]
    p99 = next(d for d in cmp.latency if d.kind == "total" and d.stat == "p99")
    assert p99.current_ms == percentiles(totals)["p99"] and p99.current_n == 2 * FRAMES
    data = _json_roundtrip(cmp)
    assert data["totals"]["quality_weighting"] == "the baseline's ground-truth objects, in both runs"  # type: ignore[index]


def test_totals_move_only_when_a_drive_s_values_do() -> None:
    # Each run's total was weighted by its own ground-truth counts: a drive with half its frames evaluated in
    # the current run (mAP 0.9 in both) moved "all drives" from 0.550 to 0.433 -- a regression no drive had
    from perception.fleet._baseline import ClassDelta, DriveComparison, QualityDelta, _total_quality

    def quality(b_map: float, c_map: float, b_gt: int, c_gt: int) -> QualityDelta:
        return QualityDelta("native", b_map, c_map, b_gt, c_gt, (ClassDelta("car", b_map, c_map, b_gt, c_gt, 10, 10),))

    drives = [
        DriveComparison("A", "compared", quality(0.9, 0.9, 100, 50)),
        DriveComparison("B", "compared", quality(0.2, 0.2, 100, 100)),
    ]
    total = _total_quality(drives)
    assert total is not None and total.baseline_map == total.current_map == pytest.approx(0.55)
    assert (total.baseline_gt, total.current_gt) == (200, 150)
    (car,) = total.classes
    assert car.baseline_ap == car.current_ap == pytest.approx(0.55)


def test_quality_or_sensor_lost_in_the_current_run(tmp_path: Path) -> None:
    base = fleet(tmp_path / "base", names=("a", "b"))
    cur = fleet(tmp_path / "cur", names=("a", "b"), a={"quality": False}, b={"sensors": ("lidar_top", "cam_front")})
    cmp = compare_runs(cur, base, Tolerances())
    assert any(r.startswith("a: quality not checked") for r in cmp.regressions)
    assert "b: sensor radar_front ran in the baseline but not in the current run" in cmp.regressions
    assert "sensor radar_front: timed only in the baseline" in cmp.drive("b").notes
    # quality only in the current run is fine
    assert not any("quality" in r for r in compare_runs(base, cur, Tolerances()).drive("a").regressions)


def test_single_replay_outputs_compare_as_one_drive(tmp_path: Path) -> None:
    base = write_drive(tmp_path, "replay_old")
    cur = write_drive(tmp_path / "fleet", "replay_old", slow=2.0)
    # a replay output directory (report.json at its top) against a fleet run holding the same drive
    cmp = compare_runs(tmp_path / "fleet", base, Tolerances())
    assert [d.name for d in cmp.drives] == ["replay_old"] and not cmp.ok
    assert compare_runs(cur, base, Tolerances()).drive("replay_old").state == "compared"


@pytest.mark.parametrize(
    ("kwargs", "key"),
    [
        ({"map_drop": -0.1}, "--tolerance-map"),
        ({"latency_pct": math.nan}, "--tolerance-latency-pct"),
        ({"latency_ms": math.inf}, "--tolerance-latency-ms"),
        ({"status_changes": -1}, "--tolerance-status"),
        ({"status_changes": 1.5}, "--tolerance-status"),
    ],
)
def test_bad_tolerances(kwargs: dict[str, float], key: str) -> None:
    with pytest.raises(ConfigError) as err:
        Tolerances(**kwargs)  # type: ignore[arg-type]
    assert err.value.key == key and key in str(err.value)


def test_tolerance_error_keys_name_the_fleet_command_s_options(capsys: pytest.CaptureFixture[str]) -> None:
    # a ConfigError about a tolerance names the option a user types: every key is a flag of `perception fleet`
    with pytest.raises(SystemExit):
        main(["fleet", "--help"])
    options = set(re.findall(r"(--tolerance-[a-z-]+)\b", capsys.readouterr().out))
    assert set(TOLERANCE_KEYS) == set(Tolerances().as_dict())
    assert set(TOLERANCE_KEYS.values()) == options


def test_bad_baseline_is_a_config_error_naming_the_file(tmp_path: Path) -> None:
    cur = fleet(tmp_path / "cur", names=("a",))
    missing = tmp_path / "nope"
    with pytest.raises(ConfigError, match="baseline run not found") as err:
        compare_runs(cur, missing, Tolerances())
    assert err.value.file == str(missing)
    with pytest.raises(ConfigError, match="not a directory"):
        compare_runs(cur, cur / "a" / "detections.jsonl", Tolerances())
    with pytest.raises(ConfigError, match="current run not found"):
        compare_runs(tmp_path / "gone", cur, Tolerances())
    empty = tmp_path / "empty"
    (empty / "some_dir").mkdir(parents=True)
    with pytest.raises(ConfigError, match="not a fleet or replay output") as err:
        compare_runs(cur, empty, Tolerances())
    assert err.value.file == str(empty)


def test_a_baseline_the_run_cannot_use_is_refused_before_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """--baseline equal to --out was replaced drive by drive, then compared with itself: 'no regression',
    exit 0. A baseline that is no fleet output was refused only after every drive had run (and fleet.json
    was not written). Both are now usage errors before any cluster is started."""
    from perception.fleet import _driver
    from perception.fleet._outputs import OUT_MARKER

    def no_cluster(self: object) -> bool:
        raise AssertionError("a Ray cluster was started")

    monkeypatch.setattr(_driver._Fleet, "connect", no_cluster)
    drive = tmp_path / "urban_a.mcap"
    drive.write_bytes(b"\x89MCAP0\r\n")  # never opened
    prev = fleet(tmp_path / "prev", names=("urban_a",))
    (prev / OUT_MARKER).write_text("perception fleet output\n")  # as an earlier run left it: a valid --out
    (tmp_path / "plain" / "some_dir").mkdir(parents=True)
    cases = [
        (prev, prev, "the baseline would be written by this run"),
        (prev, prev / "urban_a", "the baseline would be written by this run"),
        (tmp_path / "plain", tmp_path / "new", "not a fleet or replay output"),
    ]
    for baseline, out, message in cases:
        code = main(["fleet", str(drive), "--out", str(out), "--baseline", str(baseline), "--no-progress"])
        err = capsys.readouterr().err
        assert code == 2, err
        assert err.startswith(f"perception fleet: error: {baseline}: {message}") and err.count("\n") == 1, err
    assert not (tmp_path / "new").exists()


def test_broken_json_is_a_config_error_naming_the_file(tmp_path: Path) -> None:
    cur = fleet(tmp_path / "cur", names=("a",))
    base = fleet(tmp_path / "base", names=("a",))
    report = base / "a" / "report.json"
    good = report.read_text(encoding="utf-8")
    report.write_text(good[: len(good) // 2], encoding="utf-8")
    with pytest.raises(ConfigError, match="not valid JSON") as err:
        compare_runs(cur, base, Tolerances())
    assert err.value.file == str(report) and str(report) in str(err.value)
    report.write_text("[1, 2]", encoding="utf-8")
    with pytest.raises(ConfigError, match="not a replay report"):
        compare_runs(cur, base, Tolerances())
    data = json.loads(good)
    data["latency_ms"]["total"]["p50"] = "fast"
    report.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(ConfigError, match="expected a number") as err:
        compare_runs(cur, base, Tolerances())
    assert err.value.key == "latency_ms.total.p50"
    report.write_text(good, encoding="utf-8")

    jsonl = base / "a" / "detections.jsonl"
    lines = jsonl.read_text(encoding="utf-8").splitlines(keepends=True)
    jsonl.write_text("".join([*lines[:-1], lines[-1][:30]]), encoding="utf-8")  # a write cut short: tolerated
    assert compare_runs(cur, base, Tolerances(status_changes=1)).ok
    jsonl.write_text("".join([lines[0], "{broken\n", *lines[1:]]), encoding="utf-8")
    with pytest.raises(ConfigError, match="line 2: not valid JSON") as err:
        compare_runs(cur, base, Tolerances())
    assert err.value.file == str(jsonl)
    jsonl.write_text("".join([lines[0], lines[0], *lines[1:]]), encoding="utf-8")
    with pytest.raises(ConfigError, match="frame 0 recorded twice"):
        compare_runs(cur, base, Tolerances())
