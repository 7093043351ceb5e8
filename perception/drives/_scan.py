"""Record-level MCAP walking the ``mcap`` library does not offer.

* :func:`scan_file` reads a file without a usable summary (truncated, damaged summary, or written
  without one) linearly, record by record, and rebuilds a :class:`mcap.summary.Summary` (schemas,
  channels, one chunk index per readable chunk). A record that cannot be read is skipped when its
  framing is intact (a damaged chunk: its length leads to the next record); otherwise the scan
  resynchronises on the next plausible chunk, message index or data-end record. Each skip is a
  :class:`RawDamage`. Where nothing readable follows, the file is truncated there.
* :func:`times_from_index` gets per-channel message count / first / last log time from the message
  index records, without decompressing any chunk; chunks whose index is missing or unreadable are
  returned so that the caller can count them by reading them.
* :func:`head_metadata` reads a drive's metadata from the records at its start alone (a bounded read).
"""

from __future__ import annotations

import io
import os
import re
import struct
from dataclasses import dataclass, field
from typing import IO

from mcap.data_stream import ReadDataStream
from mcap.exceptions import McapError
from mcap.opcode import Opcode
from mcap.records import Channel, Chunk, ChunkIndex, Message, MessageIndex, Metadata, Schema
from mcap.summary import Summary

from perception.drives._chunks import (
    MAGIC,
    RECORD_HEAD,
    ChunkBuffer,
    ChunkUnreadable,
    decode_chunk,
    message_index_times,
)
from perception.drives._codec import DRIVE_METADATA
from perception.errors import DriveError

__all__ = [
    "HEAD_RECORD_BYTES",
    "ChannelTimes",
    "RawDamage",
    "Scan",
    "cut_short_at",
    "cut_short_in",
    "head_metadata",
    "scan_file",
    "times_from_index",
]

#: The largest record :func:`head_metadata` reads: a drive's metadata records come right after the MCAP
#: header, the rig's first (a large rig's: some kilobytes).
HEAD_RECORD_BYTES = 4 * 2**20
_WINDOW = 1 << 20  # resynchronisation reads the file in windows of this size
_CANDIDATE = re.compile(rb"[\x06\x07\x0f]")  # chunk, message index, data end
_CHUNK_HEAD = struct.Struct("<QQQII")  # start, end, uncompressed size, crc, compression length
_MAX_OPCODE = Opcode.DATA_END


@dataclass
class ChannelTimes:
    """Message count and first/last log time of one channel."""

    count: int = 0
    first: int = 0
    last: int = 0

    def add(self, first: int, last: int, count: int = 1) -> None:
        if self.count == 0:
            self.first, self.last = first, last
        else:
            self.first, self.last = min(self.first, first), max(self.last, last)
        self.count += count


@dataclass
class RawDamage:
    """A damaged region met by the scan: byte range, reason, times and any message index that followed."""

    offset: int
    length: int
    reason: str
    start_ns: int | None = None
    end_ns: int | None = None
    #: channel id -> log times, from the damaged chunk's message index records (when they survived)
    index: dict[int, list[int]] = field(default_factory=dict)


@dataclass
class Scan:
    """What a linear scan could read."""

    summary: Summary
    metadata: list[Metadata] = field(default_factory=list)
    times: dict[int, ChannelTimes] = field(default_factory=dict)
    damaged: list[RawDamage] = field(default_factory=list)
    data_complete: bool = False  # the DataEnd record was reached: nothing is missing at the end
    stop_offset: int = 0  # byte offset after the last record read (the cut, when truncated)
    last_message: tuple[int, int] | None = None  # (log_time, channel id) of the latest message read


def _body(data: bytes) -> ReadDataStream:
    return ReadDataStream(io.BytesIO(data), calculate_crc=False)


class _Whole(io.BytesIO):
    """A record's body whose reads are whole: a field running past the record's end is an error (the
    library's reader hands out what is left, a string cut short)."""

    def read(self, size: int | None = -1, /) -> bytes:
        data = super().read(size)
        if size is not None and 0 <= size != len(data):
            raise EOFError(f"a field of {size} bytes runs past the record's end")
        return data


