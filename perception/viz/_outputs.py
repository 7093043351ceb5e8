"""Where a recording goes: an MCAP file (:class:`McapOutput`) or a live Foxglove server (``_live``).

Both take the same calls (channels with their schema, then raw message bytes), so one
:class:`~perception.viz._record.VizRecorder` feeds any number of them.
"""

from __future__ import annotations

import logging
import os
import struct
import zlib
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any, Protocol

from mcap.exceptions import UnsupportedCompressionError
from mcap.records import ChunkIndex
from mcap.writer import CompressionType
from mcap.writer import Writer as McapWriter

from perception._lifetime import Closable, Lifetime
from perception.drives import LIBRARY
from perception.errors import DriveError
from perception.viz._encode import ChannelDef, SchemaDef

__all__ = ["McapOutput", "Output"]

#: Head of a MessageIndex record: opcode, record length, channel id, byte length of its (time, offset) pairs.
_MESSAGE_INDEX_HEAD = struct.Struct("<BQHI")

log = logging.getLogger(__name__)


class Output(Protocol):
    """A destination of recorded messages."""

    def add_channel(self, channel: ChannelDef) -> None:
        """Declare a topic (once, before its first message)."""

    def write(self, topic: str, log_ns: int, data: bytes, *, publish_ns: int | None = None, sequence: int = 0) -> None:
        """One message of a declared topic, ``data`` already encoded."""

    def add_metadata(self, name: str, data: Mapping[str, str]) -> None:
        """A key/value record describing the recording (ignored by live outputs)."""

    def set_time(self, t_ns: int) -> None:
        """The recording has reached ``t_ns`` (live outputs move their clients' clock)."""

    def close(self) -> None:
        """Finish the output (idempotent)."""


