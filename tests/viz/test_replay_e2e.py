"""``perception replay`` end to end on the real embedded Triton: fused.mcap, report.md, the live flag."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from mcap.reader import make_reader

from perception.cli import main
from perception.server import EmbeddedTriton
from perception.viz._encode import DETECTIONS_TOPIC, FRAME_STATS_TOPIC
from perception.viz._load import frame_ids

REPO_ROOT = Path(__file__).resolve().parents[2]


def _patient_profile(tmp_path: Path) -> Path:
    """launch/replay.yaml with a budget no loaded CI host misses: every sensor's answer is awaited."""
    data = yaml.safe_load((REPO_ROOT / "launch" / "replay.yaml").read_text())
    data["budget"] = {"total_ms": 20000, "fusion_reserve_ms": 100}
    path = tmp_path / "replay.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_replay_writes_fused_mcap_and_report(
    triton: EmbeddedTriton, small_drive: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    argv = ["replay", str(small_drive), "--url", triton.grpc_url, "--rate", "max", "--out", str(out)]
    argv += ["--config", str(_patient_profile(tmp_path))]
    code = main([*argv, "--no-progress", "--live", "--live-port", "0"])
    printed = capsys.readouterr().out
    assert code == 0, printed
    assert re.search(r"^live view: ws://127\.0\.0\.1:\d+ ", printed, re.M)
    assert f"{out / 'fused.mcap'}" in printed

    records = [json.loads(line) for line in (out / "detections.jsonl").read_text().splitlines()]
    assert records and frame_ids(out) == [r["frame_id"] for r in records]
    # The real models and fusion really ran: every sensor answered in every frame, the urban drive's
    # cars and pedestrians were found, and found where the ground truth has them.
    assert [r["status"] for r in records] == ["ok"] * len(records), [r["sensors"] for r in records]
    assert all(r["detections"] for r in records), [len(r["detections"]) for r in records]
    report_json = json.loads((out / "report.json").read_text())
    assert report_json["ok"] == report_json["usable"] == len(records)
    assert report_json["quality"]["mAP"] >= 0.3  # 0.63 measured (0.5 s urban, seed 7)
    with (out / "fused.mcap").open("rb") as f:
        summary = make_reader(f).get_summary()
    assert summary is not None
    counts = {ch.topic: summary.statistics.channel_message_counts.get(cid, 0) for cid, ch in summary.channels.items()}
    assert counts[DETECTIONS_TOPIC] == counts[FRAME_STATS_TOPIC] == len(records)
    assert counts["/sensors/lidar_top/points"] >= len(records) and "/sensors/cam_front/detections" in counts

    report = (out / "report.md").read_text()
    assert report.startswith("# Replay report") and "| total |" in report
    pngs = re.findall(r"\((frames/[^)]+\.png)\)", report)
    assert pngs and all((out / p).is_file() for p in pngs)