def cut_short_at(path: str | os.PathLike[str]) -> int | None:
    """The size of the file ``path`` when it is an MCAP file cut short: it begins as one (the magic, or its first
    bytes: an empty file too) and does not end as one (the closing magic: a writer that died before its end).
    None when it ends as a whole MCAP file, does not begin as one, or cannot be read."""
    try:
        with open(path, "rb") as f:
            return cut_short_in(f)
    except OSError:
        return None


def cut_short_in(stream: IO[bytes]) -> int | None:
    """:func:`cut_short_at` of an open file (an ``OSError`` reading it is raised)."""
    stream.seek(0)
    head = stream.read(len(MAGIC))
    size = stream.seek(0, os.SEEK_END)
    stream.seek(max(size - len(MAGIC), 0))
    tail = stream.read()
    if not MAGIC.startswith(head) or (size > len(MAGIC) and tail == MAGIC):
        return None
    return size


def head_metadata(path: str | os.PathLike[str]) -> dict[str, str] | None:
    """The drive metadata of the drive ``path`` (:attr:`DriveReader.metadata`) read from its start alone: the
    MCAP header, then the metadata records :class:`DriveWriter` writes right after it (the rig's, the drive's),
    none past the drive's -- never a message or chunk (opening the drive reads its summary, or scans it whole).

    None when the file is cut short before that record (empty, or the magic or a record cut short: a writer
    that died). A :class:`DriveError` when it does not begin as a drive: not MCAP, another record (a message, a
    chunk, a schema) before the drive's metadata, a record over :data:`HEAD_RECORD_BYTES`, one that cannot be
    read; or when the file cannot be read."""
    try:
        with open(path, "rb") as f:
            head = f.read(len(MAGIC))
            if head != MAGIC:
                if MAGIC.startswith(head):
                    return None  # empty, or the magic cut short
                raise DriveError("not an MCAP file (bad magic)", file=os.fspath(path))
            while True:
                offset = f.tell()
                top = f.read(RECORD_HEAD.size)
                if len(top) < RECORD_HEAD.size:
                    return None
                opcode, length = RECORD_HEAD.unpack(top)
                if opcode not in (Opcode.HEADER, Opcode.METADATA) or length > HEAD_RECORD_BYTES:
                    raise DriveError(
                        f"a record of opcode {opcode:#04x} and {length} bytes at byte {offset}, before the drive's "
                        "metadata",
                        file=os.fspath(path),
                    )
                body = f.read(length)
                if len(body) < length:
                    return None
                if opcode == Opcode.METADATA:
                    try:
                        record = Metadata.read(ReadDataStream(_Whole(body)))
                    except (EOFError, McapError, struct.error, UnicodeDecodeError) as exc:
                        raise DriveError(f"bad metadata record at byte {offset}: {exc}", file=os.fspath(path)) from exc
                    if record.name == DRIVE_METADATA:
                        metadata: dict[str, str] = record.metadata
                        return metadata
    except OSError as exc:
        raise DriveError(f"cannot read drive: {exc.strerror or exc}", file=os.fspath(path)) from exc


