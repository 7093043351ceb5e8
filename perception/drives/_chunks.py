"""Chunk-by-chunk message reading that survives a damaged chunk.

The ``mcap`` library's seeking reader stops for good at the first chunk that does not decompress or
fails its CRC (its generator dies with the exception). Here every chunk is read on its own, through
the chunk indexes (from the summary, or rebuilt by a scan): a chunk that cannot be read is handed to
``on_damage`` with the reason -- which raises (strict) or records it (skip) -- and the merge goes on
with the next chunk. Messages come out in log-time order, ties in file order, exactly as the
library's ``iter_messages(log_time_order=True)`` yields them.

Decompression is bounded: a chunk declaring more than :data:`MAX_CHUNK_BYTES` uncompressed, or whose
zstd/lz4 frame declares or yields more than the chunk does, is unreadable (damage naming the chunk)
before any large buffer is allocated; the library would allocate whatever the frame header claims. An
uncompressed chunk must hold what it declares too.
"""

from __future__ import annotations

import heapq
import io
import struct
import threading
import zlib
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass
from typing import IO

import lz4.frame  # type: ignore[import-untyped]
import zstandard
from mcap.data_stream import ReadDataStream
from mcap.opcode import Opcode
from mcap.records import Channel, ChunkIndex, McapRecord, Message, MessageIndex, Schema

from perception.drives._damage import LostMessages

__all__ = [
    "KEPT_CHUNK_BYTES",
    "MAGIC",
    "MAX_CHUNK_BYTES",
    "RECORD_HEAD",
    "UNKNOWN_TOPICS",
    "ChunkBuffer",
    "ChunkHead",
    "ChunkUnreadable",
    "decode_chunk",
    "iter_chunk_messages",
    "lost_messages",
    "message_index_times",
    "read_chunk",
    "read_footer",
    "summary_crc_ok",
]

#: What an MCAP file begins and ends with.
MAGIC = b"\x89MCAP0\r\n"
RECORD_HEAD = struct.Struct("<BQ")  # opcode, body length
#: The topic named in a loss whose topics are unknown (no readable message index for the chunk).
UNKNOWN_TOPICS = "*"
_FOOTER = struct.Struct("<BQQQI")  # opcode, length, summary_start, summary_offset_start, summary_crc
#: The largest uncompressed chunk read (drives are written in 4 MiB chunks; one chunk holds at least
#: one message, and a sample is at most 64 MiB: ``perception.kinds.MAX_SAMPLE_BYTES``).
MAX_CHUNK_BYTES = 256 * 2**20
#: The largest decompressed chunk a :class:`ChunkBuffer` keeps for the next one.
KEPT_CHUNK_BYTES = 64 * 2**20
_CHUNK_FIXED = struct.Struct("<QQQII")  # message start and end time, uncompressed size and CRC, compression's length
_U64 = struct.Struct("<Q")
_MESSAGE_FIXED = struct.Struct("<HIQQ")  # channel id, sequence, log time, publish time


class ChunkUnreadable(Exception):
    """A chunk record cannot be read; ``reason`` says why in a few words."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _reason(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    if "decompress" in text.lower() or type(exc).__module__.split(".")[0] in ("zstandard", "lz4"):
        return text if text.startswith("decompression error") else f"decompression error: {text}"
    return f"bad record: {text}"


@dataclass(frozen=True)
class ChunkHead:
    """A chunk record's header fields (its data is read by :func:`decode_chunk`)."""

    message_start_time: int
    message_end_time: int
    compression: str
    compressed_size: int
    uncompressed_size: int


