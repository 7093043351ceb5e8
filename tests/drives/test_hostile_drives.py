"""Hostile recordings (issue 33): a chunk that declares a decompression bomb is refused before anything
large is allocated; samples and poses that decode but would break the runtime are skipped and counted."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest
import zstandard
from drive_fixtures import LIDAR_FIELDS, PERIOD, T0, make_rig
from mcap.data_stream import RecordBuilder
from mcap.records import Chunk, Message
from test_damaged_chunks import chunks_of, damaged_copy

from perception._imageio import encode_jpeg
from perception.drives import DriveReader, DriveWriter
from perception.drives._chunks import MAX_CHUNK_BYTES, ChunkUnreadable, decode_chunk
from perception.errors import DriveDamagedError
from perception.types import EgoPose, ImageSample, PointCloudSample, Transform


def _chunk_body(records: bytes, *, compression: str, data: bytes, declared: int) -> bytes:
    builder = RecordBuilder()
    Chunk(
        compression=compression,
        data=data,
        message_start_time=0,
        message_end_time=10,
        uncompressed_crc=0,
        uncompressed_size=declared,
    ).write(builder)
    body: bytes = builder.end()  # type: ignore[no-untyped-call]
    return body[1 + 8 :]  # the record body (after opcode and length)


def _records() -> bytes:
    builder = RecordBuilder()
    Message(channel_id=1, sequence=0, log_time=5, publish_time=5, data=b"x" * 100).write(builder)
    records: bytes = builder.end()  # type: ignore[no-untyped-call]
    return records


def _zstd_frame_declaring(content_size: int, payload: bytes) -> bytes:
    """A zstd frame holding ``payload`` in one raw block whose header declares ``content_size``."""
    header = struct.pack("<I", 0xFD2FB528) + bytes([0xE0]) + struct.pack("<Q", content_size)
    block = ((len(payload) << 3) | 1).to_bytes(3, "little")  # last block, raw
    return header + block + payload


def test_a_zstd_frame_declaring_a_terabyte_is_refused_before_decompressing() -> None:
    records = _records()
    honest = _zstd_frame_declaring(len(records), records)
    assert zstandard.decompress(honest) == records  # the crafted frame is a valid one
    bomb = _zstd_frame_declaring(2**40, records)
    with pytest.raises(ChunkUnreadable, match=r"zstd frame declares 1099511627776 bytes, the chunk 1\d\d"):
        decode_chunk(_chunk_body(records, compression="zstd", data=bomb, declared=len(records)), None)
    with pytest.raises(ChunkUnreadable, match=f"over the {MAX_CHUNK_BYTES} byte limit"):
        decode_chunk(_chunk_body(records, compression="zstd", data=honest, declared=2**40), None)
    _, got = decode_chunk(_chunk_body(records, compression="zstd", data=honest, declared=len(records)), None)
    assert [m.data for m in got if isinstance(m, Message)] == [b"x" * 100]


def test_an_lz4_frame_holding_more_than_its_chunk_declares_is_refused() -> None:
    import lz4.frame  # type: ignore[import-untyped]

    records = _records()
    frame = lz4.frame.compress(records + bytes(10_000), store_size=False)  # no size in its header
    with pytest.raises(ChunkUnreadable, match="holds more than"):
        decode_chunk(_chunk_body(records, compression="lz4", data=frame, declared=len(records)), None)
    sized = lz4.frame.compress(records + bytes(10_000), store_size=True)
    with pytest.raises(ChunkUnreadable, match="lz4 frame declares"):
        decode_chunk(_chunk_body(records, compression="lz4", data=sized, declared=len(records)), None)


def test_an_uncompressed_chunk_must_hold_what_it_declares_within_the_limit() -> None:
    # the size checks were skipped for compression "": a wrong or huge declared size was read as is
    records = _records()
    for declared in (len(records) + 1, len(records) - 1):
        with pytest.raises(ChunkUnreadable, match=f"chunk holds {len(records)} bytes, declares {declared}"):
            decode_chunk(_chunk_body(records, compression="", data=records, declared=declared), None)
    with pytest.raises(ChunkUnreadable, match=f"over the {MAX_CHUNK_BYTES} byte limit"):
        decode_chunk(_chunk_body(records, compression="", data=records, declared=MAX_CHUNK_BYTES + 1), None)
    _, got = decode_chunk(_chunk_body(records, compression="", data=records, declared=len(records)), None)
    assert [m.data for m in got if isinstance(m, Message)] == [b"x" * 100]


def _write(path: Path, *, bad_pose: bool, bad_image: bool) -> None:
    rig = make_rig()
    huge_png = b"\x89PNG\r\n\x1a\n" + b"\x00\x00\x00\x0dIHDR" + (40_000).to_bytes(4, "big") * 2 + bytes(8)
    with DriveWriter(path, rig, chunk_size=4_000) as w:
        for i in range(10):
            t = T0 + i * PERIOD
            w.write(PointCloudSample("top", t, "lidar_top", np.ones((200, 4), np.float32), LIDAR_FIELDS, seq=i))
            if bad_image and i == 4:
                w.write(ImageSample("front", t, "cam_front", huge_png, "png", seq=i))
            rotation = (0.0, 0.0, 0.0, 0.0) if bad_pose and i in (3, 7) else (0.0, 0.0, 0.0, 1.0)
            w.write_ego_pose(EgoPose(t, Transform((float(i), 0.0, 0.0), rotation), (10.0, 0.0, 0.0)))


def test_zero_quaternion_poses_and_oversized_images_in_a_drive_are_skipped_and_counted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "hostile.mcap"
    _write(path, bad_pose=True, bad_image=True)
    with DriveReader(path) as d:
        samples = list(d.samples())
        poses = d.ego_poses()
        between = d.ego_pose_at(T0 + 3 * PERIOD)  # interpolated over the refused pose, not a ZeroDivisionError
        invalid = dict(d.invalid)
    assert len(samples) == 10 and all(s.sensor == "top" for s in samples)
    assert len(poses) == 8 and invalid == {"ego": 2, "front": 1}
    assert between.pose.translation == pytest.approx((3.0, 0.0, 0.0)) and between.pose.rotation[3] == 1.0
    assert "zero quaternion" in caplog.text and "exceeds the limit" in caplog.text


def test_an_image_cut_short_in_a_drive_is_skipped_and_counted(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # A drive imported before the importers checked an image's end: its cut image was served, for the
    # camera's decode to fail in every frame using it; it is refused as it is read, naming why.
    whole = encode_jpeg(np.random.default_rng(0).integers(0, 255, (48, 64, 3), dtype=np.uint8))
    path = tmp_path / "cut.mcap"
    with DriveWriter(path, make_rig()) as w:
        for i, data in enumerate((whole, whole[: len(whole) * 6 // 10], whole + bytes(3))):
            w.write(ImageSample("front", T0 + i * PERIOD, "cam_front", data, "jpeg", seq=i))
    with DriveReader(path) as d:
        served = [s.data for s in d.samples() if isinstance(s, ImageSample)]
        invalid = dict(d.invalid)
    assert served == [whole, whole + bytes(3)] and invalid == {"front": 1}  # zero padding: a camera's, whole
    assert "JPEG image does not end with its end-of-image marker" in caplog.text


def test_a_chunk_whose_declared_size_was_raised_is_damage_naming_file_and_offset(tmp_path: Path) -> None:
    path = tmp_path / "d.mcap"
    _write(path, bad_pose=False, bad_image=False)
    # a chunk of samples (not the first ones, which hold the rig's transforms and calibrations)
    victim = [c for c in chunks_of(path) if "/sensors/top/points" in {t for t, _ in c.messages}][-1]
    # opcode (1), record length (8), message start (8) and end (8) times, then the uncompressed size
    bad = damaged_copy(path, tmp_path / "bomb.mcap", victim.start + 25, struct.pack("<Q", 2**40))
    with pytest.raises(DriveDamagedError) as info, DriveReader(bad) as d:  # strict: at open or when read
        list(d.samples())
    assert info.value.file == str(bad) and info.value.offset == victim.start
    assert f"over the {MAX_CHUNK_BYTES} byte limit" in str(info.value)
    with DriveReader(bad, strict=False, quiet=True) as d:  # not strict: that chunk is skipped, counted
        assert len(list(d.samples())) < 10
        assert len(d.damage.chunks) == 1 and "byte limit" in d.damage.chunks[0].reason
