"""Live view: a Foxglove WebSocket server (``foxglove-sdk``) that streams a replay while it runs.

Open Foxglove, *Open connection* → *Foxglove WebSocket* → ``ws://HOST:PORT`` (or follow
:attr:`LiveServer.app_url`). The server advertises the drive's topics and the fused ones as they are
declared; every message is the same bytes the MCAP recording gets. The server's clock follows the
replayed drive time (``Time`` capability), so Foxglove's timeline shows drive time.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from perception._lifetime import Closable, Lifetime
from perception.errors import ConfigError
from perception.viz._encode import ChannelDef

__all__ = ["LiveOutput", "LiveServer"]

log = logging.getLogger(__name__)


class LiveServer(Closable):
    """A Foxglove WebSocket server on ``host:port`` (``port=0`` picks a free one); a sync context manager.

    Channels live in the server's own logging context, so several servers (or tests) do not see each
    other's topics. A port already in use is a :class:`ConfigError` naming ``--live-port``.
    """

    def __init__(self, *, host: str = "127.0.0.1", port: int = 8765, name: str = "perception replay") -> None:
        import foxglove
        from foxglove.websocket import Capability

        if not 0 <= port <= 65535:
            raise ConfigError(f"port must be within [0, 65535], got {port}", key="--live-port")
        self.host = host
        self._context = foxglove.Context()
        try:
            self._server = foxglove.start_server(
                name=name, host=host, port=port, context=self._context, capabilities=[Capability.Time]
            )
        except RuntimeError as exc:  # FoxgloveError: bind failures and the like
            raise ConfigError(f"cannot start the live server on {host}:{port}: {exc}", key="--live-port") from exc
        self._state = Lifetime.OPENED

    @property
    def port(self) -> int:
        return int(self._server.port)

    @property
    def url(self) -> str:
        return f"ws://{self.host}:{self.port}"

    @property
    def app_url(self) -> str | None:
        """A Foxglove web-app link that opens this server as its data source."""
        url = self._server.app_url()
        return None if url is None else str(url)

    def output(self) -> LiveOutput:
        """A recorder output whose channels are published by this server."""
        return LiveOutput(self._context, self._server)

    def _close(self) -> None:
        """Stop the server (:meth:`close`: once)."""
        self._server.stop()


class LiveOutput:
    """:class:`~perception.viz._outputs.Output` publishing through a :class:`LiveServer` (closing it withdraws
    the channels; the server keeps running)."""

    def __init__(self, context: Any, server: Any) -> None:
        import foxglove

        self._foxglove = foxglove
        self._context = context
        self._server = server
        self._channels: dict[str, foxglove.Channel] = {}

    def add_channel(self, channel: ChannelDef) -> None:
        fg = self._foxglove
        schema = None
        if channel.schema is not None:
            schema = fg.Schema(name=channel.schema.name, encoding=channel.schema.encoding, data=channel.schema.data)
        self._channels[channel.topic] = fg.Channel(
            channel.topic,
            schema=schema,
            message_encoding=channel.message_encoding,
            context=self._context,
            metadata=dict(channel.metadata) or None,
        )

    def write(self, topic: str, log_ns: int, data: bytes, *, publish_ns: int | None = None, sequence: int = 0) -> None:
        self._channels[topic].log(data, log_time=log_ns)

    def add_metadata(self, name: str, data: Mapping[str, str]) -> None:
        return None

    def set_time(self, t_ns: int) -> None:
        self._server.broadcast_time(t_ns)

    def close(self) -> None:
        channels, self._channels = self._channels, {}
        for ch in channels.values():
            ch.close()