class ChunkBuffer:
    """Memory reused for reading chunks one after another: a chunk record's body as read, and its data
    decompressed (a reader's). Its :attr:`lock` is held while a chunk is read through it (:func:`read_chunk`):
    a replay's samples are read on a worker thread while the frames' ground truth is first loaded on another.

    A replay reads a ~2 MB chunk record and decompresses it to ~4 MB every ~8 frames. In fresh buffers (with
    the record's data copied once more and the previous chunk's messages still held) a chunk's read needed ~4x
    the chunk of free memory in its thread's arena; what an arena does not have yet is faulted in, a page at
    a time (~1.7 us each on the CI's VMs, zeroing included): most of all beside a run recorder, whose queue
    keeps ~32 frames of samples in the arenas. Reused, a read needs about its messages. The records
    :func:`decode_chunk` returns are copied out of the buffers, so they are free again once the call
    returns. Buffers over :data:`KEPT_CHUNK_BYTES` are not kept.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self._body = bytearray()
        self._data = bytearray()

    def body(self, size: int) -> memoryview:
        """``size`` writable bytes for a record's body, valid until the next call."""
        self._body, view = _grown(self._body, size)
        return view

    def data(self, size: int) -> memoryview:
        """``size`` writable bytes for a chunk's decompressed data, valid until the next call."""
        self._data, view = _grown(self._data, size)
        return view


def _grown(buffer: bytearray, size: int) -> tuple[bytearray, memoryview]:
    """``buffer``, or a larger one replacing it (views of the old one may still be alive: a bytearray they
    pin cannot be resized), and a view of its first ``size`` bytes; a fresh one over the size kept."""
    if size > KEPT_CHUNK_BYTES:
        return buffer, memoryview(bytearray(size))
    if size > len(buffer):
        buffer = bytearray(size)
    return buffer, memoryview(buffer)[:size]


def decode_chunk(
    body: bytes | memoryview,
    channels: Collection[int] | None,
    *,
    check_crc: bool = True,
    buffer: ChunkBuffer | None = None,
) -> tuple[ChunkHead, list[McapRecord]]:
    """Parse a chunk record body, decompress it, check its CRC and its records; its records in order.

    A message must be on one of ``channels`` or on a channel defined earlier in the chunk (``None``:
    any channel). ``check_crc=False``: the CRC of the decompressed data is not computed again (for a
    chunk this reader has already read and checked). ``buffer``: where the chunk is decompressed (a new
    one when None); the records returned hold copies, none views ``body`` or ``buffer``. Raises
    :class:`ChunkUnreadable`.
    """
    view = memoryview(body)
    try:
        head, compressed, crc = _chunk_record(view)
        data = _decompressed(head, compressed, ChunkBuffer() if buffer is None else buffer)
        if check_crc and crc != 0 and (actual := zlib.crc32(data)) != crc:
            raise ChunkUnreadable(f"CRC mismatch (expected {crc:#010x}, got {actual:#010x})")
        records = _records(data)
    except ChunkUnreadable:
        raise
    except Exception as exc:  # corrupt bytes fail in any decoder (struct, zstd, lz4, utf-8)
        raise ChunkUnreadable(_reason(exc)) from exc
    local: set[int] = set()
    for record in records:
        if isinstance(record, Channel):
            local.add(record.id)
        elif isinstance(record, Message):
            if channels is not None and record.channel_id not in channels and record.channel_id not in local:
                raise ChunkUnreadable(f"bad record: message on unknown channel {record.channel_id}")
            if not head.message_start_time <= record.log_time <= head.message_end_time:
                raise ChunkUnreadable(f"bad record: message time {record.log_time} outside the chunk's range")
    return head, records


def _chunk_record(body: memoryview) -> tuple[ChunkHead, memoryview, int]:
    """The header of a chunk record, its (compressed) data viewed in ``body``, and its CRC."""
    if len(body) < _CHUNK_FIXED.size:
        raise ChunkUnreadable("bad record: chunk header cut short")
    start, end, size, crc, name_length = _CHUNK_FIXED.unpack_from(body)
    at = _CHUNK_FIXED.size + name_length
    if at + 8 > len(body):
        raise ChunkUnreadable("bad record: chunk header cut short")
    compression = str(body[_CHUNK_FIXED.size : at], "utf-8")
    (data_length,) = _U64.unpack_from(body, at)
    if at + 8 + data_length != len(body):
        raise ChunkUnreadable("bad record: chunk header does not match the record length")
    return ChunkHead(start, end, compression, data_length, size), body[at + 8 :], crc


