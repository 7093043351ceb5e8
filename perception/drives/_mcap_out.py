"""The MCAP writer under :class:`~perception.drives.DriveWriter`: the ``mcap`` library's file, byte for byte,
without copying a message's payload.

The library builds each chunk in a ``BytesIO`` and copies it again into the chunk record: a 440 KB lidar
sweep was copied three times into freshly allocated memory (page faults: ~0.4 ms of kernel time a sweep on
a VM) before the file got it. Here a chunk is a list of the messages' buffers (a sweep's points as they are,
behind the few bytes of its protobuf header) written to the file one after another when the chunk is
full: the file gets each payload straight from where it was. Records and their order are the library's
(``mcap.records`` writes the small ones), as are the chunking rule and the summary, so the bytes are too
(tested against ``mcap.writer.Writer``). Not thread-safe; the caller owns the file.
"""

from __future__ import annotations

import io
import os
import struct
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol

from mcap.data_stream import RecordBuilder
from mcap.exceptions import UnsupportedCompressionError
from mcap.opcode import Opcode
from mcap.records import (
    Channel,
    ChunkIndex,
    DataEnd,
    Footer,
    Header,
    Metadata,
    MetadataIndex,
    Schema,
    Statistics,
    SummaryOffset,
)

from perception.drives._chunks import MAGIC

__all__ = ["Buffer", "McapOut", "Stream", "byte_view"]

#: A message's bytes: one buffer, or pieces written one after another (a header, then a payload).
Buffer = bytes | bytearray | memoryview


class Stream(Protocol):
    """Where :class:`McapOut` writes: a binary file or stream (a file's descriptor, when it has one, takes a
    chunk's pieces with ``writev``), or a :class:`~perception.drives._direct.DirectFile`."""

    def write(self, data: Buffer, /) -> int: ...

    def writelines(self, pieces: Iterable[Buffer], /) -> None: ...

    def flush(self) -> None: ...


_MESSAGE = struct.Struct("<BQHIQQ")  # opcode, record length, channel id, sequence, log time, publish time
_OP_MESSAGE = int(Opcode.MESSAGE)
_OP_MESSAGE_INDEX = int(Opcode.MESSAGE_INDEX)
_IOV_MAX = 1024  # buffers a writev takes at most (Linux's IOV_MAX)
_BYTES = (bytes, bytearray)
_CHUNK = struct.Struct("<BQQQQI")  # opcode, record length, start, end, uncompressed size, uncompressed crc


def _compressor(compression: str) -> Callable[[bytes], bytes] | None:
    if compression == "":
        return None
    try:
        if compression == "lz4":
            import lz4.frame  # type: ignore[import-untyped]

            compress: Callable[[bytes], bytes] = lz4.frame.compress
            return compress
        if compression == "zstd":
            import zstandard

            compress = zstandard.compress
            return compress
    except ImportError as exc:
        raise UnsupportedCompressionError(compression) from exc
    raise ValueError(f"unknown compression {compression!r}")


class _Chunk:
    __slots__ = ("end", "indices", "messages", "pieces", "size", "start")

    def __init__(self) -> None:
        self.pieces: list[Buffer] = []
        self.size = 0
        self.messages = 0
        self.start = 0
        self.end = 0
        self.indices: dict[int, list[int]] = {}  # channel -> log time, offset in the chunk, log time, offset...

    def add(self, pieces: Sequence[Buffer], size: int) -> None:
        self.pieces.extend(pieces)
        self.size += size


