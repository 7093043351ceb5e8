"""A damaged chunk does not cost the whole drive (issue 14, item 6).

A copy of a real drive with one 64 KiB block zeroed in the middle (a disk error) or bytes flipped
inside a chunk is replayed for ALL its readable data: frames before and after the damage, one record
per frame, the damage in report.json / report.md (chunks, byte offsets, per sensor the samples and
time ranges lost, the frames in the damaged time), and exit code 3 = "drive damaged" (not 1, not 2).
``--strict`` makes any damage an error before anything runs. Expectations come from the intact file.
"""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest
from mcap.reader import SeekingReader
from mcap.records import ChunkIndex
from reliability_helpers import (
    REPO_ROOT,
    assert_consecutive_records,
    profile_data,
    read_records,
    runtime_config,
    write_drive,
    write_profile,
)

from perception.cli._main import main as cli_main
from perception.drives._chunks import read_chunk
from perception.replay import ReplayOptions, replay_drive
from perception.server import EmbeddedTriton

SLEEPY = {"lidar_top": "sleepy_lidar", "radar_front": "sleepy_radar", "cam_front": "sleepy_camera"}
BUNDLED = REPO_ROOT / "replay_data" / "urban_seed7_10s.mcap"
BLOCK = 64 * 1024
LIDAR = "/sensors/lidar_top/points"


def replay_cli(drive: Path, out: Path, *extra: str) -> int:
    return cli_main(["replay", str(drive), "--out", str(out), "--no-progress", "--no-fused-mcap", *extra])


def one_error_line(err: str) -> str:
    assert "Traceback" not in err, err
    lines = [line for line in err.splitlines() if ": error: " in line]
    assert len(lines) == 1, err
    return lines[0]


def chunks_hit(drive: Path, start: int, length: int) -> list[tuple[ChunkIndex, list[tuple[str, int]]]]:
    """The chunks of the intact ``drive`` that bytes ``[start, start + length)`` fall in, with their messages."""
    with drive.open("rb") as f:
        summary = SeekingReader(f).get_summary()
        assert summary is not None
        out = []
        for ci in sorted(summary.chunk_indexes, key=lambda c: c.chunk_start_offset):
            if ci.chunk_start_offset < start + length and ci.chunk_start_offset + ci.chunk_length > start:
                msgs = read_chunk(f, ci, summary.channels)
                out.append((ci, [(summary.channels[m.channel_id].topic, m.log_time) for m in msgs]))
        return out


