"""A drive's own messages, copied through untouched: schemas, channels and message bytes as recorded.

:class:`DriveCopy` hands out the raw messages of a drive in log-time order up to a moving horizon, so a
replay's outputs interleave the recorded sensor data with the frames computed from it, one frame at a
time. Nothing is decoded or re-encoded. An intact drive is read through its index; a drive without a
usable summary (truncated recording) is streamed in file order up to its first unreadable record.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Collection, Iterator
from pathlib import Path
from typing import IO

from mcap.reader import SeekingReader
from mcap.records import Channel, ChunkIndex, Message, Metadata, Schema
from mcap.stream_reader import StreamReader

from perception._lifetime import Closable, Lifetime
from perception.drives import read_chunk
from perception.errors import DriveError
from perception.viz._encode import ChannelDef, SchemaDef

__all__ = ["DriveCopy"]

log = logging.getLogger(__name__)


def _channel_def(channel: Channel, schema: Schema | None) -> ChannelDef:
    sdef = None if schema is None or not schema.encoding else SchemaDef(schema.name, schema.encoding, schema.data)
    return ChannelDef(channel.topic, channel.message_encoding, sdef, dict(channel.metadata))


class DriveCopy(Closable):
    """Raw messages of the drive at ``path`` with ``log_time >= start_ns`` (of ``topics``, default all),
    in log-time order.

    :attr:`channels` (drive channel id -> :class:`ChannelDef`) and :attr:`metadata` (the drive's
    metadata records) are known up front for an indexed drive; for a streamed (truncated) drive they
    grow as records are met, before any message that uses them is handed out. A sync context manager.
    """

    def __init__(
        self, path: str | os.PathLike[str], *, start_ns: int | None = None, topics: Collection[str] | None = None
    ) -> None:
        self.path = Path(path)
        self.start_ns = start_ns
        self._topics = None if topics is None else set(topics)
        self.channels: dict[int, ChannelDef] = {}
        #: The schema id of each channel of an indexed drive (as the drive numbers them; 0: none).
        self.schema_ids: dict[int, int] = {}
        #: An indexed drive's chunks, by the time of their last message (for :meth:`chunks_until`).
        self._chunks: list[ChunkIndex] = []
        self._head: list[Message] | None = None  # chunk mode: the first chunk's messages not handed out
        self.metadata: list[tuple[str, dict[str, str]]] = []
        try:
            self._file: IO[bytes] = open(self.path, "rb")  # noqa: SIM115 - closed by close()
        except OSError as exc:
            raise DriveError(f"cannot open drive: {exc.strerror or exc}", file=str(self.path)) from exc
        try:
            self._messages = self._open()
        except BaseException:
            self._file.close()
            raise
        self._pending: tuple[int, Message] | None = None
        self._done = False
        self._state = Lifetime.OPENED

    def _open(self) -> Iterator[tuple[int, Message]]:
        try:
            reader = SeekingReader(self._file, validate_crcs=True)
            summary = reader.get_summary()
        except Exception as exc:  # a damaged tail can fail anywhere in the footer parsing
            log.debug("%s: no usable summary (%s); streaming in file order", self.path, exc)
            summary = None
        if summary is None or not summary.chunk_indexes:
            self._file.seek(0)
            return self._stream()
        for cid, ch in sorted(summary.channels.items()):
            self.channels[cid] = _channel_def(ch, summary.schemas.get(ch.schema_id))
            self.schema_ids[cid] = ch.schema_id
        self._chunks = sorted(summary.chunk_indexes, key=lambda c: (c.message_end_time, c.chunk_start_offset))
        self._file.seek(0)
        self.metadata = [(m.name, dict(m.metadata)) for m in reader.iter_metadata()]
        topics = None if self._topics is None else sorted(self._topics)
        return ((ch.id, msg) for _, ch, msg in reader.iter_messages(topics=topics, log_time_order=True))

    def _stream(self) -> Iterator[tuple[int, Message]]:
        schemas: dict[int, Schema] = {}
        for record in StreamReader(self._file, validate_crcs=True).records:
            if isinstance(record, Schema):
                schemas[record.id] = record
            elif isinstance(record, Channel):
                self.channels.setdefault(record.id, _channel_def(record, schemas.get(record.schema_id)))
            elif isinstance(record, Metadata):
                self.metadata.append((record.name, dict(record.metadata)))
            elif isinstance(record, Message) and self._wanted(record.channel_id):
                yield record.channel_id, record

    def _wanted(self, channel_id: int) -> bool:
        ch = self.channels.get(channel_id)
        return ch is not None and (self._topics is None or ch.topic in self._topics)

    def until(self, horizon_ns: int) -> Iterator[tuple[ChannelDef, Message]]:
        """The messages not yet handed out with ``log_time <= horizon_ns``.

        A damaged part of the drive ends the copy with a warning (the replay reports the damage itself).
        """
        while not self._done:
            if self._pending is None:
                try:
                    self._pending = next(self._messages)
                except StopIteration:
                    self._done = True
                    return
                except Exception as exc:  # damaged chunk, truncated record, bad CRC...
                    log.warning("%s: copy of the drive's messages stops here: %s", self.path, exc)
                    self._done = True
                    return
            cid, msg = self._pending
            if msg.log_time > horizon_ns:
                return
            self._pending = None
            if self.start_ns is not None and msg.log_time < self.start_ns:
                continue
            yield self.channels[cid], msg

    @property
    def chunked(self) -> bool:
        """Whether whole chunks can be handed out (:meth:`chunks_until`): an indexed drive, copied whole
        (no start time, every topic) and not yet read message by message."""
        return bool(self._chunks) and self.start_ns is None and self._topics is None and self._pending is None

    def head_until(self, horizon_ns: int) -> Iterator[tuple[ChannelDef, Message]]:
        """In chunk mode, the drive's first chunk is handed out message by message, up to each horizon as
        :meth:`until` does (it holds the static transforms: a recording cut short early stays a drive)."""
        if self._head is None:
            self._head = []
            first = min(self._chunks, key=lambda c: (c.message_start_time, c.chunk_start_offset))
            self._chunks.remove(first)
            try:
                messages = read_chunk(self._file, first, None)
            except Exception as exc:  # damaged chunk, truncated record, bad CRC...
                log.warning("%s: copy of the drive's first chunk fails: %s", self.path, exc)
                messages = []
            self._head = sorted(messages, key=lambda m: m.log_time)  # stable: ties in file order
        while self._head and self._head[0].log_time <= horizon_ns:
            msg = self._head.pop(0)
            if msg.channel_id in self.channels:
                yield self.channels[msg.channel_id], msg

    def chunks_until(self, horizon_ns: int) -> Iterator[ChunkIndex]:
        """The chunks not yet handed out whose every message has ``log_time <= horizon_ns`` (each once),
        after :meth:`head_until`; the file to copy them from is :attr:`file`."""
        while self._chunks and self._chunks[0].message_end_time <= horizon_ns:
            yield self._chunks.pop(0)

    @property
    def file(self) -> IO[bytes]:
        return self._file

    def rest_until(self, horizon_ns: int) -> Iterator[tuple[ChannelDef, Message]]:
        """After :meth:`chunks_until`: the messages with ``log_time <= horizon_ns`` of the chunks not handed
        out, in log-time order (ties in file order); a damaged chunk ends the copy with a warning."""
        rest: list[tuple[int, int, int, Message]] = [(m.log_time, -1, i, m) for i, m in enumerate(self._head or ())]
        self._head = []
        for ci in sorted(self._chunks, key=lambda c: c.chunk_start_offset):
            if ci.message_start_time > horizon_ns:
                continue
            try:
                messages = read_chunk(self._file, ci, None)
            except Exception as exc:  # damaged chunk, truncated record, bad CRC...
                log.warning("%s: copy of the drive's messages stops here: %s", self.path, exc)
                break
            rest.extend((m.log_time, ci.chunk_start_offset, i, m) for i, m in enumerate(messages))
        self._chunks = []
        for t, _, _, msg in sorted(rest, key=lambda r: r[:3]):
            if t <= horizon_ns and msg.channel_id in self.channels:
                yield self.channels[msg.channel_id], msg

    def _close(self) -> None:
        """Close the drive (:meth:`close`: once): nothing more is handed out."""
        self._done = True
        self._file.close()