class McapOut:
    """``mcap.writer.Writer``'s interface as :class:`~perception.drives.DriveWriter` uses it (chunked, every
    index, statistics, summary offsets; no data-section CRC). ``compression``: "" (none), "lz4", "zstd";
    ``crcs``: each chunk's and the summary's CRC-32 (0 without)."""

    def __init__(
        self, stream: Stream, *, chunk_size: int, compression: str = "", crcs: bool = True, drop_behind: int = 0
    ) -> None:
        self._stream = stream
        self._fd = _fileno(stream)  # a file's descriptor: a chunk's pieces written with writev
        #: ``drop_behind`` > 0: a file written once and not read back soon (a run recording): the pages more
        #: than this many bytes behind its end are dropped from the page cache as the chunks are written
        #: (:func:`os.posix_fadvise` ``DONTNEED``, which also starts their writeback), so that writing reuses
        #: the pages it freed instead of filling memory with the file (fresh pages cost the kernel more).
        self._drop_behind = drop_behind if self._fd is not None and hasattr(os, "posix_fadvise") else 0
        self._dropped = 0  # the file's bytes already dropped from the page cache (from its start)
        self._chunk_size = chunk_size
        self._compression = compression
        self._compress = _compressor(compression)
        self._crcs = crcs
        self._offset = 0  # bytes written to the stream
        self._chunk = _Chunk()
        self._schemas: dict[int, Schema] = {}
        self._channels: dict[int, Channel] = {}
        self._chunk_indices: list[ChunkIndex] = []
        self._metadata_indices: list[MetadataIndex] = []
        self._stats = Statistics(
            attachment_count=0,
            channel_count=0,
            channel_message_counts={},
            chunk_count=0,
            message_count=0,
            metadata_count=0,
            message_start_time=0,
            message_end_time=0,
            schema_count=0,
        )

    @property
    def offset(self) -> int:
        """Bytes written to the stream so far (its position: the chunk being filled is not written yet)."""
        return self._offset

    # -- the library's interface ------------------------------------------------------------------
    def start(self, profile: str, library: str) -> None:
        self._write(MAGIC)
        self._write(_record(Header(profile, library)))

    def add_metadata(self, name: str, data: Mapping[str, str]) -> None:
        record = _record(Metadata(name=name, metadata=dict(data)))
        self._metadata_indices.append(MetadataIndex(offset=self._offset, length=len(record), name=name))
        self._stats.metadata_count += 1
        self._write(record)

    def register_schema(self, name: str, encoding: str, data: bytes) -> int:
        schema = Schema(id=len(self._schemas) + 1, data=data, encoding=encoding, name=name)
        self._schemas[schema.id] = schema
        self._stats.schema_count += 1
        self._add_to_chunk(_record(schema))
        return schema.id

    def register_channel(self, topic: str, message_encoding: str, schema_id: int) -> int:
        channel = Channel(
            id=len(self._channels) + 1, topic=topic, message_encoding=message_encoding, schema_id=schema_id, metadata={}
        )
        self._channels[channel.id] = channel
        self._stats.channel_count += 1
        self._add_to_chunk(_record(channel))
        return channel.id

    def add_message(
        self, channel_id: int, log_time: int, data: Buffer | Sequence[Buffer], publish_time: int, sequence: int = 0
    ) -> None:
        """Add a message to the chunk; ``data``'s buffers are kept (not copied) until the chunk is written."""
        chunk = self._chunk
        out = chunk.pieces
        head = len(out)
        out.append(b"")  # the message record's header, packed below when the size is known
        # (type checks and comparisons, not unions and max(): this runs for every message)
        if type(data) is bytes or isinstance(data, _BYTES):
            out.append(data)
            size = len(data)
        elif isinstance(data, memoryview):
            data = byte_view(data)
            out.append(data)
            size = len(data)
        else:
            size = 0
            for piece in data:
                p = byte_view(piece) if isinstance(piece, memoryview) else piece
                out.append(p)
                size += len(p)
        out[head] = _MESSAGE.pack(_OP_MESSAGE, 22 + size, channel_id, sequence, log_time, publish_time)
        stats = self._stats
        if stats.message_count == 0 or log_time < stats.message_start_time:
            stats.message_start_time = log_time
        if log_time > stats.message_end_time:  # noqa: PLR1730 (max(): a call a message)
            stats.message_end_time = log_time
        counts = stats.channel_message_counts
        counts[channel_id] = counts.get(channel_id, 0) + 1
        stats.message_count += 1
        if chunk.messages == 0 or log_time < chunk.start:
            chunk.start = log_time
        if log_time > chunk.end:  # noqa: PLR1730
            chunk.end = log_time
        index = chunk.indices.get(channel_id)
        if index is None:
            index = chunk.indices[channel_id] = []
        index += (log_time, chunk.size)
        chunk.messages += 1
        chunk.size += 31 + size  # the message record's header: _MESSAGE.size
        if chunk.size > self._chunk_size:
            self._finish_chunk()

    def finish(self) -> None:
        self._finish_chunk()
        self._write(_record(DataEnd(0)))
        summary_start = self._offset
        out = RecordBuilder()
        offsets: list[SummaryOffset] = []

        def group(opcode: Opcode, records: Sequence[Any]) -> None:
            start = out.count
            for r in records:
                r.write(out)
            offsets.append(SummaryOffset(group_opcode=opcode, group_start=summary_start + start,
                                         group_length=out.count - start))  # fmt: skip

        group(Opcode.SCHEMA, list(self._schemas.values()))
        group(Opcode.CHANNEL, list(self._channels.values()))
        group(Opcode.STATISTICS, [self._stats])
        group(Opcode.CHUNK_INDEX, self._chunk_indices)
        group(Opcode.ATTACHMENT_INDEX, [])
        group(Opcode.METADATA_INDEX, self._metadata_indices)
        summary_offset_start = summary_start + out.count
        for offset in offsets:
            offset.write(out)
        summary = _end(out)
        at = 0 if not summary else summary_start
        crc = 0
        if self._crcs:
            crc = zlib.crc32(struct.pack("<BQQQ", Opcode.FOOTER, 20, at, summary_offset_start), zlib.crc32(summary))
        self._write(summary)
        self._write(_record(Footer(summary_start=at, summary_offset_start=summary_offset_start, summary_crc=crc)))
        self._write(MAGIC)

    # -- internals --------------------------------------------------------------------------------
    def _write(self, data: Buffer) -> None:
        self._offset += self._stream.write(data)

    def _write_pieces(self, pieces: Sequence[Buffer]) -> None:
        """The pieces one after another: into a file with ``writev`` (up to :data:`_IOV_MAX` a call: the
        payloads go straight from their buffers to the file, without a system call each, nor a copy of the
        small ones into the stream's buffer first), else with the stream's ``writelines``."""
        fd = self._fd
        if fd is None:
            self._stream.writelines(pieces)
            return
        self._stream.flush()
        for start in range(0, len(pieces), _IOV_MAX):
            batch = pieces[start : start + _IOV_MAX]
            written = os.writev(fd, batch)
            size = sum(map(len, batch))  # the pieces' len is their size (memoryviews: bytes views, add_message)
            if written != size:  # a short write (a signal; a full disk raises): the rest as it comes
                rest = memoryview(b"".join(batch))[written:]
                while rest:
                    rest = rest[os.write(fd, rest) :]

    def _drop_written(self) -> None:
        """Drop the file's pages up to :attr:`_drop_behind` behind its end from the page cache (advice: a
        file system that refuses it is left alone from then on)."""
        assert self._fd is not None
        end = self._offset - self._drop_behind
        try:
            os.posix_fadvise(self._fd, 0, end, os.POSIX_FADV_DONTNEED)
        except OSError:
            self._drop_behind = 0
            return
        self._dropped = end

    def _add_to_chunk(self, record: bytes) -> None:
        self._chunk.add((record,), len(record))
        if self._chunk.size > self._chunk_size:
            self._finish_chunk()

    def _finish_chunk(self) -> None:
        if self._chunk.messages == 0:  # as the library: schemas and channels wait for a message to chunk with
            return
        chunk, self._chunk = self._chunk, _Chunk()
        self._stats.chunk_count += 1
        crc = 0
        if self._compress is not None:
            joined = b"".join(chunk.pieces)
            crc = zlib.crc32(joined) if self._crcs else 0
            body: Sequence[Buffer] = (self._compress(joined),)
        else:
            if self._crcs:
                for p in chunk.pieces:
                    crc = zlib.crc32(p, crc)
            body = chunk.pieces
        compressed = chunk.size if self._compress is None else len(body[0])
        name = self._compression.encode()
        length = 8 + 8 + 8 + 4 + 4 + len(name) + 8 + compressed
        start = self._offset
        self._write(_CHUNK.pack(Opcode.CHUNK, length, chunk.start, chunk.end, chunk.size, crc))
        self._write(struct.pack("<I", len(name)) + name + struct.pack("<Q", compressed))
        self._write_pieces(body)
        self._offset += compressed
        index_start = self._offset
        offsets: dict[int, int] = {}
        records: list[bytes] = []
        at = index_start
        for channel_id, entries in chunk.indices.items():
            offsets[channel_id] = at
            records.append(_message_index(channel_id, entries))
            at += len(records[-1])
        indices = b"".join(records)
        self._write(indices)
        if self._drop_behind and self._offset - self._dropped >= 2 * self._drop_behind:
            self._drop_written()
        self._chunk_indices.append(
            ChunkIndex(
                message_start_time=chunk.start,
                message_end_time=chunk.end,
                chunk_start_offset=start,
                chunk_length=index_start - start,
                message_index_offsets=offsets,
                message_index_length=len(indices),
                compression=self._compression,
                compressed_size=compressed,
                uncompressed_size=chunk.size,
            )
        )