def scan_file(stream: IO[bytes]) -> Scan:
    """Scan records from just after the magic until the footer, skipping damaged ones (module docs)."""
    size = stream.seek(0, io.SEEK_END)
    pos = len(MAGIC)
    out = Scan(summary=Summary(), stop_offset=pos)
    damage: RawDamage | None = None  # the latest damage, until a readable chunk follows it
    buffer = ChunkBuffer()  # the chunks decompressed, one after another
    while True:
        stream.seek(pos)
        head = stream.read(RECORD_HEAD.size)
        if len(head) < RECORD_HEAD.size:
            break
        opcode, length = RECORD_HEAD.unpack(head)
        end = pos + RECORD_HEAD.size + length
        if 0 < opcode <= _MAX_OPCODE and end <= size:
            body = stream.read(length)
            try:
                done = _take(out, opcode, body, pos, length, damage, buffer)
            except Exception as exc:  # corrupt bytes can fail in any decoder (struct, zstd, lz4, utf-8, crc)
                if out.data_complete:
                    break  # in the summary section: every message was read already
                if _record_starts(stream, end, size):  # framing intact: skip just this record
                    damage = _record_damage(out, opcode, body, pos, end, exc)
                    out.damaged.append(damage)
                    pos = out.stop_offset = end
                    continue
            else:
                if opcode in (Opcode.CHUNK, Opcode.DATA_END):
                    _close(damage, out)
                    damage = None
                pos = out.stop_offset = end
                if done:
                    break
                continue
        if out.data_complete:
            break  # past the data end: what is left (summary, footer) holds no message
        nxt = _resync(stream, pos + 1, size)
        if nxt is None:
            break  # nothing readable follows: truncated at pos (unless the data end was read)
        damage = RawDamage(pos, nxt - pos, "unreadable bytes (no valid record)", start_ns=_last_time(out))
        out.damaged.append(damage)
        pos = nxt
    for d in out.damaged:
        if d.end_ns is None:
            d.end_ns = d.start_ns if d.start_ns is not None else _last_time(out) or 0
        if d.start_ns is None:
            d.start_ns = d.end_ns
    return out


def _last_time(out: Scan) -> int | None:
    return None if out.last_message is None else out.last_message[0]


def _close(damage: RawDamage | None, out: Scan) -> None:
    """A readable chunk (or the data end) follows ``damage``: what it lost ends before that chunk."""
    if damage is None or damage.end_ns is not None:
        return
    nxt = out.summary.chunk_indexes[-1].message_start_time if out.summary.chunk_indexes else None
    damage.end_ns = nxt if nxt is not None and (damage.start_ns is None or nxt >= damage.start_ns) else None


def _record_damage(out: Scan, opcode: int, body: bytes, pos: int, end: int, exc: Exception) -> RawDamage:
    if opcode != Opcode.CHUNK:
        name = Opcode(opcode).name.lower().replace("_", " ")
        return RawDamage(pos, end - pos, f"bad {name} record: {exc}", start_ns=_last_time(out))
    reason = exc.reason if isinstance(exc, ChunkUnreadable) else f"bad record: {exc}"
    try:  # the chunk header often survives damage to its data: it says which times were lost
        chunk = Chunk.read(_body(body))
        if chunk.message_start_time <= chunk.message_end_time:
            return RawDamage(pos, end - pos, reason, chunk.message_start_time, chunk.message_end_time)
    except Exception:  # header damaged too: the times come from the neighbours
        pass
    return RawDamage(pos, end - pos, reason, start_ns=_last_time(out))


def _record_starts(stream: IO[bytes], pos: int, size: int) -> bool:
    """Whether a plausible record (or the end of the file) is at ``pos``."""
    if pos == size:
        return True
    stream.seek(pos)
    head = stream.read(RECORD_HEAD.size)
    if len(head) < RECORD_HEAD.size:
        return False
    opcode, length = RECORD_HEAD.unpack(head)
    return bool(0 < opcode <= _MAX_OPCODE and length < 1 << 40)


def _resync(stream: IO[bytes], start: int, size: int) -> int | None:
    """Offset of the next plausible chunk, message index or data-end record at or after ``start``."""
    pos = start
    while pos < size:
        stream.seek(pos)
        window = stream.read(_WINDOW + 64)  # the overlap holds a candidate's header
        for m in _CANDIDATE.finditer(window, 0, _WINDOW):
            if _plausible(window, m.start(), pos + m.start(), size):
                return pos + m.start()
        pos += _WINDOW
    return None


