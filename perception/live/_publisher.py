"""A stand-in for a vehicle's middleware: a separate process plays a drive over a Unix socket.

The publisher plays each sensor on its own thread at the drive's recorded timing, stamping samples on
the host's monotonic clock (``CLOCK_MONOTONIC`` is shared by the processes of one machine), and can
inject the faults a real host sees. The subscriber side (:func:`receive`) turns the stream back into
samples for :meth:`perception.live.LiveRuntime.push`.

Wire format, one message after another on a ``SOCK_STREAM`` Unix socket: a 4-byte big-endian header
length, a JSON header (``type`` sample|ego|error|end, ``sensor``, ``kind``, ``t_ns``, ``frame_id``,
``seq``, and for point clouds ``fields``/``shape``, for images ``format``), then ``size`` payload
bytes (float32 points, or the encoded image). No pickle: the socket may be shared with other code.
An ``error`` message (``sensor``, ``error``) says that sensor's publishing thread died: its samples stop
there, the other sensors play on.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import random
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import numpy.typing as npt

from perception.drives import DriveReader
from perception.errors import ConfigError, DriveError, PerceptionError
from perception.types import EgoPose, ImageSample, PointCloudSample, Sample, SensorSpec, Transform

__all__ = ["Faults", "drive_items", "parse_faults", "play_schedule", "publish", "receive"]

log = logging.getLogger(__name__)

_LEN = struct.Struct(">I")
_MAX_HEADER = 1 << 20
#: Read at most this much of a payload before it has arrived (what a header claims is not allocated first).
_CHUNK = 1 << 20
#: Stamps are 64-bit signed nanoseconds.
_INT64_END = float(1 << 63)


@dataclass(frozen=True, slots=True)
class Faults:
    """Faults the publisher injects, all in seconds from the start of the play."""

    silence: tuple[tuple[str, float, float], ...] = ()  # sensor, from, to: samples not sent
    bursts: tuple[tuple[str, float, float], ...] = ()  # sensor, from, to: held back, then sent at once
    jitter_ms: float = 0.0  # random extra delay per sample, uniform in [0, jitter]
    clock_jumps: tuple[tuple[str, float, float], ...] = ()  # sensor, at, offset (s) added to its stamps after
    seed: int = 0

    def _by_option(self) -> tuple[tuple[str, tuple[tuple[str, float, float], ...]], ...]:
        """Each fault option with the faults it gave."""
        return (("--silence", self.silence), ("--burst", self.bursts), ("--clock-jump", self.clock_jumps))

    def check_sensors(self, sensors: Sequence[str], drive: Path, enabled: Sequence[str] | None = None) -> None:
        """A :class:`ConfigError` naming the option when a fault names a sensor that ``drive`` (with
        ``sensors``) lacks, or one it has that is not ``enabled`` (``--sensors``): a fault on a sensor that
        is not used would do nothing but swell the count of samples not used."""
        for option, faults in self._by_option():
            named = sorted({s for s, _, _ in faults})
            if unknown := [s for s in named if s not in sensors]:
                raise ConfigError(
                    f"no such sensor in drive {drive}: {', '.join(unknown)} (it has: {', '.join(sensors)})", key=option
                )
            if enabled is not None and (idle := [s for s in named if s not in enabled]):
                raise ConfigError(
                    f"{', '.join(idle)} is not enabled (enabled: {', '.join(enabled)}): a fault on it would do nothing",
                    key=option,
                )

    def check_times(self, play_s: float, drive: Path) -> None:
        """A :class:`ConfigError` naming the option when a fault starts after the end of the play (``play_s``
        seconds long): it would do nothing, and the run would look as if it had come through it."""
        for option, faults in self._by_option():
            for sensor, start, _ in faults:
                if start > play_s:
                    raise ConfigError(
                        f"{sensor}: starts at {start:g} s, after the end of the play of {drive} ({play_s:.3f} s): "
                        "it would do nothing",
                        key=option,
                    )


def parse_faults(silence: list[str], bursts: list[str], jitter_ms: float, clock_jumps: list[str]) -> Faults:
    """``SENSOR:FROM:TO`` for silences and bursts (FROM before TO), ``SENSOR:AT:OFFSET_S`` for clock jumps;
    finite numbers only. A bad value is a :class:`ConfigError` naming the option."""

    def triples(values: list[str], option: str, *, span: bool) -> tuple[tuple[str, float, float], ...]:
        out = []
        for v in values:
            parts = v.split(":")
            try:
                if len(parts) != 3:
                    raise ValueError
                a, b = float(parts[1]), float(parts[2])
                if not (math.isfinite(a) and math.isfinite(b)):
                    raise ValueError
            except ValueError:
                raise ConfigError(f"expected SENSOR:A:B with numbers A and B, got {v!r}", key=option) from None
            if a < 0:  # seconds into the play: before its start is a typo, not a time
                raise ConfigError(f"{'FROM' if span else 'AT'} must be >= 0 (seconds into the play), got {v!r}",
                                  key=option)  # fmt: skip
            if span and not a < b:  # an empty span: the fault would silently do nothing
                raise ConfigError(f"FROM must be before TO, got {v!r}", key=option)
            if not span and abs(b) * 1e9 >= _INT64_END:  # a stamp is int64 ns: it crashed the sensor's publisher
                raise ConfigError(f"OFFSET_S out of range (a stamp is 64-bit nanoseconds), got {v!r}", key=option)
            out.append((parts[0], a, b))
        return tuple(out)

    if not math.isfinite(jitter_ms):  # NaN passed `< 0` and crashed every publishing thread
        raise ConfigError(f"must be a finite number, got {jitter_ms}", key="--jitter-ms")
    if jitter_ms < 0:
        raise ConfigError(f"must be >= 0, got {jitter_ms}", key="--jitter-ms")
    return Faults(
        silence=triples(silence, "--silence", span=True),
        bursts=triples(bursts, "--burst", span=True),
        jitter_ms=jitter_ms,
        clock_jumps=triples(clock_jumps, "--clock-jump", span=False),
    )


# -- wire -----------------------------------------------------------------------------------------
def _encode(sample: Sample | EgoPose, kind: str) -> bytes:
    if isinstance(sample, EgoPose):
        header: dict[str, Any] = {
            "type": "ego",
            "t_ns": sample.t_ns,
            "translation": list(sample.pose.translation),
            "rotation": list(sample.pose.rotation),
            "linear_velocity": list(sample.linear_velocity),
            "yaw_rate": sample.yaw_rate,
            "size": 0,
        }
        payload = b""
    elif isinstance(sample, PointCloudSample):
        payload = np.ascontiguousarray(sample.points, dtype=np.float32).tobytes()
        header = {
            "type": "sample",
            "kind": kind,
            "sensor": sample.sensor,
            "t_ns": sample.t_ns,
            "frame_id": sample.frame_id,
            "seq": sample.seq,
            "fields": list(sample.fields),
            "shape": list(sample.points.shape),
            "size": len(payload),
        }
    else:
        payload = sample.data
        header = {
            "type": "sample",
            "kind": kind,
            "sensor": sample.sensor,
            "t_ns": sample.t_ns,
            "frame_id": sample.frame_id,
            "seq": sample.seq,
            "format": sample.format,
            "size": len(payload),
        }
    head = json.dumps(header).encode()
    return _LEN.pack(len(head)) + head + payload


def _read_exact(stream: BinaryIO, n: int) -> bytes | None:
    """``n`` bytes, or None when the stream ends first (a buffered read returns short only at its end).
    Read a MiB at a time: what a header claims is not allocated before it arrives."""
    parts = []
    while n > 0:
        part = stream.read(min(n, _CHUNK))
        if not part:
            return None
        parts.append(part)
        n -= len(part)
    return b"".join(parts)  # one part: that part itself, not a copy


def _read_cloud(stream: BinaryIO, header: dict[str, Any], size: int) -> npt.NDArray[np.float32] | None:
    """A cloud message's ``size`` payload bytes as its float32 points in its ``shape``, or None when the
    stream ends first; a :class:`DriveError` naming the sensor when the size does not hold that shape.
    Up to a chunk, the bytes are read straight into a new array of that shape, kept by the sample as
    it is (a read-only array owning its data: no copy of the received bytes)."""
    try:
        shape = tuple(int(d) for d in header["shape"])
    except (TypeError, ValueError):
        shape = ()
    if len(shape) != 2 or min(shape) < 0 or shape[0] * shape[1] * 4 != size:
        raise DriveError(
            f"live stream: a point cloud of shape {header['shape']} in {size} bytes",
            topic="live",
            sensor=header.get("sensor"),
        )
    if size > _CHUNK:
        payload = _read_exact(stream, size)
        return None if payload is None else np.frombuffer(payload, dtype=np.float32).reshape(shape)
    points = np.empty(shape, dtype=np.float32)
    view = points.reshape(-1).view(np.uint8)  # the array's own bytes
    got = 0
    while got < size:
        n = stream.readinto(view[got:])  # type: ignore[attr-defined]
        if not n:
            return None
        got += n
    points.setflags(write=False)
    return points


#: ``on_error(sensor, why)``: a sensor's publishing thread died (an ``error`` message).
OnError = Callable[[str, str], None]


def receive(sock: socket.socket, on_error: OnError) -> Iterator[Sample | EgoPose]:
    """Samples and ego poses from a publisher's socket until it ends; a malformed message is a
    :class:`DriveError` naming what was wrong. ``on_error`` hears of a sensor whose publishing thread
    died (the stream goes on with the other sensors)."""
    # Buffered (io.DEFAULT_BUFFER_SIZE): a message's length, header and small payload come in one system
    # call, not in three blocking reads, each a wake-up of the thread.
    with sock.makefile("rb") as stream:
        yield from _messages(stream, on_error)


def _messages(stream: BinaryIO, on_error: OnError) -> Iterator[Sample | EgoPose]:
    while True:
        raw = _read_exact(stream, _LEN.size)
        if raw is None:
            return
        (n,) = _LEN.unpack(raw)
        if n > _MAX_HEADER:
            raise DriveError(f"live stream: header of {n} bytes is too large", topic="live")
        head = _read_exact(stream, n)
        if head is None:
            raise DriveError("live stream: ended inside a message header", topic="live")
        header: dict[str, Any] | None = None
        try:  # one guard: a header that is not JSON, a field missing or of the wrong type
            parsed = json.loads(head)
            if not isinstance(parsed, dict):
                raise TypeError(f"a {type(parsed).__name__}")
            header = parsed
            item = _message(stream, header)
        except (ValueError, TypeError, KeyError) as exc:
            if header is None:
                header, why = {}, f"its header is not a JSON object ({exc})"
            else:
                why = f"no {exc.args[0]!r}" if isinstance(exc, KeyError) else str(exc)
            kind, sensor = header.get("type"), header.get("sensor")
            raise DriveError(
                f"live stream: a malformed {f'{kind} ' if kind else ''}message: {why}",
                topic="live",
                sensor=None if sensor is None else str(sensor),
            ) from exc
        if item is not None:
            yield item
        elif header.get("type") == "end":
            return
        else:  # an error message (_message: the only other kind without an item)
            on_error(str(header.get("sensor")), str(header.get("error")))


def _message(stream: BinaryIO, header: dict[str, Any]) -> Sample | EgoPose | None:
    """The item of the message ``header`` heads, its payload read from ``stream`` (None: ``end``, ``error``);
    its fields as the header has them (a missing or mistyped one raises: :func:`_messages` says so)."""
    size = int(header.get("size", 0) or 0)
    points = None
    if "shape" in header:
        points = _read_cloud(stream, header, size)
        payload: bytes | None = b"" if points is not None else None
    else:
        payload = _read_exact(stream, size) if size else b""
    if payload is None:
        raise DriveError("live stream: ended inside a message payload", topic="live", sensor=header.get("sensor"))
    kind = header.get("type")
    if kind in ("end", "error"):
        return None
    if kind == "ego":
        return EgoPose(
            t_ns=int(header["t_ns"]),
            pose=Transform(tuple(header["translation"]), tuple(header["rotation"])),
            linear_velocity=tuple(header["linear_velocity"]),
            yaw_rate=float(header["yaw_rate"]),
        )
    if points is not None:
        return PointCloudSample(
            header["sensor"],
            int(header["t_ns"]),
            header["frame_id"],
            points,
            tuple(header["fields"]),
            header["seq"],
        )
    return ImageSample(
        header["sensor"], int(header["t_ns"]), header["frame_id"], payload, header["format"], header["seq"]
    )


# -- publisher ------------------------------------------------------------------------------------
def play_schedule(
    by_sensor: Mapping[str, Sequence[Sample | EgoPose]],
    faults: Faults,
    emit: Callable[[str, Sample | EgoPose], None],
    *,
    start_ns: int,
    stamp_base_ns: int,
    rate: float = 1.0,
    stop: threading.Event | None = None,
    on_error: Callable[[str, Exception], None] | None = None,
) -> None:
    """Play each sensor's items (time-ordered; the key ``ego`` for ego poses) on its own thread at their
    recorded timing from ``start_ns`` on the host's monotonic clock, with ``faults`` injected: ``emit``
    gets each item stamped ``stamp_base_ns`` + its offset into the play (+ a clock jump). Returns when
    every item was emitted, or soon after ``stop`` is set. ``emit`` may be called from several threads.
    A sensor's thread that raises ends (its sensor falls silent, the others play on): ``on_error(sensor,
    exc)`` is called on it, or without one the error is logged naming the sensor."""
    # The play starts at the first sensor sample (ego poses may start earlier: they are held till then).
    firsts = [items[0].t_ns for name, items in by_sensor.items() if items and name != "ego"]
    if not firsts:
        return
    t0_drive = min(firsts)
    stop = stop or threading.Event()

    def play(sensor: str, items: Sequence[Sample | EgoPose]) -> None:
        try:
            play_sensor(sensor, items)
        except Exception as exc:  # this sensor's publisher dies; the other sensors play on
            if on_error is None:
                log.error("the publisher of %s died: %s: %s", sensor, type(exc).__name__, exc)
            else:
                on_error(sensor, exc)

    def play_sensor(sensor: str, items: Sequence[Sample | EgoPose]) -> None:
        rng = random.Random(f"{faults.seed}:{sensor}")
        held: list[Sample | EgoPose] = []
        for item in items:
            offset = (item.t_ns - t0_drive) / rate
            at_s = offset / 1e9
            due = start_ns + round(offset) + round(rng.uniform(0, faults.jitter_ms) * 1e6)
            delay = (due - time.monotonic_ns()) / 1e9
            if delay > 0 and stop.wait(delay):
                return
            if stop.is_set():
                return
            if any(s == sensor and a <= at_s < b for s, a, b in faults.silence):
                continue
            stamp = stamp_base_ns + round(offset)
            for s, at, jump_s in faults.clock_jumps:
                if s == sensor and at_s >= at:
                    stamp += round(jump_s * 1e9)
            stamped = dataclasses.replace(item, t_ns=stamp)
            if any(s == sensor and a <= at_s < b for s, a, b in faults.bursts):
                held.append(stamped)
                continue
            for h in held:
                emit(sensor, h)
            held.clear()
            emit(sensor, stamped)
        for h in held:
            emit(sensor, h)

    threads = [
        threading.Thread(target=play, args=(name, items), name=f"publish-{name}", daemon=True)
        for name, items in by_sensor.items()
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def drive_items(drive: Path) -> tuple[dict[str, SensorSpec], dict[str, list[Sample | EgoPose]]]:
    """A drive's rig and its items by sensor (ego poses under ``ego``), for :func:`play_schedule`."""
    with DriveReader(drive) as reader:
        rig = dict(reader.rig)
        samples = list(reader.samples())
        egos = reader.ego_poses()
    if not samples:
        raise DriveError("drive has no samples", file=str(drive))
    by_sensor: dict[str, list[Sample | EgoPose]] = {}
    for s in samples:
        by_sensor.setdefault(s.sensor, []).append(s)
    if egos:
        by_sensor["ego"] = list(egos)
    return rig, by_sensor