def _message_index(channel_id: int, entries: list[int]) -> bytes:
    """``mcap.records.MessageIndex(channel_id, pairs of entries).write``'s bytes, packed in one call (the
    library's writes each number on its own: ~1 us a message)."""
    n = len(entries)
    return struct.pack(f"<BQHI{n}Q", _OP_MESSAGE_INDEX, 6 + 8 * n, channel_id, 8 * n, *entries)


def _fileno(stream: Stream) -> int | None:
    """``stream``'s file descriptor when it is a file's (a ``BytesIO`` has none, nor a ``DirectFile``: it
    stages what it is given)."""
    fileno = getattr(stream, "fileno", None)
    try:
        return None if fileno is None else int(fileno())
    except (OSError, io.UnsupportedOperation):
        return None


def byte_view(data: Buffer) -> memoryview:
    """``data`` as unsigned bytes, one dimension (its ``len`` its size)."""
    view = data if isinstance(data, memoryview) else memoryview(data)
    return view if view.ndim == 1 and view.format == "B" else view.cast("B")


def _record(record: Any) -> bytes:
    out = RecordBuilder()
    record.write(out)
    return _end(out)


def _end(out: RecordBuilder) -> bytes:
    data: bytes = out.end()  # type: ignore[no-untyped-call]
    return data
