"""Options and plumbing shared by the commands that run the runtime (replay, eval, budget)."""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import sys
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import anyio

from perception.config import load_config, sensor_names
from perception.errors import ConfigError

if TYPE_CHECKING:
    from perception.drives import DriveReader
    from perception.scheduler import Session

if sys.version_info < (3, 11):
    from exceptiongroup import BaseExceptionGroup  # anyio's dependency on 3.10

__all__ = [
    "DEFAULT_CONFIG",
    "Interrupted",
    "add_fault_options",
    "add_runtime_options",
    "check_drive",
    "make_folder",
    "make_output_folders",
    "repo_root",
    "run_with_signals",
    "same_file",
    "sensors_option",
]

log = logging.getLogger(__name__)

T = TypeVar("T")


def repo_root() -> Path:
    return Path(__file__).resolve().parents[2]


DEFAULT_CONFIG = repo_root() / "launch" / "replay.yaml"


def add_runtime_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("drive", type=Path, help="recorded drive (.mcap)")
    p.add_argument(
        "--config", type=Path, default=None, help=f"launch profile (default: {DEFAULT_CONFIG.relative_to(repo_root())})"
    )
    p.add_argument("--url", default=None, help="external Triton gRPC URL host:port (default: embedded server)")
    p.add_argument("--sensors", default=None, help="comma-separated subset of sensors to enable")


def add_fault_options(p: argparse.ArgumentParser) -> None:
    """The faults a player of a drive injects (``perception live``, ``perception ros play``)."""
    p.add_argument(
        "--silence",
        action="append",
        default=[],
        metavar="SENSOR:FROM:TO",
        help="do not send SENSOR's samples between FROM and TO seconds (repeatable)",
    )
    p.add_argument(
        "--burst",
        action="append",
        default=[],
        metavar="SENSOR:FROM:TO",
        help="hold SENSOR's samples back between FROM and TO s, then send them at once (repeatable)",
    )
    p.add_argument("--jitter-ms", type=float, default=0.0, help="random extra delay per sample, up to this")
    p.add_argument(
        "--clock-jump",
        action="append",
        default=[],
        metavar="SENSOR:AT:OFFSET_S",
        help="from AT seconds on, SENSOR's stamps are OFFSET_S seconds off (repeatable)",
    )


def sensors_option(args: argparse.Namespace) -> list[str] | None:
    """``--sensors a,b``: the sensors named (None: the option not given, every sensor); a list naming none
    (``,`` or ``''``) is a usage error, not every sensor. Spaces around a name are not part of it (a
    sensor name is an identifier): ``--sensors "lidar_top, cam_front"`` said "unknown sensor(s):  cam_front"."""
    if getattr(args, "sensors", None) is None:
        return None
    return sensor_names(args.sensors, key="--sensors")


def check_drive(path: Path) -> None:
    """A drive given on the command line that is not there, or is a directory, is a usage error (exit 2)
    naming it -- the one check of every command that reads a drive."""
    if not path.exists():
        raise ConfigError("drive not found", file=str(path))
    if path.is_dir():
        if (path / "metadata.yaml").is_file():  # a rosbag2 directory
            raise ConfigError(
                "is a ROS 2 bag (rosbag2 directory), not a drive: import it first: "
                f"perception import ros2 {path} --map topics.yaml -o drive.mcap",
                file=str(path),
            )
        raise ConfigError("is a directory, expected a drive file (.mcap)", file=str(path))


def same_file(a: Path, b: Path) -> bool:
    """Whether ``a`` and ``b`` are one file (by another spelling, a link); False when one is not there."""
    try:
        return os.path.samefile(a, b)
    except OSError:  # one of them does not exist (or cannot be looked at): not the same file
        return False


def make_folder(folder: Path, option: str) -> list[Path]:
    """An output's folder made before the run (``output_dir``/``output_file`` refused a file in its way while
    parsing), or a :class:`ConfigError` naming ``option``: what is written after the run would be lost.
    Returns the folders it made (``folder`` and its parents that were not there), the deepest first."""
    made = [p for p in (folder, *folder.parents) if not p.exists()]
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"cannot create directory {folder}: {exc.strerror or exc}", key=option) from exc
    return made


