"""Record-level MCAP walking the ``mcap`` library does not offer.

* :func:`scan_prefix` reads a file without a usable summary (truncated, or written without one)
  linearly, record by record, up to the first record that is incomplete or corrupt, and rebuilds a
  :class:`mcap.summary.Summary` (schemas, channels, one chunk index per complete chunk) so the
  library's seeking reader can serve time-ordered, topic-filtered queries over that prefix.
* :func:`times_from_index` gets per-channel message count / first / last log time from the message
  index records, without decompressing any chunk.
"""

from __future__ import annotations

import io
import struct
from dataclasses import dataclass, field
from typing import IO

from mcap.data_stream import ReadDataStream
from mcap.opcode import Opcode
from mcap.records import Channel, Chunk, ChunkIndex, Message, MessageIndex, Metadata, Schema
from mcap.stream_reader import breakup_chunk
from mcap.summary import Summary

__all__ = ["MAGIC", "ChannelTimes", "Prefix", "scan_prefix", "times_from_index"]

MAGIC = b"\x89MCAP0\r\n"
_RECORD_HEAD = struct.Struct("<BQ")  # opcode, body length


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
class Prefix:
    """What a linear scan could read."""

    summary: Summary
    metadata: list[Metadata] = field(default_factory=list)
    times: dict[int, ChannelTimes] = field(default_factory=dict)
    data_complete: bool = False  # the DataEnd record was reached: no message is missing
    stop_offset: int = 0  # byte offset of the first record that could not be read
    last_message: tuple[int, int] | None = None  # (log_time, channel id) of the latest message read


def _body(stream: IO[bytes]) -> ReadDataStream:
    return ReadDataStream(stream, calculate_crc=False)


def scan_prefix(stream: IO[bytes]) -> Prefix:
    """Scan records from just after the magic until the footer or the first unreadable record."""
    size = stream.seek(0, io.SEEK_END)
    pos = stream.seek(len(MAGIC))
    out = Prefix(summary=Summary(), stop_offset=pos)
    while True:
        head = stream.read(_RECORD_HEAD.size)
        if len(head) < _RECORD_HEAD.size:
            break
        opcode, length = _RECORD_HEAD.unpack(head)
        if opcode == 0 or length > size - pos - _RECORD_HEAD.size:
            break
        body = stream.read(length)
        try:
            done = _take(out, opcode, body, pos, length)
        except Exception:  # corrupt bytes can fail in any decoder (struct, zstd, lz4, utf-8, crc)
            break
        pos += _RECORD_HEAD.size + length
        out.stop_offset = pos
        if done:
            break
    return out


def _take(out: Prefix, opcode: int, body: bytes, pos: int, length: int) -> bool:
    """Fold one record into ``out``; True at the footer."""
    if opcode == Opcode.CHUNK:
        chunk = Chunk.read(_body(io.BytesIO(body)))
        records = breakup_chunk(chunk, validate_crc=True)  # decompress and check before accepting
        for record in records:
            _take_plain(out, record)
        out.summary.chunk_indexes.append(
            ChunkIndex(
                message_start_time=chunk.message_start_time,
                message_end_time=chunk.message_end_time,
                chunk_start_offset=pos,
                chunk_length=_RECORD_HEAD.size + length,
                message_index_offsets={},
                message_index_length=0,
                compression=chunk.compression,
                compressed_size=len(chunk.data),
                uncompressed_size=chunk.uncompressed_size,
            )
        )
    elif opcode == Opcode.METADATA:
        out.metadata.append(Metadata.read(_body(io.BytesIO(body))))
    elif opcode == Opcode.SCHEMA:
        _take_plain(out, Schema.read(_body(io.BytesIO(body))))
    elif opcode == Opcode.CHANNEL:
        _take_plain(out, Channel.read(_body(io.BytesIO(body))))
    elif opcode == Opcode.DATA_END:
        out.data_complete = True
    elif opcode == Opcode.FOOTER:
        return True
    return False


def _take_plain(out: Prefix, record: object) -> None:
    if isinstance(record, Schema):
        out.summary.schemas[record.id] = record
    elif isinstance(record, Channel):
        out.summary.channels[record.id] = record
    elif isinstance(record, Message):
        t = record.log_time
        out.times.setdefault(record.channel_id, ChannelTimes()).add(t, t)
        if out.last_message is None or t >= out.last_message[0]:
            out.last_message = (t, record.channel_id)


def times_from_index(stream: IO[bytes], summary: Summary) -> dict[int, ChannelTimes] | None:
    """Per-channel times from the message indexes (None if some chunk has no message index)."""
    times: dict[int, ChannelTimes] = {}
    for ci in summary.chunk_indexes:
        if not ci.message_index_offsets:
            return None
        stream.seek(ci.chunk_start_offset + ci.chunk_length)
        block = io.BytesIO(stream.read(ci.message_index_length))
        while True:
            head = block.read(_RECORD_HEAD.size)
            if len(head) < _RECORD_HEAD.size:
                break
            opcode, length = _RECORD_HEAD.unpack(head)
            body = block.read(length)
            if opcode != Opcode.MESSAGE_INDEX:
                continue
            index = MessageIndex.read(_body(io.BytesIO(body)))
            if index.records:
                stamps = [t for t, _ in index.records]
                times.setdefault(index.channel_id, ChannelTimes()).add(min(stamps), max(stamps), len(stamps))
    return times