def _plausible(buf: bytes, i: int, at: int, size: int) -> bool:
    """A record header at ``buf[i]`` (file offset ``at``) whose lengths are self-consistent."""
    if i + RECORD_HEAD.size > len(buf):
        return False
    opcode, length = RECORD_HEAD.unpack_from(buf, i)
    if at + RECORD_HEAD.size + length > size:
        return False
    body = i + RECORD_HEAD.size
    if opcode == Opcode.DATA_END:
        return bool(length == 4)
    if opcode == Opcode.MESSAGE_INDEX:
        if body + 6 > len(buf):
            return False
        _, records = struct.unpack_from("<HI", buf, body)
        return bool(length == 6 + records and records % 16 == 0)
    if body + _CHUNK_HEAD.size > len(buf):
        return False
    start, end, _, _, clen = _CHUNK_HEAD.unpack_from(buf, body)
    name = body + _CHUNK_HEAD.size
    if clen > 8 or start > end or name + clen + 8 > len(buf) or buf[name : name + clen] not in (b"", b"zstd", b"lz4"):
        return False
    (dlen,) = struct.unpack_from("<Q", buf, name + clen)
    return bool(length == 40 + clen + dlen)


def _take(
    out: Scan, opcode: int, body: bytes, pos: int, length: int, damage: RawDamage | None, buffer: ChunkBuffer
) -> bool:
    """Fold one record into ``out``; True at the footer."""
    if opcode == Opcode.CHUNK:
        # decompressed and checked before it is accepted
        head, records = decode_chunk(body, out.summary.channels.keys(), buffer=buffer)
        for record in records:
            if isinstance(record, Schema):
                out.summary.schemas[record.id] = record
            elif isinstance(record, Channel):
                out.summary.channels[record.id] = record
            elif isinstance(record, Message):
                t = record.log_time
                out.times.setdefault(record.channel_id, ChannelTimes()).add(t, t)
                if out.last_message is None or t >= out.last_message[0]:
                    out.last_message = (t, record.channel_id)
        out.summary.chunk_indexes.append(
            ChunkIndex(
                message_start_time=head.message_start_time,
                message_end_time=head.message_end_time,
                chunk_start_offset=pos,
                chunk_length=RECORD_HEAD.size + length,
                message_index_offsets={},
                message_index_length=0,
                compression=head.compression,
                compressed_size=head.compressed_size,
                uncompressed_size=head.uncompressed_size,
            )
        )
    elif opcode == Opcode.MESSAGE_INDEX:
        if damage is not None:  # the damaged chunk's own index: what it held
            index = MessageIndex.read(_body(body))
            damage.index.setdefault(index.channel_id, []).extend(t for t, _ in index.records)
    elif opcode == Opcode.METADATA:
        out.metadata.append(Metadata.read(_body(body)))
    elif opcode == Opcode.SCHEMA:
        schema = Schema.read(_body(body))
        out.summary.schemas[schema.id] = schema
    elif opcode == Opcode.CHANNEL:
        channel = Channel.read(_body(body))
        out.summary.channels[channel.id] = channel
    elif opcode == Opcode.DATA_END:
        out.data_complete = True
    elif opcode == Opcode.FOOTER:
        return True
    return False


def times_from_index(stream: IO[bytes], summary: Summary) -> tuple[dict[int, ChannelTimes], list[ChunkIndex]]:
    """Per-channel times from the message indexes, and the chunks whose index is missing or unreadable."""
    times: dict[int, ChannelTimes] = {}
    unindexed: list[ChunkIndex] = []
    for ci in summary.chunk_indexes:
        per_channel = []
        for cid, offset in ci.message_index_offsets.items():
            stamps = message_index_times(stream, offset, cid, ci.message_start_time, ci.message_end_time)
            if stamps is None:
                break
            per_channel.append((cid, stamps))
        else:
            if ci.message_index_offsets:
                for cid, stamps in per_channel:
                    if stamps:
                        times.setdefault(cid, ChannelTimes()).add(min(stamps), max(stamps), len(stamps))
                continue
        unindexed.append(ci)
    return times, unindexed