def middle_chunk(drive: Path) -> tuple[ChunkIndex, list[tuple[str, int]]]:
    with drive.open("rb") as f:
        summary = SeekingReader(f).get_summary()
    assert summary is not None and len(summary.chunk_indexes) >= 3
    ci = sorted(summary.chunk_indexes, key=lambda c: c.chunk_start_offset)[len(summary.chunk_indexes) // 2]
    ((found, held),) = chunks_hit(drive, ci.chunk_start_offset, 1)
    return found, held


def lidar_times(drive: Path) -> list[int]:
    with drive.open("rb") as f:
        return [m.log_time for _, _, m in SeekingReader(f).iter_messages(topics=[LIDAR])]


def damaged_copy(src: Path, dst: Path, at: int, block: bytes) -> Path:
    data = bytearray(src.read_bytes())
    data[at : at + len(block)] = block
    dst.write_bytes(bytes(data))
    return dst


@pytest.mark.slow  # the bundled 10 s drive through the sleepers (still in the default run)
def test_zeroed_64k_block_in_the_bundled_drive_replays_every_undamaged_frame(
    triton: EmbeddedTriton, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    at = BUNDLED.stat().st_size // 2
    damaged = damaged_copy(BUNDLED, tmp_path / "urban_zeroed.mcap", at, bytes(BLOCK))
    ((chunk, held),) = chunks_hit(BUNDLED, at, BLOCK)  # 64 KiB inside one ~1.9 MB chunk
    lost_lidar = sorted(t for topic, t in held if topic == LIDAR)
    expected = [t for t in lidar_times(BUNDLED) if t not in lost_lidar]  # one frame per readable sweep
    assert lost_lidar and len(expected) == 100 - len(lost_lidar)

    profile = write_profile(tmp_path / "p.yaml", profile_data(triton.grpc_url, SLEEPY))
    out = tmp_path / "out"
    code = replay_cli(damaged, out, "--config", str(profile), "--rate", "max")
    line = one_error_line(capsys.readouterr().err)
    assert code == 3, line
    assert str(damaged) in line and f"chunk at byte {chunk.chunk_start_offset}" in line
    assert f"offset={chunk.chunk_start_offset}" in line

    records = read_records(out / "detections.jsonl")
    assert_consecutive_records(records)
    assert [r["t_ns"] for r in records] == expected  # before AND after the damage, none lost silently
    assert records[0]["t_ns"] < chunk.message_start_time and records[-1]["t_ns"] > chunk.message_end_time
    by_t = {r["t_ns"]: r for r in records}
    for r in records:  # truthful statuses: a sensor without a sample is missing, and the frame degraded
        statuses = {s["status"] for s in r["sensors"].values()}
        assert statuses <= {"ok", "missing"}, r
        assert (r["status"] == "ok") == (statuses == {"ok"}), r
    first_after = min(t for t in expected if t > chunk.message_end_time)
    assert by_t[first_after]["t_ns"] == first_after

    report = json.loads((out / "report.json").read_text())
    assert report["frames"] == len(records)
    damage = report["drive_damage"]
    assert damage["damaged"] and damage["data_lost"] and damage["truncated"] is None
    assert [c["offset"] for c in damage["chunks"]] == [chunk.chunk_start_offset]
    assert damage["chunks"][0]["message_count"] == len(held)
    assert damage["messages_lost"] == len(held)
    assert damage["sensors"]["lidar_top"] == {
        "topic": LIDAR,
        "samples_lost": len(lost_lidar),
        "ranges_ns": [[lost_lidar[0], lost_lidar[-1]]],
    }
    for name in ("radar_front", "cam_front"):
        topic = damage["sensors"][name]["topic"]
        assert damage["sensors"][name]["samples_lost"] == sum(1 for tp, _ in held if tp == topic)
    assert damage["frames"]["not_produced"] == len(lost_lidar) and damage["frames"]["trigger"] == "lidar_top"
    # The frames reported as touched are exactly those within a sync window of the damaged time (how
    # many there are depends on where the chunk boundaries fall relative to the sweeps).
    margin = 50_000_000  # the widest sync window of the profile (SensorConfig's default)
    lo, hi = chunk.message_start_time - margin, chunk.message_end_time + margin
    near = [r["frame_id"] for r in records if lo <= r["t_ns"] <= hi]
    assert damage["frames"]["frame_ids"] == near
    assert damage["frames"]["in_damaged_time"] == len(near)
    md = (out / "report.md").read_text()
    assert "## Drive damage" in md and str(chunk.chunk_start_offset) in md


@pytest.mark.slow  # the bundled 10 s drive, in lockstep (still in the default run)
def test_eval_on_a_damaged_drive_scores_the_readable_data_and_exits_3(
    triton: EmbeddedTriton, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    at = BUNDLED.stat().st_size // 2
    damaged = damaged_copy(BUNDLED, tmp_path / "urban_zeroed.mcap", at, bytes(BLOCK))
    ((chunk, held),) = chunks_hit(BUNDLED, at, BLOCK)
    profile = write_profile(tmp_path / "p.yaml", profile_data(triton.grpc_url, SLEEPY))
    out = tmp_path / "out"
    code = cli_main(["eval", str(damaged), "--config", str(profile), "--no-progress", "--out", str(out)])
    captured = capsys.readouterr()
    line = one_error_line(captured.err)
    assert code == 3 and f"offset={chunk.chunk_start_offset}" in line, line
    modes = json.loads((out / "eval.json").read_text())  # scored on every readable frame
    assert {"fused", "lidar_only", "no_camera"} <= modes.keys()
    assert "fused" in captured.out
    # every frame the readable data gives (one per lidar sweep outside the damaged chunk), before and
    # after the damage, is scored in every mode against the same ground truth
    sweeps = lidar_times(BUNDLED)
    lost = {t for topic, t in held if topic == LIDAR}
    assert 0 < len(lost) < len(sweeps) // 2
    for mode, m in modes.items():
        assert m["frames"] == len(sweeps) - len(lost), (mode, m["frames"], len(sweeps), len(lost))
        assert m["num_ground_truth"] == modes["fused"]["num_ground_truth"], mode
    assert sum(modes["fused"]["num_ground_truth"].values()) > 0


@pytest.mark.anyio
async def test_flipped_bytes_in_a_chunk_through_the_api(triton: EmbeddedTriton, tmp_path: Path) -> None:
    drive = write_drive(tmp_path / "full.mcap", 40)
    chunk, held = middle_chunk(drive)
    data = drive.read_bytes()
    at = chunk.chunk_start_offset + chunk.chunk_length // 2
    damaged = damaged_copy(drive, tmp_path / "flipped.mcap", at, bytes(b ^ 0x5A for b in data[at : at + 8]))
    lost_lidar = {t for topic, t in held if topic == LIDAR}
    cfg = runtime_config(triton.grpc_url, SLEEPY)
    out = tmp_path / "out"
    with anyio.fail_after(120):
        outcome = await replay_drive(damaged, cfg, ReplayOptions(out_dir=out, report_md=False, evaluate=False))
    assert outcome.drive_error is not None and outcome.drive_error.offset == chunk.chunk_start_offset
    assert "CRC mismatch" in outcome.damage.chunks[0].reason
    records = read_records(out / "detections.jsonl")
    assert_consecutive_records(records)
    assert [r["t_ns"] for r in records] == [t for t in lidar_times(drive) if t not in lost_lidar]
    report = json.loads((out / "report.json").read_text())
    assert report["drive_damage"]["sensors"]["lidar_top"]["samples_lost"] == len(lost_lidar)


def test_strict_replay_is_an_error_before_anything_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    drive = write_drive(tmp_path / "full.mcap", 30, ego=False)
    chunk, _ = middle_chunk(drive)
    damaged = damaged_copy(drive, tmp_path / "zeroed.mcap", chunk.chunk_start_offset + 100, bytes(64))
    profile = write_profile(tmp_path / "p.yaml", profile_data("embedded", SLEEPY))  # never started
    out = tmp_path / "out"
    code = replay_cli(damaged, out, "--config", str(profile), "--strict")
    line = one_error_line(capsys.readouterr().err)
    assert code == 3 and str(damaged) in line and f"offset={chunk.chunk_start_offset}" in line, line
    assert not out.exists()  # nothing ran, nothing written


def test_strict_accepts_an_intact_drive_and_help_documents_the_exit_code(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    drive = write_drive(tmp_path / "full.mcap", 5, ego=False)
    assert cli_main(["info", "--strict", str(drive)]) == 0
    capsys.readouterr()
    with pytest.raises(SystemExit):
        cli_main(["replay", "--help"])
    help_text = capsys.readouterr().out
    assert "--strict" in help_text and "3 drive damaged" in help_text


def test_truncated_drive_exits_3_with_the_prefix_replayed(
    triton: EmbeddedTriton, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    drive = write_drive(tmp_path / "full.mcap", 30)
    cut = tmp_path / "cut.mcap"
    cut.write_bytes(drive.read_bytes()[: int(drive.stat().st_size * 0.6)])
    profile = write_profile(tmp_path / "p.yaml", profile_data(triton.grpc_url, SLEEPY))
    out = tmp_path / "out"
    code = replay_cli(cut, out, "--config", str(profile), "--rate", "max")
    line = one_error_line(capsys.readouterr().err)
    assert code == 3 and "truncated at byte" in line, line
    report = json.loads((out / "report.json").read_text())
    assert report["drive_damage"]["truncated"].startswith("truncated at byte")
    assert 5 < report["frames"] < 30
