"""A file written once, front to back, past the page cache (``O_DIRECT``): a run recording's segments.

A buffered write costs the kernel a page of the page cache per 4 kB and a copy into it (in this VM
0.18-0.76 ms of system time per 0.54 MB, a frame's sweeps and JPEGs); with ``O_DIRECT`` the device reads
the data from the process's memory (~0.05 ms). It needs block-aligned buffers, lengths and offsets: the
pieces written are copied into a page-aligned staging buffer (an anonymous ``mmap``), whole blocks of it
are written at block-aligned offsets and the rest waits at its start for the next write. :meth:`close`
writes the tail padded to a block and truncates the file to the bytes written: the file is byte for byte
what a buffered write gives. Linux only (``os.O_DIRECT``); :meth:`DirectFile.adopt` answers ``None`` where
the platform or the file system refuses it, and the caller writes buffered.
"""

from __future__ import annotations

import errno
import logging
import mmap
import os
from collections.abc import Iterable
from pathlib import Path

from perception.drives._mcap_out import Buffer, byte_view

__all__ = ["BLOCK", "STAGING", "DirectFile"]

log = logging.getLogger(__name__)

#: Offsets and lengths of the writes are multiples of this (every logical block size O_DIRECT asks for on
#: Linux: 512 or 4096).
BLOCK = 4096
#: The staging buffer's size (a multiple of :data:`BLOCK`): a write of more goes out in pieces this large.
STAGING = 1 << 20