def _records(data: memoryview) -> list[McapRecord]:
    """The schema, channel and message records of a decompressed chunk, copied out of ``data`` (records of
    other kinds are skipped); each record is read within its declared length."""
    records: list[McapRecord] = []
    pos, end = 0, len(data)
    while pos < end:
        if pos + RECORD_HEAD.size > end:
            raise ChunkUnreadable("bad record: record header cut short")
        opcode, length = RECORD_HEAD.unpack_from(data, pos)
        start = pos + RECORD_HEAD.size
        pos = start + length
        if pos > end:
            raise ChunkUnreadable(f"bad record: a record of {length} bytes runs past the chunk's end")
        if opcode == Opcode.MESSAGE:
            if length < _MESSAGE_FIXED.size:
                raise ChunkUnreadable(f"bad record: a message record of {length} bytes")
            cid, sequence, log_time, publish_time = _MESSAGE_FIXED.unpack_from(data, start)
            payload = data[start + _MESSAGE_FIXED.size : pos].tobytes()
            records.append(
                Message(channel_id=cid, sequence=sequence, log_time=log_time, publish_time=publish_time, data=payload)
            )
        elif opcode in (Opcode.CHANNEL, Opcode.SCHEMA):
            stream = ReadDataStream(io.BytesIO(data[start:pos].tobytes()), calculate_crc=False)
            records.append(Channel.read(stream) if opcode == Opcode.CHANNEL else Schema.read(stream))
    return records


def _decompressed(head: ChunkHead, compressed: memoryview, buffer: ChunkBuffer) -> memoryview:
    """The chunk's data decompressed (into ``buffer`` for zstd), never past its declared size (bounded: see
    module docs)."""
    declared = head.uncompressed_size
    if declared > MAX_CHUNK_BYTES:
        raise ChunkUnreadable(f"declares {declared} bytes uncompressed, over the {MAX_CHUNK_BYTES} byte limit")
    if head.compression == "":
        if len(compressed) != declared:
            raise ChunkUnreadable(f"uncompressed chunk holds {len(compressed)} bytes, declares {declared}")
        return compressed
    if head.compression == "zstd":
        content = zstandard.frame_content_size(compressed)  # -1: not in the frame header
        if content > declared:
            raise ChunkUnreadable(f"zstd frame declares {content} bytes, the chunk {declared}")
        data = buffer.data(declared)
        reader = zstandard.ZstdDecompressor().stream_reader(compressed)  # the first frame, as the library's
        got = 0
        while got < declared and (n := reader.readinto(data[got:])):
            got += n
        if got == declared and reader.read(1):
            raise ChunkUnreadable(f"zstd frame holds more than the {declared} bytes the chunk declares")
    elif head.compression == "lz4":
        content = lz4.frame.get_frame_info(compressed)["content_size"]  # 0: not in the frame header
        if content > declared:
            raise ChunkUnreadable(f"lz4 frame declares {content} bytes, the chunk {declared}")
        decompressor = lz4.frame.LZ4FrameDecompressor()
        data = memoryview(decompressor.decompress(compressed, max_length=declared))
        if not decompressor.eof:
            raise ChunkUnreadable(f"lz4 frame holds more than the {declared} bytes the chunk declares")
        got = len(data)
    else:
        raise ChunkUnreadable(f"unsupported compression {head.compression!r}")
    if got != declared:
        raise ChunkUnreadable(f"decompression error: {got} bytes, the chunk declares {declared}")
    return data


def read_chunk(
    stream: IO[bytes],
    ci: ChunkIndex,
    channels: Collection[int] | None,
    *,
    check_crc: bool = True,
    buffer: ChunkBuffer | None = None,
) -> list[Message]:
    """The messages of the chunk ``ci`` points at, in file order; :class:`ChunkUnreadable` if damaged
    (``check_crc``, ``buffer``: as in :func:`decode_chunk`). With a ``buffer``, under its lock: one chunk read
    at a time through it (the stream's position and the buffer's bytes)."""
    if buffer is None:
        return _read_chunk(stream, ci, channels, check_crc, None)
    with buffer.lock:
        return _read_chunk(stream, ci, channels, check_crc, buffer)


