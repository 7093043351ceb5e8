"""Damaged chunks: a counted, reported skip -- the chunks after the damage are still read.

Every case damages a real drive written into tmp_path the way a disk error or a crashed recorder
would: bytes flipped inside one chunk's compressed data, a zeroed 64 KiB block in the middle, a bad
record inside an uncompressed chunk, a damaged summary (chunk indexes), no summary plus damage (the
scan resynchronises). The expectations come from the INTACT file: which chunks the damage touches,
and which messages those chunks held.
"""

from __future__ import annotations

import io
import json
import logging
import struct
from dataclasses import dataclass
from pathlib import Path

import pytest
from drive_fixtures import Written, write_drive
from mcap.reader import SeekingReader
from mcap.records import ChunkIndex

from perception.cli import main
from perception.drives import DriveReader
from perception.drives._chunks import read_chunk
from perception.errors import DriveDamagedError

BLOCK = 64 * 1024


@dataclass(frozen=True)
class Chunk:
    index: ChunkIndex
    messages: list[tuple[str, int]]  # (topic, log_time) it holds, from the intact file

    @property
    def start(self) -> int:
        return self.index.chunk_start_offset

    @property
    def end(self) -> int:
        return self.index.chunk_start_offset + self.index.chunk_length


def chunks_of(path: Path) -> list[Chunk]:
    with path.open("rb") as f:
        summary = SeekingReader(f).get_summary()
        assert summary is not None
        out = []
        for ci in sorted(summary.chunk_indexes, key=lambda c: c.chunk_start_offset):
            msgs = read_chunk(f, ci, summary.channels)
            out.append(Chunk(ci, [(summary.channels[m.channel_id].topic, m.log_time) for m in msgs]))
        return out


def damaged_copy(src: Path, dst: Path, at: int, block: bytes) -> Path:
    data = bytearray(src.read_bytes())
    data[at : at + len(block)] = block
    dst.write_bytes(bytes(data))
    return dst


def flip(src: Path, dst: Path, at: int, n: int = 16) -> Path:
    data = src.read_bytes()
    return damaged_copy(src, dst, at, bytes(b ^ 0xFF for b in data[at : at + n]))


def sample_keys(written: Written, lost: set[tuple[str, int]]) -> list[tuple[str, int]]:
    topics = {s.name: s.topic for s in written.rig}
    return [(s.sensor, s.t_ns) for s in written.sorted_samples() if (topics[s.sensor], s.t_ns) not in lost]


def lost_set(chunks: list[Chunk]) -> set[tuple[str, int]]:
    return {m for c in chunks for m in c.messages}


@pytest.fixture
def medium(tmp_path: Path) -> Written:
    """60 frames in chunks of ~8 KiB: damage in the middle leaves readable chunks on both sides."""
    return write_drive(tmp_path / "medium.mcap", frames=60, chunk_size=8_000)


# -- flipped bytes inside one chunk's compressed data --------------------------------------------------


