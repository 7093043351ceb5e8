"""``perception info DRIVE [--json] [--strict]``: what a recorded drive contains, and what is damaged.

Prints the duration, the sensors (kind, topic, frame, nominal and measured rate), whether ground
truth is present, and per topic the schema, readable and lost message counts and mean rate. Every
chunk is checked (decompressed, CRC and records), so damage is found: each damaged chunk with its
byte offset, size, reason and time range, and per topic the messages lost and the time ranges; a
truncation; a damaged summary.

Exit codes: 0 the drive is intact; 3 it is damaged (what is readable is printed, then one error
line naming the file and the first damage; with ``--strict`` only the error line); 1 the file
cannot be opened as a drive (one error line naming it); 2 usage error (a missing file).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from perception.cli._common import check_drive
from perception.cli._exitcodes import EXIT_CODES_HELP, EXIT_OK
from perception.drives import DriveDamage, DriveReader, DriveStats
from perception.types import SensorSpec

__all__ = ["register", "run"]


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "info",
        help="summarize a recorded drive (MCAP)",
        description=__doc__,
        epilog=EXIT_CODES_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("drive", type=Path, help="drive file, e.g. replay_data/urban_seed7_10s.mcap")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument(
        "--strict", action="store_true", help="any damage is an error (exit 3, one line naming file and offset)"
    )
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
        rows.append([spec.name, spec.kind, spec.topic, spec.frame_id, f"{spec.rate_hz:g}", f"{measured:.2f}"])
    lines += _table(rows)
    lines.append("topics:")
    damaged = bool(stats.damage.chunks)
    rows = [["topic", "schema", "messages", *(["lost"] if damaged else []), "rate_hz"]]
    for t in stats.topics.values():
        lost = [_lost(t.lost_count)] if damaged else []
        rows.append([t.topic, t.schema, str(t.message_count), *lost, f"{t.rate_hz:.2f}"])
    lines += _table(rows)
    lines += _damage_text(stats.damage)
    return "\n".join(lines) + "\n"


def _lost(n: int | None) -> str:
    return "?" if n is None else str(n)


def _count(n: int | None) -> str:
    return "an unknown number of" if n is None else str(n)


def _damage_text(damage: DriveDamage) -> list[str]:
    if not damage:
        return []
    what = [f"{_count(damage.messages_lost)} messages lost in {len(damage.chunks)} chunk(s)"] if damage.chunks else []
    what += ["truncated"] if damage.truncated is not None else []
    what += ["summary unreadable"] if damage.summary is not None else []
    lines = [f"damage        DAMAGED: {', '.join(what)}"]
    if damage.summary is not None:
        lines.append(f"  summary unreadable ({damage.summary}): the file was scanned instead, no message lost by it")
    for c in damage.chunks:
        lines.append(
            f"  chunk at byte {c.offset} ({c.length} bytes): {c.reason}; "
            f"{_count(c.message_count)} messages, t = {c.start_ns} .. {c.end_ns} ns"
        )
        rows = [["topic", "lost", "first_t_ns", "last_t_ns"]]
        rows += [
            [m.topic, "?" if m.count is None else str(m.count), str(m.first_t_ns), str(m.last_t_ns)] for m in c.lost
        ]
        lines += _table(rows, indent="    ")
    if damage.truncated is not None:
        lines.append(f"  {damage.truncated} (what followed is unknown)")
    return lines


def run(args: argparse.Namespace) -> int:
    check_drive(args.drive)  # a user error, as for every command that reads a drive (exit 2)
    with DriveReader(args.drive, strict=False, quiet=True) as drive:
        damage = drive.verify()
        if args.strict and damage:
            raise damage.error(str(args.drive))
        stats = drive.stats()
        rig = dict(drive.rig)
        metadata = dict(drive.metadata)
    if args.json:
        doc = stats.to_dict()
        doc["metadata"] = metadata
        doc["sensors"] = {
            s.name: {"kind": s.kind, "topic": s.topic, "frame_id": s.frame_id, "rate_hz": s.rate_hz}
            for s in rig.values()
        }
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
    else:
        sys.stdout.write(_text(stats, rig, metadata))
    sys.stdout.flush()
    if damage:
        raise damage.error(str(args.drive))
    return EXIT_OK