class DirectFile:
    """A new file at ``path`` written with ``O_DIRECT`` through a staging buffer: ``write`` and ``writelines``
    as a binary stream's (what :class:`~perception.drives._mcap_out.McapOut` calls), nothing read back.
    Made with :meth:`adopt`; :meth:`close` finishes the file (idempotent). Not thread-safe."""

    def __init__(self, fd: int, path: Path, staging: int = STAGING) -> None:
        if staging <= 0 or staging % BLOCK:
            raise ValueError(f"staging must be a positive multiple of {BLOCK}, got {staging}")
        self.path = path
        self._fd = fd
        self._map = mmap.mmap(-1, staging)  # anonymous: page-aligned
        self._buf = memoryview(self._map)
        self._fill = 0  # bytes staged at the buffer's start (less than a block after each write)
        self._at = 0  # the file's bytes written (a multiple of BLOCK)
        self._failed = False  # a write raised: close() writes no tail

    @classmethod
    def adopt(cls, fd: int, path: str | os.PathLike[str], staging: int = STAGING) -> DirectFile | None:
        """The new, empty file open for writing at ``fd`` (``path``: its name, for messages) written directly:
        ``O_DIRECT`` set on the descriptor, which the returned file owns from then on (:meth:`close` closes it).
        ``None`` where ``O_DIRECT`` is unavailable or refused (logged at debug): setting it fails with
        ``EINVAL``, or a first block written at once (and then truncated away) does; the descriptor is then the
        caller's, as it was (empty, ``O_DIRECT`` cleared), to write buffered. Other errors raise, the descriptor
        the caller's. The caller opens the file (created, truncated or exclusively: :class:`DriveWriter`)."""
        flag = getattr(os, "O_DIRECT", 0)
        if not flag:
            log.debug("%s: no O_DIRECT on this platform: written buffered", path)
            return None
        import fcntl  # (where O_DIRECT is: not on every platform this package reads drives on)

        flags = fcntl.fcntl(fd, fcntl.F_GETFL)
        try:
            fcntl.fcntl(fd, fcntl.F_SETFL, flags | flag)
        except OSError as exc:
            if exc.errno != errno.EINVAL:
                raise
            log.debug("%s: the file system refuses O_DIRECT (%s): written buffered", path, exc)
            return None
        try:
            map_ = mmap.mmap(-1, BLOCK)  # anonymous: page-aligned
            try:
                with memoryview(map_) as block:  # released at once, even where a traceback keeps the call
                    os.pwrite(fd, block, 0)
            finally:
                map_.close()
            os.ftruncate(fd, 0)
        except OSError as exc:
            fcntl.fcntl(fd, fcntl.F_SETFL, flags)
            os.ftruncate(fd, 0)
            if exc.errno != errno.EINVAL:
                raise
            log.debug("%s: the file system refuses O_DIRECT writes (%s): written buffered", path, exc)
            return None
        return cls(fd, Path(path), staging)

    @property
    def closed(self) -> bool:
        return self._fd < 0

    def tell(self) -> int:
        """Bytes written so far (staged ones included)."""
        return self._at + self._fill

    def write(self, data: Buffer) -> int:
        """Stage ``data`` and write the whole blocks staged; its size."""
        view = byte_view(data)
        self._put(view)
        self._write_blocks()
        return len(view)

    def writelines(self, pieces: Iterable[Buffer]) -> None:
        """Stage ``pieces`` one after another and write the whole blocks staged. A chunk's pieces (~60 a frame
        of a recording: headers, payloads) are copied here, inline, while they fit (a call a piece cost more
        than most pieces' copy), the others by :meth:`_put`."""
        buf, fill = self._buf, self._fill
        room = len(buf)
        for piece in pieces:
            view = piece if type(piece) is bytes else byte_view(piece)
            n = len(view)
            if fill + n <= room:
                buf[fill : fill + n] = view
                fill += n
            else:
                self._fill = fill
                self._put(byte_view(view))
                fill = self._fill
        self._fill = fill
        self._write_blocks()

    def flush(self) -> None:
        """Nothing: a part block stays staged until more comes or :meth:`close` pads it."""

    def close(self) -> None:
        """Write the staged tail padded to a block, truncate the file to the bytes written and close it (after
        a failed write: only close it). Idempotent; the descriptor is closed whatever happens."""
        if self._fd < 0:
            return
        try:
            if not self._failed:
                size = self._at + self._fill
                if self._fill:
                    padded = -(-self._fill // BLOCK) * BLOCK
                    self._buf[self._fill : padded] = bytes(padded - self._fill)
                    self._fill = 0
                    self._out(padded)
                os.ftruncate(self._fd, size)
        finally:
            fd, self._fd = self._fd, -1
            self._buf.release()
            self._map.close()
            os.close(fd)

    # -- internals --------------------------------------------------------------------------------
    def _put(self, view: memoryview) -> None:
        n = len(view)
        fill, buf = self._fill, self._buf
        if fill + n <= len(buf):
            buf[fill : fill + n] = view
            self._fill = fill + n
            return
        while view:  # more than the buffer holds: fill it, write it, again
            k = min(len(view), len(buf) - fill)
            buf[fill : fill + k] = view[:k]
            view = view[k:]
            fill += k
            if fill == len(buf):
                self._fill = 0
                self._out(fill)
                fill = 0
        self._fill = fill

    def _write_blocks(self) -> None:
        """Write the staged whole blocks; the rest (less than a block) moves to the buffer's start."""
        fill = self._fill
        whole = fill - fill % BLOCK
        if whole:
            self._out(whole)
            rest = fill - whole
            if rest:
                self._map.move(0, whole, rest)
            self._fill = rest

    def _out(self, n: int) -> None:
        """The buffer's first ``n`` bytes (whole blocks) to the file at its end."""
        if self._fd < 0:
            raise ValueError(f"{self.path}: write to a closed file")
        done = 0
        try:
            while done < n:  # a short write (a signal; a full disk raises next): the rest as it comes
                with self._buf[done:n] as part:  # released at once (the map closes only without views)
                    k = os.pwrite(self._fd, part, self._at + done)
                if k <= 0:
                    raise OSError(errno.EIO, "a direct write wrote nothing")
                done += k
        except BaseException:
            self._failed = True
            raise
        self._at += n