def _read_chunk(
    stream: IO[bytes], ci: ChunkIndex, channels: Collection[int] | None, check_crc: bool, buffer: ChunkBuffer | None
) -> list[Message]:
    stream.seek(ci.chunk_start_offset)
    head = stream.read(RECORD_HEAD.size)
    if len(head) < RECORD_HEAD.size:
        raise ChunkUnreadable("chunk record cut short")
    opcode, length = RECORD_HEAD.unpack(head)
    if opcode != Opcode.CHUNK:
        raise ChunkUnreadable(f"bad record: opcode {opcode:#04x} where the index has a chunk")
    if ci.chunk_length and RECORD_HEAD.size + length != ci.chunk_length:
        raise ChunkUnreadable(f"bad record: chunk length {RECORD_HEAD.size + length} differs from its index's")
    body = stream.read(length) if buffer is None else _read_into(stream, buffer.body(length))
    if len(body) < length:
        raise ChunkUnreadable("chunk record cut short")
    records = decode_chunk(body, channels, check_crc=check_crc, buffer=buffer)[1]
    return [r for r in records if isinstance(r, Message)]


def _read_into(stream: IO[bytes], view: memoryview) -> memoryview:
    """``view`` filled from ``stream`` as far as it goes: the part filled."""
    readinto: Callable[[memoryview], int | None] | None = getattr(stream, "readinto", None)
    got = 0
    while got < len(view):
        if readinto is not None:
            n = readinto(view[got:]) or 0
        else:
            block = stream.read(len(view) - got)
            n = len(block)
            view[got : got + n] = block
        if n == 0:
            break
        got += n
    return view[:got]


def lost_messages(stream: IO[bytes], ci: ChunkIndex, channels: Mapping[int, Channel]) -> tuple[LostMessages, ...]:
    """What the (damaged) chunk ``ci`` held, per topic, from its message index records.

    A topic whose index record is unreadable or implausible gets ``count=None`` and the chunk's time
    range; a chunk without message indexes one :data:`UNKNOWN_TOPICS` entry.
    """
    start, end = ci.message_start_time, ci.message_end_time
    if not ci.message_index_offsets:
        return (LostMessages(UNKNOWN_TOPICS, None, start, end),)
    out = []
    for cid, offset in sorted(ci.message_index_offsets.items()):
        topic = channels[cid].topic if cid in channels else f"<channel {cid}>"
        stamps = message_index_times(stream, offset, cid, start, end)
        if stamps is None:
            out.append(LostMessages(topic, None, start, end))
        elif stamps:
            out.append(LostMessages(topic, len(stamps), min(stamps), max(stamps)))
    return tuple(sorted(out, key=lambda m: m.topic))


def message_index_times(stream: IO[bytes], offset: int, cid: int, start: int, end: int) -> list[int] | None:
    """Log times of one message index record (None when it is unreadable or does not fit the chunk)."""
    stream.seek(offset)
    head = stream.read(RECORD_HEAD.size)
    if len(head) < RECORD_HEAD.size:
        return None
    opcode, length = RECORD_HEAD.unpack(head)
    if opcode != Opcode.MESSAGE_INDEX or length < 6 or (length - 6) % 16 or length > 1 << 30:
        return None
    body = stream.read(length)
    try:
        index = MessageIndex.read(ReadDataStream(io.BytesIO(body), calculate_crc=False))
    except Exception:  # a damaged index record: the counts are unknown, not an error
        return None
    stamps = [t for t, _ in index.records]
    if index.channel_id != cid or any(not start <= t <= end for t in stamps):
        return None
    return stamps


