"""DIR/report.md: latency tables, quality and rendered frames; the budget report extends it."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from perception.drives import DriveReader
from perception.evaluation import DetectionEvaluator
from perception.metrics import LatencyAccumulator, RunReport, budget_rows, write_markdown
from perception.types import FrameResult
from perception.viz import write_replay_report


@pytest.fixture(scope="module")
def replay(
    small_drive: Path, recorded: tuple[Path, list[FrameResult]]
) -> tuple[Path, RunReport, LatencyAccumulator]:
    """A replay output directory as ``perception replay`` leaves it (minus report.md)."""
    out, results = recorded
    acc = LatencyAccumulator(budget_ns=200_000_000)
    with DriveReader(small_drive) as reader:
        evaluator = DetectionEvaluator(rig=reader.rig)
        for r in results:
            acc.add(r)
            evaluator.add(r.t_ns, r.detections, reader.ground_truth_at(r.t_ns, 60_000_000))
    report: dict[str, object] = {
        **acc.summary(),
        "drive": str(small_drive),
        "rate": "max",
        "quality": evaluator.summary(),
    }
    (out / "report.json").write_text(json.dumps(report))
    return out, RunReport.from_json(out / "report.json"), acc


def test_report_brings_tables_quality_and_frames_together(
    replay: tuple[Path, RunReport, LatencyAccumulator],
) -> None:
    out, report, acc = replay
    path = write_replay_report(out, report, latency=acc, n_frames=1)
    text = path.read_text()
    assert path == out / "report.md" and text.startswith("# Replay report")
    assert "5 frames — ok 4, degraded 1, dropped 0" in text
    assert re.search(r"^\| total \| 20\.00 \| .* \| 200 \| ok \|$", text, re.M)  # checked against the frame budget
    assert re.search(r"^\| fusion \| 2\.00 \|", text, re.M) and "| cam_front.total |" in text
    assert re.search(r"^\| cam_back \| 4 \| 0 \| 0 \| 1 \| 0 \|$", text, re.M)  # status counts
    assert "mAP **1.000**" in text and re.search(r"^\| car \| 1\.000 \|", text, re.M)
    images = re.findall(r"!\[[^]]*\]\(([^)]+)\)", text)
    assert {"latency_over_time.png", "breakdown.png", "histogram.png"} <= set(images)
    frames = [i for i in images if i.startswith("frames/")]
    assert sorted(frames) == [
        "frames/frame_000002_bev.png",
        "frames/frame_000002_cam_back.png",
        "frames/frame_000002_cam_front.png",
    ]  # the middle of the replay
    assert all((out / i).is_file() for i in images)


def test_budget_report_extends_the_replay_report(
    replay: tuple[Path, RunReport, LatencyAccumulator], tmp_path: Path
) -> None:
    _, report, acc = replay
    path = write_replay_report(tmp_path, report, frames=[])  # no accumulator: rows from report.json
    assert re.search(r"^\| total \| 20\.00 \| .* \| - \| - \|$", path.read_text(), re.M)
    rows = budget_rows(acc, 15.0, {}, 99.0)
    write_markdown(path, rows, report, [], 99.0, append=True)
    text = path.read_text()
    assert text.startswith("# Replay report") and "\n## Latency budget\n" in text
    assert re.search(r"^\| total \| 20\.00 \| .* \| 15 \| FAIL \|$", text, re.M)
    assert text.count("## Sensor status counts") == 1

    alone = tmp_path / "alone.md"  # nothing to extend: the standalone budget report
    write_markdown(alone, rows, report, [], 99.0, append=True)
    assert alone.read_text().startswith("# Latency budget report")


def test_frames_that_cannot_be_rendered_are_noted(tmp_path: Path) -> None:
    counters = {"frames": 0, "ok": 0, "degraded": 0, "dropped": 0, "deadline_ms": 100.0, "deadline_misses": 0}
    report = RunReport.from_json({**counters, "latency_ms": {}})
    text = write_replay_report(tmp_path, report).read_text()  # no detections.jsonl, no fused.mcap
    assert "## Frames" in text and "Not rendered:" in text


def test_the_damage_section_comes_from_the_report_object(tmp_path: Path) -> None:
    # report.md is written once, its damage section included (replay no longer re-opens it to append)
    counters = {"frames": 0, "ok": 0, "degraded": 0, "dropped": 0, "deadline_ms": 100.0, "deadline_misses": 0}
    damage = {"messages_lost": 3, "chunks": [], "truncated": "cut at byte 4096"}
    report = RunReport.from_json({**counters, "latency_ms": {}, "drive_damage": damage})
    text = write_replay_report(tmp_path, report, n_frames=0).read_text()
    assert "## Drive damage" in text and "Truncated: cut at byte 4096." in text
    assert report.damage_markdown()[0] == "## Drive damage"
    assert RunReport.from_json({**counters, "latency_ms": {}}).damage_markdown() == []