def publish(
    drive: Path,
    socket_path: Path,
    faults: Faults,
    *,
    start_delay_s: float = 0.2,
    rate: float = 1.0,
    stop: threading.Event | None = None,
) -> None:
    """Play ``drive`` into ``socket_path`` (the subscriber listens there); returns at the end, or soon after
    ``stop`` is set (the play cut short: no end message). A :class:`PerceptionError` when the subscriber
    closes the connection first, or when a sensor's publishing thread died (the others played on; the
    subscriber was sent an ``error`` message naming it when it did)."""
    rig, by_sensor = drive_items(drive)
    kinds = {name: spec.kind for name, spec in rig.items()}
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(str(socket_path))
    lock = threading.Lock()
    t0 = time.monotonic_ns() + round(start_delay_s * 1e9)
    stop = stop or threading.Event()
    gone: list[OSError] = []  # the subscriber closed the connection (each sensor thread's send failed)
    died: dict[str, str] = {}  # sensors whose publishing thread raised, and why

    def sensor_died(sensor: str, exc: Exception) -> None:
        why = f"{type(exc).__name__}: {exc}"
        died[sensor] = why
        head = json.dumps({"type": "error", "sensor": sensor, "error": why, "size": 0}).encode()
        send(_LEN.pack(len(head)) + head)  # the host hears of it now, not at the end

    def send(msg: bytes) -> None:
        with lock:
            if gone:
                return
            try:
                sock.sendall(msg)
            except (BrokenPipeError, ConnectionResetError) as exc:
                gone.append(exc)
                stop.set()

    try:
        play_schedule(
            by_sensor,
            faults,
            lambda sensor, item: send(_encode(item, kinds.get(sensor, "ego"))),
            start_ns=t0,
            stamp_base_ns=t0,
            rate=rate,
            stop=stop,
            on_error=sensor_died,
        )
        if not stop.is_set():
            head = json.dumps({"type": "end", "size": 0}).encode()
            send(_LEN.pack(len(head)) + head)
    finally:
        sock.close()
    if gone:
        raise PerceptionError(f"{drive}: the subscriber closed the connection ({gone[0].strerror})")
    if died:
        raise PerceptionError(
            "; ".join(f"the publisher of {sensor} died: {why}" for sensor, why in sorted(died.items()))
        )
