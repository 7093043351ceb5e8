"""A minimal blocking WebSocket client (RFC 6455) for the Foxglove WebSocket protocol, stdlib only.

Enough to test the live server the way Foxglove talks to it: the ``foxglove.sdk.v1``
sub-protocol handshake, JSON control messages (serverInfo, advertise, subscribe) and binary message
data. No fragmentation or extensions (the server sends neither to a client that asks for none).
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import socket
import struct
from typing import Any

SUBPROTOCOL = "foxglove.sdk.v1"  # what foxglove-sdk servers speak (the ws-protocol v1 messages)


class WsClient:
    def __init__(self, host: str, port: int, *, timeout_s: float = 10.0) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout_s)
        key = base64.b64encode(os.urandom(16)).decode()
        request = (
            f"GET / HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: {SUBPROTOCOL}\r\n\r\n"
        )
        self.sock.sendall(request.encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.sock.recv(1)
            if not chunk:
                raise ConnectionError("server closed during the handshake")
            head += chunk
        status, *headers = head.decode().split("\r\n")
        if " 101 " not in status:
            raise ConnectionError(f"handshake refused: {status}")
        self.protocol = next(
            (h.split(":", 1)[1].strip() for h in headers if h.lower().startswith("sec-websocket-protocol")), None
        )

    def _exact(self, n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("connection closed")
            buf += chunk
        return buf

    def recv(self) -> tuple[int, bytes]:
        """The next data frame as ``(opcode, payload)``: 1 text, 2 binary (pings are skipped)."""
        while True:
            b0, b1 = self._exact(2)
            n = b1 & 0x7F
            if n == 126:
                (n,) = struct.unpack(">H", self._exact(2))
            elif n == 127:
                (n,) = struct.unpack(">Q", self._exact(8))
            mask = self._exact(4) if b1 & 0x80 else b""
            payload = self._exact(n)
            if mask:
                payload = bytes(c ^ mask[i % 4] for i, c in enumerate(payload))
            opcode = b0 & 0x0F
            if opcode == 0x8:
                raise ConnectionError("server closed the connection")
            if opcode in (0x1, 0x2):
                return opcode, payload

    def recv_json(self) -> Any:
        while True:
            opcode, payload = self.recv()
            if opcode == 1:
                return json.loads(payload)

    def _send(self, opcode: int, payload: bytes) -> None:
        mask = os.urandom(4)
        n = len(payload)
        length = bytes([0x80 | n]) if n < 126 else bytes([0x80 | 126]) + struct.pack(">H", n)
        self.sock.sendall(
            bytes([0x80 | opcode]) + length + mask + bytes(c ^ mask[i % 4] for i, c in enumerate(payload))
        )

    def send_json(self, obj: Any) -> None:
        self._send(0x1, json.dumps(obj).encode())

    def close(self) -> None:
        """Close handshake (status 1000), then the socket."""
        with contextlib.suppress(OSError):
            self._send(0x8, struct.pack(">H", 1000))
        self.sock.close()