def test_flipped_bytes_in_one_chunk_skip_exactly_its_messages(medium: Written, tmp_path: Path) -> None:
    chunks = chunks_of(medium.path)
    victim = chunks[len(chunks) // 2]
    path = flip(medium.path, tmp_path / "flipped.mcap", victim.start + victim.index.chunk_length // 2)

    with DriveReader(path, strict=False) as d:
        got = [(s.sensor, s.t_ns) for s in d.samples()]
        damage = d.damage
        stats = d.stats()
    assert got == sample_keys(medium, set(victim.messages))  # before AND after the damage, in order
    assert any(t < victim.index.message_start_time for _, t in got)
    assert any(t > victim.index.message_end_time for _, t in got)
    assert len(damage.chunks) == 1 and damage.truncated is None and damage.summary is None
    chunk = damage.chunks[0]
    assert (chunk.offset, chunk.length) == (victim.start, victim.index.chunk_length)
    assert "CRC mismatch" in chunk.reason or "decompression error" in chunk.reason
    assert chunk.message_count == len(victim.messages)
    # per topic: the count and the time range of exactly the messages the chunk held
    for topic, loss in damage.by_topic().items():
        times = [t for tp, t in victim.messages if tp == topic]
        assert loss.count == len(times) and loss.ranges == ((min(times), max(times)),), topic
    top = stats.topics["/sensors/top/points"]
    held = sum(1 for tp, _ in victim.messages if tp == "/sensors/top/points")
    assert (top.message_count, top.lost_count) == (60 - held, held)


def test_strict_reader_raises_at_the_damaged_chunk_naming_file_and_offset(medium: Written, tmp_path: Path) -> None:
    chunks = chunks_of(medium.path)
    victim = chunks[len(chunks) // 2]
    path = flip(medium.path, tmp_path / "flipped.mcap", victim.start + victim.index.chunk_length // 2)
    got = []
    with DriveReader(path, sensors=["top"]) as d, pytest.raises(DriveDamagedError) as info:
        for s in d.samples():
            got.append(s.t_ns)
    assert info.value.file == str(path) and info.value.offset == victim.start
    assert f"chunk at byte {victim.start}" in str(info.value)
    assert got and max(got) < victim.index.message_start_time + 1  # stopped at the damage


def test_skips_are_logged_once_per_chunk(medium: Written, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    chunks = chunks_of(medium.path)
    victim = chunks[len(chunks) // 2]
    path = flip(medium.path, tmp_path / "flipped.mcap", victim.start + victim.index.chunk_length // 2)
    with caplog.at_level(logging.WARNING, logger="perception.drives"), DriveReader(path, strict=False) as d:
        list(d.samples())
        d.ego_poses()
        list(d.samples())
    lines = [r.getMessage() for r in caplog.records if f"chunk at byte {victim.start}" in r.getMessage()]
    assert len(lines) == 1 and "skipped" in lines[0]


# -- a zeroed 64 KiB block in the middle ---------------------------------------------------------------


def test_zeroed_block_in_the_middle(tmp_path: Path) -> None:
    written = write_drive(tmp_path / "big.mcap", frames=200, chunk_size=8_000)
    size = written.path.stat().st_size
    assert size > 4 * BLOCK
    at = size // 2
    path = damaged_copy(written.path, tmp_path / "zeroed.mcap", at, bytes(BLOCK))
    chunks = chunks_of(written.path)
    hit = [c for c in chunks if c.start < at + BLOCK and c.end > at]
    assert len(hit) >= 2

    with DriveReader(path, strict=False) as d:
        got = [(s.sensor, s.t_ns) for s in d.samples()]
        damage = d.verify()
    assert got == sample_keys(written, lost_set(hit))
    assert [c.offset for c in damage.chunks] == [c.start for c in hit]
    assert not damage.truncated and damage.data_lost
    # A chunk whose message index (the records right after it) survived has exact counts, one whose
    # index was zeroed too an unknown count; the time range of every damaged chunk is its index's.
    for c, found in zip(hit, damage.chunks, strict=True):
        assert found.start_ns == c.index.message_start_time and found.end_ns == c.index.message_end_time
        index_intact = c.end + c.index.message_index_length <= at or c.end >= at + BLOCK
        assert found.message_count == (len(c.messages) if index_intact else None)
    assert damage.messages_lost is None  # some count is unknown: never reported as a number


def test_zeroed_block_on_the_bundled_drive_loses_one_chunk(tmp_path: Path) -> None:
    bundled = Path(__file__).resolve().parents[2] / "replay_data" / "urban_seed7_10s.mcap"
    size = bundled.stat().st_size
    path = damaged_copy(bundled, tmp_path / "urban_zeroed.mcap", size // 2, bytes(BLOCK))
    chunks = chunks_of(bundled)
    (hit,) = [c for c in chunks if c.start < size // 2 + BLOCK and c.end > size // 2]
    with DriveReader(path, strict=False, quiet=True) as d:
        lidar = [s.t_ns for s in d.samples(sensors=["lidar_top"])]
        damage = d.verify()
    held = sorted(t for tp, t in hit.messages if tp == "/sensors/lidar_top/points")
    assert len(lidar) == 100 - len(held) and not set(held) & set(lidar)
    assert min(lidar) < held[0] and max(lidar) > held[-1]
    loss = damage.by_topic()["/sensors/lidar_top/points"]
    assert loss.count == len(held) and loss.ranges == ((held[0], held[-1]),)


# -- a bad record inside a chunk whose CRC is not set ---------------------------------------------------


def test_bad_record_in_an_uncompressed_chunk(tmp_path: Path) -> None:
    written = write_drive(tmp_path / "plain.mcap", frames=30, chunk_size=8_000, compression="none")
    chunks = chunks_of(written.path)
    victim = chunks[len(chunks) // 2]
    data = bytearray(written.path.read_bytes())
    head = victim.start + 9
    struct.pack_into("<I", data, head + 24, 0)  # uncompressed_crc = 0: not checked
    (clen,) = struct.unpack_from("<I", data, head + 28)
    pos = head + 32 + clen + 8  # first record of the chunk's data
    while data[pos] != 5:  # walk to the first message record
        (length,) = struct.unpack_from("<Q", data, pos + 1)
        pos += 9 + length
    struct.pack_into("<H", data, pos + 9, 999)  # a message on a channel that does not exist
    path = tmp_path / "badrecord.mcap"
    path.write_bytes(bytes(data))
    with DriveReader(path, strict=False) as d:
        got = [(s.sensor, s.t_ns) for s in d.samples()]
        damage = d.damage
    assert got == sample_keys(written, set(victim.messages))
    assert len(damage.chunks) == 1 and "bad record: message on unknown channel 999" in damage.chunks[0].reason


# -- a damaged summary / chunk index -----------------------------------------------------------------


def test_damaged_chunk_index_in_the_summary_falls_back_to_a_scan(medium: Written, tmp_path: Path) -> None:
    with medium.path.open("rb") as f:
        f.seek(-(8 + 29), io.SEEK_END)  # footer: opcode, length, summary_start, summary_offset_start, crc
        _, _, summary_start, _, _ = struct.unpack("<BQQQI", f.read(29))
    path = flip(medium.path, tmp_path / "badsummary.mcap", summary_start + 40, 4)
    with DriveReader(path, strict=False) as d:
        got = [(s.sensor, s.t_ns) for s in d.samples()]
        damage = d.verify()
        stats = d.stats()
    assert got == sample_keys(medium, set())  # nothing lost: the data section is intact
    assert damage and not damage.data_lost and damage.summary is not None
    assert stats.topics["/sensors/top/points"].message_count == 60


def test_no_summary_and_a_zeroed_block_resynchronises(tmp_path: Path) -> None:
    written = write_drive(tmp_path / "big.mcap", frames=60, chunk_size=8_000)
    chunks = chunks_of(written.path)
    data = written.path.read_bytes()
    with written.path.open("rb") as f:
        f.seek(-(8 + 29), io.SEEK_END)
        _, _, summary_start, _, _ = struct.unpack("<BQQQI", f.read(29))
    victim = chunks[len(chunks) // 2]
    at = victim.start + 3  # the chunk's header itself: its length is gone, the scan must resynchronise
    body = bytearray(data[:summary_start])  # no summary, no footer: like a recorder that died at the end
    body[at : at + 2048] = bytes(2048)
    path = tmp_path / "nosummary.mcap"
    path.write_bytes(bytes(body))
    hit = [c for c in chunks if c.start < at + 2048 and c.end > at]
    with DriveReader(path, strict=False) as d:
        got = [(s.sensor, s.t_ns) for s in d.samples()]
        damage = d.damage
    assert got == sample_keys(written, lost_set(hit))
    assert len(damage.chunks) == 1 and damage.chunks[0].offset == victim.start
    assert damage.truncated is None  # the data end was found after the damage
    lost = damage.by_topic()
    if "*" not in lost:  # the chunk's message index survived: exact counts
        assert sum(loss.count or 0 for loss in lost.values()) == len(victim.messages)
    with pytest.raises(DriveDamagedError, match=f"chunk at byte {victim.start}"):
        DriveReader(path)  # strict: the scan found it, an error at open


@pytest.mark.parametrize("where", ["summary", "before the footer", "in the footer", "in the magic"])
def test_a_drive_cut_after_its_data_is_damaged_though_nothing_is_lost(
    medium: Written, tmp_path: Path, where: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # cut inside its summary or the footer: every message is there, but the file is not whole (was: intact)
    data = medium.path.read_bytes()
    _, _, summary_start, _, _ = struct.unpack("<BQQQI", data[-(8 + 29) : -8])
    size = {
        "summary": summary_start + 50,
        "before the footer": len(data) - 8 - 29,
        "in the footer": len(data) - 8 - 10,
        "in the magic": len(data) - 3,
    }[where]
    path = tmp_path / "cut.mcap"
    path.write_bytes(data[:size])
    with DriveReader(path, strict=False, quiet=True) as d:
        got = [(s.sensor, s.t_ns) for s in d.samples()]
        damage = d.verify()
    assert got == sample_keys(medium, set())
    assert damage and not damage.data_lost and damage.summary == f"cut short at byte {size} (no footer)"
    assert main(["info", "--strict", str(path)]) == 3
    assert f"cut short at byte {size}" in capsys.readouterr().err


# -- truncation still works, and the info command ---------------------------------------------------------


def test_truncated_and_damaged(medium: Written, tmp_path: Path) -> None:
    chunks = chunks_of(medium.path)
    victim = chunks[len(chunks) // 3]
    data = bytearray(flip(medium.path, tmp_path / "f.mcap", victim.start + 200).read_bytes())
    cut = chunks[2 * len(chunks) // 3].start + 100
    path = tmp_path / "cut.mcap"
    path.write_bytes(bytes(data[:cut]))
    with DriveReader(path, strict=False) as d:
        got = [(s.sensor, s.t_ns) for s in d.samples()]
        damage = d.damage
    before_cut = {m for c in chunks if c.end > cut for m in c.messages}
    assert got == sample_keys(medium, set(victim.messages) | before_cut)
    assert [c.offset for c in damage.chunks] == [victim.start]
    assert damage.truncated is not None and damage.truncated_at == chunks[2 * len(chunks) // 3].start


def test_info_reports_damage_and_exits_3(medium: Written, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    chunks = chunks_of(medium.path)
    victim = chunks[len(chunks) // 2]
    path = flip(medium.path, tmp_path / "flipped.mcap", victim.start + victim.index.chunk_length // 2)
    assert main(["info", str(path)]) == 3
    out, err = capsys.readouterr()
    assert f"chunk at byte {victim.start} ({victim.index.chunk_length} bytes)" in out
    assert f"DAMAGED: {len(victim.messages)} messages lost in 1 chunk(s)" in out
    assert err.count("\n") == 1 and str(path) in err and f"offset={victim.start}" in err

    assert main(["info", "--json", str(path)]) == 3
    doc = json.loads(capsys.readouterr().out)
    assert doc["damage"]["messages_lost"] == len(victim.messages)
    assert doc["damage"]["chunks"][0]["offset"] == victim.start
    top = doc["damage"]["topics"]["/sensors/top/points"]
    times = [t for tp, t in victim.messages if tp == "/sensors/top/points"]
    assert top == {"count": len(times), "ranges_ns": [[min(times), max(times)]]}

    assert main(["info", "--strict", str(path)]) == 3
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and f"chunk at byte {victim.start}" in err

    assert main(["info", "--strict", str(medium.path)]) == 0  # intact
    assert "DAMAGED" not in capsys.readouterr().out


# -- a chunk's CRC is checked once per reader ----------------------------------------------------------


def test_each_chunk_is_crc_checked_on_its_first_read_only(
    medium: Written, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A replay reads every chunk several times (ego poses, ground truth, samples): the first read checks
    its CRC (damage is found there, see above), the later ones do not compute it again."""
    import perception.drives._chunks as chunks_mod

    checks: list[bool] = []
    original = chunks_mod.decode_chunk

    def spy(body: bytes, channels: object, *, check_crc: bool = True, buffer: object = None) -> object:
        checks.append(check_crc)
        return original(body, channels, check_crc=check_crc, buffer=buffer)  # type: ignore[arg-type]

    monkeypatch.setattr(chunks_mod, "decode_chunk", spy)
    with DriveReader(medium.path, strict=False) as d:
        first = [(s.sensor, s.t_ns) for s in d.samples()]
        assert True in checks and d.damage.chunks == ()
        checks.clear()
        again = [(s.sensor, s.t_ns) for s in d.samples()]
    assert again == first
    assert checks and not any(checks)
