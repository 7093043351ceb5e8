"""The importers' shared output side: a :class:`DriveWriter` behind an all-or-nothing file, plus the
bookkeeping (what was skipped and why) that ends up in the :class:`ImportSummary`.

The drive is written to a hidden ``.<name>.partial`` sibling and renamed onto the requested path only
when the import finished, so a failed import never leaves a half-written drive behind (nor clobbers
an existing one).
"""

from __future__ import annotations

import logging
import os
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType, TracebackType
from typing import NoReturn

from perception.drives import DriveReader, DriveWriter
from perception.errors import DriveError
from perception.types import EgoPose, GroundTruth, ImageSample, PointCloudSample, SensorSpec

__all__ = ["DriveOutput", "ImportSummary"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ImportSummary:
    """What an import wrote and what it left out.

    ``messages`` is the drive's per-topic message count (read back from the finished drive, so it
    includes the static topics the writer repeats); ``skipped`` maps a reason to how many items it
    applied to (the reason names the unit: messages, files, points, annotations).
    """

    output: Path
    source: str
    start_ns: int
    end_ns: int
    messages: Mapping[str, int]
    skipped: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    notes: tuple[str, ...] = ()

    @property
    def duration_s(self) -> float:
        return (self.end_ns - self.start_ns) / 1e9

    def lines(self) -> list[str]:
        """Human-readable summary, one item per line."""
        out = [
            f"imported {self.source} -> {self.output}",
            f"duration  {self.duration_s:.3f} s  (t = {self.start_ns} .. {self.end_ns} ns)",
            "messages:",
        ]
        width = max((len(t) for t in self.messages), default=0)
        out += [f"  {topic.ljust(width)}  {n}" for topic, n in self.messages.items()]
        if self.skipped:
            out.append("skipped:")
            out += [f"  {reason}: {n}" for reason, n in sorted(self.skipped.items())]
        else:
            out.append("skipped:  nothing")
        out += [f"note: {n}" for n in self.notes]
        return out


class DriveOutput:
    """A :class:`DriveWriter` whose file appears at ``path`` only if the ``with`` body succeeds.

    ``skip(reason, n)`` counts what an importer leaves out (never silently); ``note(text)`` records a
    remark for the summary. After a successful ``with`` block, :attr:`summary` is available.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        rig: Sequence[SensorSpec],
        *,
        source: str,
        metadata: Mapping[str, str] | None = None,
        overwrite: bool = False,
    ) -> None:
        self.path = Path(path)
        self.source = source
        if self.path.is_dir():
            raise DriveError("output is a directory", file=str(self.path))
        if self.path.exists() and not overwrite:
            raise DriveError("output exists (pass --force / overwrite=True to replace it)", file=str(self.path))
        if not self.path.parent.is_dir():
            raise DriveError("output directory does not exist", file=str(self.path))
        self._partial = self.path.with_name(f".{self.path.name}.partial")
        try:
            self._writer = DriveWriter(self._partial, rig, metadata=metadata)
        except DriveError as exc:
            self._reraise(exc)
        self._skipped: Counter[str] = Counter()
        self._notes: list[str] = []
        self._summary: ImportSummary | None = None

    # -- recording ---------------------------------------------------------------------------------

    def write(self, sample: PointCloudSample | ImageSample) -> None:
        try:
            self._writer.write(sample)
        except DriveError as exc:
            self._reraise(exc)

    def write_ego_pose(self, pose: EgoPose) -> None:
        try:
            self._writer.write_ego_pose(pose)
        except DriveError as exc:
            self._reraise(exc)

    def write_ground_truth(self, gt: GroundTruth) -> None:
        try:
            self._writer.write_ground_truth(gt)
        except DriveError as exc:
            self._reraise(exc)

    def _reraise(self, exc: DriveError) -> NoReturn:
        """Raise the writer's error naming the output: the partial file it writes is hidden, and gone when
        the import fails (an importer that knows the source it came from names that instead)."""
        if exc.context.get("file") != str(self._partial):
            raise exc
        raise type(exc)(exc.message, **{**exc.context, "file": str(self.path)}) from exc

    def skip(self, reason: str, n: int = 1) -> None:
        if n > 0:
            self._skipped[reason] += n

    def note(self, text: str) -> None:
        if text not in self._notes:
            self._notes.append(text)

    # -- finishing ---------------------------------------------------------------------------------

    @property
    def summary(self) -> ImportSummary:
        if self._summary is None:
            raise RuntimeError("the import has not finished")
        return self._summary

    def _commit(self) -> None:
        try:
            self._writer.close()
        except DriveError as exc:
            self._reraise(exc)
        try:
            os.replace(self._partial, self.path)
        except OSError as exc:
            raise DriveError(
                f"cannot move the finished drive into place: {exc.strerror or exc}", file=str(self.path)
            ) from exc
        with DriveReader(self.path) as reader:  # also re-validates what was written
            stats = reader.stats()
        self._summary = ImportSummary(
            output=self.path,
            source=self.source,
            start_ns=stats.start_ns,
            end_ns=stats.end_ns,
            messages=MappingProxyType({t.topic: t.message_count for t in stats.topics.values()}),
            skipped=MappingProxyType(dict(self._skipped)),
            notes=tuple(self._notes),
        )
        for reason, n in sorted(self._skipped.items()):
            log.warning("%s: skipped %d: %s", self.path, n, reason)

    def _abort(self) -> None:
        try:
            self._writer.close()
        except DriveError:
            log.debug("closing the partial drive failed", exc_info=True)
        finally:
            self._partial.unlink(missing_ok=True)

    def __enter__(self) -> DriveOutput:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc_type is None:
            try:
                self._commit()
            except BaseException:
                self._partial.unlink(missing_ok=True)
                raise
        else:
            self._abort()