def iter_chunk_messages(
    stream: IO[bytes],
    chunk_indexes: list[ChunkIndex],
    channels: Mapping[int, Channel],
    topics: Collection[str] | None,
    start_ns: int | None,
    end_ns: int | None,
    on_damage: Callable[[ChunkIndex, str], None],
    skip: Collection[int] = (),
    checked: set[int] | None = None,
    buffer: ChunkBuffer | None = None,
) -> Iterator[tuple[Channel, Message]]:
    """Messages of ``topics`` with ``start_ns <= log_time < end_ns``, in log-time order (ties: file order).

    A chunk that cannot be read goes to ``on_damage(chunk_index, reason)`` (which may raise) and is
    skipped; chunks whose offset is in ``skip`` are not read at all; the offsets of chunks read
    successfully are added to ``checked``, and a chunk already in it is not CRC-checked again (a replay
    reads every chunk up to three times: ego poses, ground truth, samples; the CRC of its ~50 MB of
    decompressed data is ~0.2 ms of the client's CPU per frame on the bundled drive). ``buffer``: where
    the chunks are decompressed (see :func:`decode_chunk`).
    """
    wanted = None if topics is None else {cid for cid, ch in channels.items() if ch.topic in topics}
    # Heap entries (log_time, chunk offset, index in chunk or -1 for the chunk itself, payload): the
    # first three are unique, so payloads are never compared.
    heap: list[tuple[int, int, int, ChunkIndex | Message]] = []
    for ci in chunk_indexes:
        if ci.chunk_start_offset in skip:
            continue
        if start_ns is not None and ci.message_end_time < start_ns:
            continue
        if end_ns is not None and ci.message_start_time >= end_ns:
            continue
        if wanted is not None and ci.message_index_offsets and not wanted & ci.message_index_offsets.keys():
            continue
        heap.append((ci.message_start_time, ci.chunk_start_offset, -1, ci))
    heapq.heapify(heap)
    while heap:
        _, offset, _, item = heapq.heappop(heap)
        if isinstance(item, Message):
            yield channels[item.channel_id], item
            continue
        try:
            check = checked is None or offset not in checked
            messages = read_chunk(stream, item, channels, check_crc=check, buffer=buffer)
        except ChunkUnreadable as exc:
            on_damage(item, exc.reason)
            continue
        if checked is not None:
            checked.add(offset)
        _push(heap, offset, messages, wanted, start_ns, end_ns)
        del messages  # its messages are in the heap: not held a chunk longer (while the next one is read)


def _push(
    heap: list[tuple[int, int, int, ChunkIndex | Message]],
    offset: int,
    messages: list[Message],
    wanted: set[int] | None,
    start_ns: int | None,
    end_ns: int | None,
) -> None:
    """Push the messages of the chunk at ``offset`` that :func:`iter_chunk_messages` yields onto ``heap``."""
    for i, msg in enumerate(messages):
        if wanted is not None and msg.channel_id not in wanted:
            continue
        if (start_ns is not None and msg.log_time < start_ns) or (end_ns is not None and msg.log_time >= end_ns):
            continue
        heapq.heappush(heap, (msg.log_time, offset, i, msg))


def read_footer(stream: IO[bytes]) -> tuple[int, int] | None:
    """``(summary_start, summary_crc)`` of the footer at the end of the file, None if there is none."""
    size = stream.seek(0, io.SEEK_END)
    if size < _FOOTER.size + len(MAGIC) * 2:
        return None
    stream.seek(size - len(MAGIC) - _FOOTER.size)
    opcode, length, summary_start, _, crc = _FOOTER.unpack(stream.read(_FOOTER.size))
    if opcode != Opcode.FOOTER or length != 20:
        return None
    return summary_start, crc


def summary_crc_ok(stream: IO[bytes]) -> bool | None:
    """Whether the summary section matches the footer's CRC (None: no footer, no summary or no CRC)."""
    footer = read_footer(stream)
    if footer is None or footer[0] == 0 or footer[1] == 0:
        return None
    summary_start, crc = footer
    end = stream.seek(0, io.SEEK_END) - len(MAGIC) - 4  # the CRC covers the summary and the footer up to itself
    if not len(MAGIC) <= summary_start <= end:
        return False
    stream.seek(summary_start)
    value, left = 0, end - summary_start
    while left > 0:
        block = stream.read(min(left, 1 << 20))
        if not block:
            return False
        value, left = zlib.crc32(block, value), left - len(block)
    return value == crc
