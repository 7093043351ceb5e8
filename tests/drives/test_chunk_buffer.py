"""A reader reads its chunks through one reused buffer (ChunkBuffer): what it returns is copied out of it,
and reading a chunk allocates about its messages, not its record and its decompressed data as well."""

from __future__ import annotations

import threading
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from drive_fixtures import LIDAR_FIELDS, PERIOD, T0, make_rig, write_drive
from mcap.data_stream import RecordBuilder
from mcap.reader import SeekingReader
from mcap.records import Chunk, Message
from mcap.summary import Summary

from perception.drives import DriveReader, DriveWriter
from perception.drives._chunks import ChunkBuffer, ChunkUnreadable, decode_chunk, read_chunk
from perception.types import PointCloudSample


def _summary(path: Path) -> Summary:
    with path.open("rb") as f:
        summary = SeekingReader(f).get_summary()
    assert summary is not None
    return summary


def _fields(messages: list[Message]) -> list[tuple[int, int, int, int, bytes]]:
    return [(m.channel_id, m.sequence, m.log_time, m.publish_time, m.data) for m in messages]


@pytest.mark.parametrize("compression", ["zstd", "lz4", "none"])
def test_a_chunks_messages_are_intact_after_its_buffer_is_reused(tmp_path: Path, compression: str) -> None:
    written = write_drive(tmp_path / "d.mcap", frames=30, chunk_size=3_000, compression=compression)
    summary = _summary(written.path)
    indexes = sorted(summary.chunk_indexes, key=lambda c: c.chunk_start_offset)
    assert len(indexes) >= 4 and len({c.uncompressed_size for c in indexes}) > 1  # the buffer grows too
    with written.path.open("rb") as f:
        buffer = ChunkBuffer()
        kept = [read_chunk(f, ci, summary.channels, buffer=buffer) for ci in indexes]  # all read, then compared
    with written.path.open("rb") as f:  # the mcap library's own reading, in file order
        expected = [m for _, _, m in SeekingReader(f).iter_messages(log_time_order=False)]
    assert expected and _fields([m for ms in kept for m in ms]) == _fields(expected)
    assert all(type(m.data) is bytes for ms in kept for m in ms)  # copies, not views of the buffer


def test_a_chunk_is_read_through_a_buffer_under_its_lock(tmp_path: Path) -> None:
    """Two threads reading through one reader (a replay's samples on a worker thread, the ground truth first
    loaded on another) take turns: the stream's position and the buffer's bytes are one chunk's at a time."""
    written = write_drive(tmp_path / "d.mcap", frames=10, chunk_size=3_000)
    summary = _summary(written.path)
    ci = min(summary.chunk_indexes, key=lambda c: c.chunk_start_offset)
    buffer = ChunkBuffer()
    got: list[list[Message]] = []
    with written.path.open("rb") as f:
        expected = read_chunk(f, ci, summary.channels)
        reader = threading.Thread(target=lambda: got.append(read_chunk(f, ci, summary.channels, buffer=buffer)))
        with buffer.lock:  # another thread's read under way
            reader.start()
            reader.join(0.2)
            assert reader.is_alive() and not got  # waits for it
        reader.join(60)  # a safety net only
    assert not reader.is_alive() and _fields(got[0]) == _fields(expected)


def test_a_record_running_past_its_chunks_end_is_damage() -> None:
    builder = RecordBuilder()
    Message(channel_id=1, sequence=0, log_time=5, publish_time=5, data=b"x" * 100).write(builder)
    records: bytes = builder.end()  # type: ignore[no-untyped-call]
    cut = records[:-10]  # the message's record declares 10 bytes more than the chunk holds (no CRC to say so)
    chunk = RecordBuilder()
    Chunk(
        compression="",
        data=cut,
        message_start_time=0,
        message_end_time=10,
        uncompressed_crc=0,
        uncompressed_size=len(cut),
    ).write(chunk)
    body: bytes = chunk.end()[9:]  # type: ignore[no-untyped-call]
    with pytest.raises(ChunkUnreadable, match="bad record: a record of 122 bytes runs past the chunk's end"):
        decode_chunk(body, None)


def test_reading_a_chunk_allocates_about_its_messages_only(tmp_path: Path) -> None:
    """The record read, the data decompressed: into the reader's buffer, reused chunk after chunk (fresh
    ones each time landed on pages not touched before whenever longer-lived blocks cut up the allocator's
    free memory: a page fault each, see ChunkBuffer). Traced by tracemalloc: the peak while the messages
    of every chunk are read and dropped is about one chunk's messages (~1 x the chunk), where a record, its
    copy and the data decompressed made it ~4 x (random sweeps hardly compress)."""
    rng = np.random.default_rng(0)
    path = tmp_path / "d.mcap"
    with DriveWriter(path, make_rig(), chunk_size=2 << 20, compression="zstd") as w:
        for i in range(16):
            points = rng.normal(size=(30_000, 4)).astype(np.float32)  # 480 kB
            w.write(PointCloudSample("top", T0 + i * PERIOD, "lidar_top", points, LIDAR_FIELDS, seq=i))
    largest = max(c.uncompressed_size for c in _summary(path).chunk_indexes)
    assert largest > 2 << 20
    with DriveReader(path) as reader:
        topics = [reader.rig["top"].topic]
        count = sum(1 for _ in reader.messages(topics))  # the buffer grown to the largest chunk
        tracemalloc.start()
        try:
            again = sum(1 for _ in reader.messages(topics))
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert again == count == 16
    assert peak < 1.5 * largest, (peak, largest)
