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
from types import TracebackType
from typing import IO

from mcap.reader import SeekingReader
from mcap.records import Channel, Message, Metadata, Schema
from mcap.stream_reader import StreamReader

from perception.errors import DriveError
from perception.viz._encode import ChannelDef, SchemaDef

__all__ = ["DriveCopy"]

log = logging.getLogger(__name__)


def _channel_def(channel: Channel, schema: Schema | None) -> ChannelDef:
    sdef = None if schema is None or not schema.encoding else SchemaDef(schema.name, schema.encoding, schema.data)
    return ChannelDef(channel.topic, channel.message_encoding, sdef, dict(channel.metadata))


class DriveCopy:
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

    def close(self) -> None:
        self._done = True
        self._file.close()

    def __enter__(self) -> DriveCopy:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
