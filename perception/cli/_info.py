"""``perception info DRIVE [--json]``: what a recorded drive contains.

Prints the duration, the sensors (kind, topic, frame, nominal and measured rate), whether ground
truth is present, and per topic the schema, message count and mean rate. A file that cannot be
opened is one error line naming it (exit 1); a truncated drive prints what is readable, then the
error line, and exits 1.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from perception.drives import DriveReader, DriveStats
from perception.types import SensorSpec

__all__ = ["register", "run"]


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser("info", help="summarize a recorded drive (MCAP)", description=__doc__)
    p.add_argument("drive", type=Path, help="drive file, e.g. replay_data/town.mcap")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=run)


def _table(rows: list[list[str]], indent: str = "  ") -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return [indent + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]


def _text(stats: DriveStats, rig: dict[str, SensorSpec], metadata: dict[str, str]) -> str:
    lines = [
        f"drive         {stats.path}",
        f"duration      {stats.duration_s:.3f} s  (t = {stats.start_ns} .. {stats.end_ns} ns)",
        f"messages      {stats.message_count}",
        f"ground truth  {'yes' if stats.has_ground_truth else 'no'}",
    ]
    if metadata:
        lines.append("metadata      " + ", ".join(f"{k}={v}" for k, v in sorted(metadata.items())))
    lines.append("sensors:")
    rows = [["name", "kind", "topic", "frame", "rate_hz", "measured_hz"]]
    for spec in rig.values():
        measured = stats.topics[spec.topic].rate_hz if spec.topic in stats.topics else 0.0
        rows.append([spec.name, spec.kind.value, spec.topic, spec.frame_id, f"{spec.rate_hz:g}", f"{measured:.2f}"])
    lines += _table(rows)
    lines.append("topics:")
    rows = [["topic", "schema", "messages", "rate_hz"]]
    for t in stats.topics.values():
        rows.append([t.topic, t.schema, str(t.message_count), f"{t.rate_hz:.2f}"])
    lines += _table(rows)
    return "\n".join(lines) + "\n"


def run(args: argparse.Namespace) -> int:
    with DriveReader(args.drive) as drive:
        stats = drive.stats()
        rig = dict(drive.rig)
        metadata = dict(drive.metadata)
        truncated = drive.truncated
    if args.json:
        doc = stats.to_dict()
        doc["metadata"] = metadata
        doc["sensors"] = {
            s.name: {"kind": s.kind.value, "topic": s.topic, "frame_id": s.frame_id, "rate_hz": s.rate_hz}
            for s in rig.values()
        }
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
    else:
        sys.stdout.write(_text(stats, rig, metadata))
    if truncated is not None:
        sys.stderr.write(f"perception info: error: {truncated}\n")
        return 1
    return 0