def make_output_folders(args: argparse.Namespace) -> list[Path]:
    """``--out`` and ``--trace-out``'s folders made before the run (``output_dir``/``output_file`` refused a
    file in their way while parsing), or a :class:`ConfigError` naming the option (exit 2): they are written
    during or after the run, whose results a folder that cannot be made would lose. A ``--trace-out`` that is
    the drive being read (``args.drive``) is refused too. Returns the folders made (:func:`make_folder`)."""
    made: list[Path] = []
    out = getattr(args, "out", None)
    if out is not None:
        made += make_folder(out, "--out")
    trace_out = getattr(args, "trace_out", None)
    if trace_out is not None:
        drive = getattr(args, "drive", None)
        if drive is not None and same_file(trace_out, drive):  # it was truncated as the run began: the drive lost
            message = f"{trace_out} is the drive being read: write the trace to another file"
            raise ConfigError(message, key="--trace-out")
        made += make_folder(trace_out.parent, "--trace-out")
    return made


@contextlib.contextmanager
def output_folders_made(args: argparse.Namespace) -> Iterator[None]:
    """:func:`make_output_folders` before a run that writes them only at its end (a replay as recorded): a run
    that fails before its end removes the folders it made, left empty (an unreadable recording writes nothing,
    as a damaged drive refused up front writes nothing)."""
    made = make_output_folders(args)
    try:
        yield
    except BaseException:
        for folder in sorted(made, key=lambda p: len(p.parts), reverse=True):  # the deepest first
            with contextlib.suppress(OSError):  # not empty, or gone: left as it is
                folder.rmdir()
        raise


@contextlib.contextmanager
def open_session(args: argparse.Namespace, *, strict: bool = False) -> Iterator[tuple[DriveReader, Session]]:
    """The run's drive (``args.drive``), opened once for the whole run, and its session: the profile
    (``--config`` or the default) assembled against the drive, then ``--url`` and ``--sensors`` applied.
    Pass both down (``replay_drive(reader, session)``): nothing assembles or opens them again.
    ``strict``: a damaged drive is refused at once (:class:`DriveReader`'s ``strict``)."""
    from perception.drives import DriveReader
    from perception.scheduler import Session

    cfg = load_config(args.config or DEFAULT_CONFIG)
    check_drive(Path(args.drive))
    sensors = sensors_option(args)
    with DriveReader(args.drive, strict=strict) as reader:
        yield reader, Session.assemble(cfg, reader.source).with_overrides(url=args.url, sensors=sensors)


class Interrupted(Exception):
    """Raised by a ``main`` of :func:`run_with_signals` that was stopped before it had anything to
    return (e.g. while its server was starting); the command then exits as interrupted."""


def run_with_signals(main: Callable[[anyio.Event], Awaitable[T]]) -> T:
    """Run ``main(stop_event)`` under anyio.

    The first SIGINT/SIGTERM sets ``stop_event`` (graceful: stop intake, drain, write every record);
    a second one cancels everything (the embedded server is still stopped on the way out). Either way
    :class:`KeyboardInterrupt` is raised -- outside the event loop -- when ``main`` returned nothing.
    """

    async def runner() -> list[T]:
        result: list[T] = []
        stop_event = anyio.Event()
        async with anyio.create_task_group() as tg:

            async def watch() -> None:
                with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                    async for signum in signals:
                        name = signal.Signals(signum).name
                        if not stop_event.is_set():
                            log.warning("%s: stopping after in-flight frames (send again to force)", name)
                            stop_event.set()
                        else:
                            log.warning("%s again: forcing exit", name)
                            tg.cancel_scope.cancel()
                            return

            async def body() -> None:
                with contextlib.suppress(Interrupted):
                    result.append(await main(stop_event))
                tg.cancel_scope.cancel()

            tg.start_soon(watch)
            tg.start_soon(body)
        return result

    try:
        result = anyio.run(runner, backend="asyncio")
    except BaseExceptionGroup as group:
        # Task groups wrap what fails inside them (here up to three levels deep): unwrap a lone error
        # so that a user's mistake (a model that is not ready, a refused connection, a bad drive...)
        # reaches the CLI's one-line handler instead of printing an exception-group traceback.
        error = _sole_error(group)
        if error is None:
            raise
        raise error from error.__cause__
    if not result:
        raise KeyboardInterrupt
    return result[0]


def _sole_error(group: BaseExceptionGroup[BaseException]) -> BaseException | None:
    """The only leaf exception of a (nested) exception group, or None if there are several."""
    leaves: list[BaseException] = []
    pending: list[BaseException] = [group]
    while pending:
        exc = pending.pop()
        if isinstance(exc, BaseExceptionGroup):
            pending.extend(exc.exceptions)
        else:
            leaves.append(exc)
    return leaves[0] if len(leaves) == 1 else None