class McapOutput(Closable):
    """A chunked, indexed, compressed MCAP file written incrementally.

    Complete chunks reach the file as they fill up, so a process killed mid-recording still leaves a
    readable prefix; :meth:`close` writes the last chunk and the summary. Nothing but the messages
    (and constant identifiers) reaches the file: equal inputs give equal bytes. ``compression`` is
    ``zstd`` (falling back to ``lz4``, then none, if the codec is missing), ``lz4`` or ``none``.
    """

    def __init__(
        self, path: str | os.PathLike[str], *, compression: str = "zstd", chunk_size: int = 4 * 1024 * 1024
    ) -> None:
        self.path = Path(path)
        order = {"zstd": ["zstd", "lz4", "none"], "lz4": ["lz4", "none"], "none": ["none"]}.get(compression)
        if order is None:
            raise DriveError(f"unknown compression {compression!r}; expected zstd, lz4 or none", file=str(self.path))
        try:
            self._file: IO[bytes] = open(self.path, "wb")  # noqa: SIM115 - closed by close()
        except OSError as exc:
            raise DriveError(f"cannot create recording: {exc.strerror or exc}", file=str(self.path)) from exc
        self._state = Lifetime.OPENED
        self._schemas: dict[SchemaDef, int] = {}
        self._channels: dict[str, int] = {}
        self._channel_schema: dict[str, int] = {}
        try:
            self._mcap = self._writer(order, chunk_size)
            self._mcap.start(profile="", library=LIBRARY)
        except BaseException:
            self._file.close()
            self.path.unlink(missing_ok=True)
            raise

    def _writer(self, order: list[str], chunk_size: int) -> McapWriter:
        codecs = {"zstd": CompressionType.ZSTD, "lz4": CompressionType.LZ4, "none": CompressionType.NONE}
        for name in order:
            try:
                return McapWriter(self._file, chunk_size=chunk_size, compression=codecs[name])
            except UnsupportedCompressionError:
                log.warning("%s: %s compression unavailable, trying the next codec", self.path, name)
        raise AssertionError("'none' compression is always available")  # pragma: no cover

    def _err(self, what: str, exc: OSError, topic: str | None = None) -> DriveError:
        return DriveError(f"cannot {what}: {exc.strerror or exc}", file=str(self.path), topic=topic)

    def add_channel(self, channel: ChannelDef) -> None:
        if channel.topic in self._channels:
            raise DriveError("topic declared twice", file=str(self.path), topic=channel.topic)
        schema_id = 0
        if channel.schema is not None:
            schema_id = self._schemas.get(channel.schema, 0)
            if not schema_id:
                s = channel.schema
                schema_id = self._schemas[s] = self._mcap.register_schema(s.name, s.encoding, s.data)
        self._channels[channel.topic] = self._mcap.register_channel(
            channel.topic, channel.message_encoding, schema_id, dict(channel.metadata)
        )
        self._channel_schema[channel.topic] = schema_id

    def write(self, topic: str, log_ns: int, data: bytes, *, publish_ns: int | None = None, sequence: int = 0) -> None:
        if self._state is not Lifetime.OPENED:
            raise DriveError("write after close", file=str(self.path), topic=topic)
        try:
            self._mcap.add_message(
                channel_id=self._channels[topic],
                log_time=log_ns,
                data=data,
                publish_time=log_ns if publish_ns is None else publish_ns,
                sequence=sequence,
            )
        except OSError as exc:
            raise self._err("write", exc, topic) from exc

    def channel_ids(self) -> dict[str, tuple[int, int]]:
        """``topic -> (channel id, schema id)`` as this file declares them (0: no schema)."""
        return {t: (cid, self._channel_schema.get(t, 0)) for t, cid in self._channels.items()}

    def copy_chunk(self, src: IO[bytes], ci: ChunkIndex) -> bool:
        """Copy the chunk ``ci`` of the MCAP file ``src`` and its message index records byte for byte (no
        decompression, no compression), with a chunk index and statistics of its own in this file's
        summary. The chunk's channel and schema ids must be this file's (the caller checks
        :meth:`channel_ids`). False, with nothing written, where it cannot (a chunk whose indexes do not
        follow it, a writer without the internals this relies on): copy its messages then."""
        w: Any = self._mcap
        try:
            stream, stats, indexes = w._Writer__stream, w._Writer__statistics, w._Writer__chunk_indices
        except AttributeError:  # another mcap version: no raw copy
            return False
        end = ci.chunk_start_offset + ci.chunk_length
        offsets = ci.message_index_offsets
        if any(not end <= off < end + ci.message_index_length for off in offsets.values()):
            return False
        src.seek(ci.chunk_start_offset)
        data = src.read(ci.chunk_length + ci.message_index_length)
        if len(data) != ci.chunk_length + ci.message_index_length:
            return False
        counts: dict[int, int] = {}
        for cid, off in offsets.items():  # MessageIndex: opcode u8, length u64, channel u16, records u32 + 16 each
            rel = off - ci.chunk_start_offset
            counts[cid] = _MESSAGE_INDEX_HEAD.unpack_from(data, rel)[3] // 16
        try:
            w.flush()  # the chunk of our own messages in progress goes first
            start = stream.tell()
            if w._Writer__enable_data_crcs:
                w._Writer__data_section_crc = zlib.crc32(data, w._Writer__data_section_crc)
            stream.write(data)
        except OSError as exc:
            raise self._err("write", exc) from exc
        shift = start - ci.chunk_start_offset
        indexes.append(
            ChunkIndex(
                message_start_time=ci.message_start_time,
                message_end_time=ci.message_end_time,
                chunk_start_offset=start,
                chunk_length=ci.chunk_length,
                message_index_offsets={cid: off + shift for cid, off in offsets.items()},
                message_index_length=ci.message_index_length,
                compression=ci.compression,
                compressed_size=ci.compressed_size,
                uncompressed_size=ci.uncompressed_size,
            )
        )
        n = sum(counts.values())
        if n:
            first = stats.message_count == 0
            stats.message_start_time = (
                ci.message_start_time if first else min(stats.message_start_time, ci.message_start_time)
            )
            stats.message_end_time = max(stats.message_end_time, ci.message_end_time)
            stats.message_count += n
            for cid, c in counts.items():
                stats.channel_message_counts[cid] += c
        stats.chunk_count += 1
        return True

    def add_metadata(self, name: str, data: Mapping[str, str]) -> None:
        try:
            self._mcap.add_metadata(name, dict(sorted(data.items())))
        except OSError as exc:
            raise self._err("write", exc) from exc

    def set_time(self, t_ns: int) -> None:
        return None

    def _close(self) -> None:
        """Write the last chunk and the summary, and close the file (:meth:`close`: once)."""
        try:
            self._mcap.finish()  # type: ignore[no-untyped-call]
        except OSError as exc:
            raise self._err("finish recording", exc) from exc
        finally:
            self._file.close()
