"""``--record FILE`` (live, replay) and ``replay FILE --as-recorded``: a run recorded and reproduced."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import anyio

from perception.cli._args import non_negative_int, output_file, within
from perception.cli._common import (
    DEFAULT_CONFIG,
    check_drive,
    make_folder,
    output_folders_made,
    same_file,
    sensors_option,
)
from perception.config import load_config
from perception.errors import ConfigError, DriveError, PerceptionError
from perception.record import (
    AsRecordedOutcome,
    Divergence,
    RecordOptions,
    RunRecorder,
    replay_as_recorded,
    segments,
)
from perception.replay import safe_output_path
from perception.types import EgoPose

__all__ = [
    "add_as_recorded_options",
    "add_record_options",
    "recorder",
    "recording",
    "report_recording",
    "run_as_recorded",
]

AS_RECORDED_FILE = "as_recorded.json"
AS_RECORDED_FRAMES = "as_recorded.jsonl"


def add_record_options(p: argparse.ArgumentParser) -> None:
    defaults = RecordOptions()
    p.add_argument(
        "--record",
        type=output_file,
        default=None,
        metavar="FILE",
        help="record the run into FILE (.mcap: the samples as received with their arrival times, and per frame "
        "the runtime's decisions, the raw model outputs fused and the tracker state: what a replay derives the "
        "digests from); replay it with --as-recorded. An "
        "earlier recording at FILE is replaced once the run begins, its segments too; the drive being read never "
        "is, nor any other file of their names (FILE, FILE-0001.mcap...) that is not a recording's segment: "
        "refused before the run; FILE's "
        "directory is made when missing",
    )
    p.add_argument(
        "--record-segment-mb",
        type=within(1.0, low_open=False),
        default=defaults.segment_bytes / 2**20,
        help="start a new segment (FILE-0001.mcap...) past this size (default %(default)g)",
    )
    p.add_argument(
        "--record-max-segments",
        type=non_negative_int,
        default=defaults.max_segments,
        help="keep at most this many segments, deleting the oldest (0: all; default %(default)s)",
    )


def add_as_recorded_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--as-recorded",
        action="store_true",
        help="DRIVE is a recording (--record): re-fuse its model outputs under its decisions (the same sensors "
        "late or shed, the same order into the tracker), compare every frame's digests and name the first "
        "frame that differs and why (exit 1); writes DIR/as_recorded.json and DIR/as_recorded.jsonl. A damaged "
        "recording (a segment cut short: the run stopped before closing it) is replayed for what is readable, "
        "the damage reported (exit 3); with --strict it is refused before anything runs. One whose segment 0 was "
        "rotated away (--record-max-segments) is replayed from the first segment kept, on the tracker state "
        "recorded there",
    )
    p.add_argument(
        "--rerun-models",
        action="store_true",
        help="with --as-recorded: ask today's models again on the recorded samples, under the same decisions "
        "(--sensors and --url: which and where; without --rerun-models they are a usage error)",
    )


def recorder(args: argparse.Namespace, ego_poses: tuple[EgoPose, ...] = ()) -> RunRecorder | None:
    """The recorder ``--record`` asks for (not yet entered), or None. A recording replaces an earlier one at its
    path, segments and all: refused when the drive being read (``args.drive``) is one of them."""
    if args.record is None:
        return None
    folder = Path(args.record).parent
    make_folder(folder, "--record")  # made when missing, as --out's and --trace-out's are
    # a file can be created there: the recorder creates its own only once the run begins (a ROS node: once
    # activated), and one that cannot be was logged, the run going on unrecorded, said at its end
    try:
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".perception-record-"):
            pass
    except OSError as exc:
        raise ConfigError(f"cannot create a file in {folder}: {exc.strerror or exc}", key="--record") from exc
    options = RecordOptions(segment_bytes=int(args.record_segment_mb * 2**20), max_segments=args.record_max_segments)
    rec = RunRecorder(args.record, options, ego_poses=ego_poses)
    drive = getattr(args, "drive", None)
    if drive is not None and any(same_file(drive, f) for f in rec.files()):
        raise ConfigError(
            f"{args.record} would overwrite the drive being read ({drive}): record to another path", key="--record"
        )
    try:  # only an earlier recording's segments are replaced: never a drive or other file of their names
        rec.check_replaceable()
    except DriveError as exc:
        raise ConfigError(exc.message, file=exc.file, key="--record") from exc
    return rec


#: Why a recording ends before the run's end, as its report says it; and what it says of one with no file.
_INTERRUPTED = "INTERRUPTED: the recording holds the run up to the stop (the frames finished then included)"
_RUN_FAILED = "the run FAILED: the recording holds it up to its failure"
_RECORDING_FAILED = "the recording FAILED: it holds the run up to its failure, not what came after"
_NO_FILE = {
    None: "the run ended before it began",
    _INTERRUPTED: "interrupted before the run began",
    _RUN_FAILED: "the run failed before it began",
    _RECORDING_FAILED: "the recording failed",
}


def report_recording(rec: RunRecorder, *, cut: str | None = None) -> None:
    """What the recording holds, on stdout; ``cut``: why it ends before the run's end (said after it)."""
    if not rec.stats["segments"]:  # no file: stopped before the run began, or the file could not be created
        earlier = (
            f" (the earlier recording there was deleted: {rec.stats['replaced']} file(s))"
            if rec.stats["replaced"]
            else " (the earlier recording there is left as it was)"
            if rec.files()
            else ""
        )
        sys.stdout.write(f"nothing recorded at {rec.path}{earlier}: {_NO_FILE.get(cut, cut)}\n")
        return
    gaps = RunRecorder.gaps(rec.stats)
    deleted = rec.stats["segments_deleted"]  # the oldest, by --record-max-segments: what is kept is said
    written = f" kept ({rec.stats['segments']} written, {rec.bytes / 2**20:.1f} MiB: the oldest {deleted} deleted)"
    sys.stdout.write(
        f"recorded {rec.path}: {rec.stats['fused']} frames fused, "
        + (f"{rec.stats['predicted']} shed (predicted), " if rec.stats["predicted"] else "")
        + f"{rec.stats['frames']} results, {rec.stats['samples']} samples, "
        f"{rec.stats['segments'] - deleted} segment(s), {(rec.bytes - rec.deleted_bytes) / 2**20:.1f} MiB"
        + (written if deleted else "")
        + (f"; GAPS {gaps}" if gaps else "")
        + (f"; {cut}" if cut else "")
        + "\n"
    )


@contextlib.contextmanager
def recording(rec: RunRecorder) -> Iterator[Callable[[], None]]:
    """``rec`` entered for a run, then closed and reported however the run ends: at its end; on Ctrl-C or
    SIGTERM (it said only 'interrupted', nothing of the recording: finished, and holding the run up to the
    stop), the interrupt raised on after the report, or said by calling what it yields (a run that drains and
    returns on it: a replay's); on an error of the run. A recording that failed (a full disk) is reported for
    what it holds, then its error raised."""
    cut: str | None = None

    def stopped() -> None:
        nonlocal cut
        cut = _INTERRUPTED

    try:
        with rec:
            try:
                yield stopped
            except KeyboardInterrupt:
                cut = _INTERRUPTED
                raise
            except BaseException:
                cut = _RUN_FAILED
                raise
    except PerceptionError:
        # the run's own error (cut), or the run ended well and the recording's failure was raised by its close
        report_recording(rec, cut=cut or _RECORDING_FAILED)
        raise
    except BaseException:
        report_recording(rec, cut=cut)
        raise
    report_recording(rec, cut=cut)


#: ``replay`` options that a replay as recorded does not use: given with --as-recorded, they are refused.
_NOT_AS_RECORDED = {
    "record": "--record",
    "compare_modes": "--compare-modes",
    "live": "--live",
    "trace_out": "--trace-out",
    "metrics_port": "--metrics-port",
    "raw_outputs": "--raw-outputs",
    "server_split": "--server-split",
}


def _start_line(start: Mapping[str, Any], unreadable: str | None = None) -> str:
    """Where a replay of a recording whose segment 0 was rotated away started (``AsRecordedOutcome.start``);
    ``unreadable``: segment 0's name, where it is there but could not be read (damaged)."""
    gone = f"{start['fused_in_segments_gone']} frame(s) fused" + (
        f" and {predicted} shed frame(s) predicted" if (predicted := start.get("predicted_in_segments_gone")) else ""
    )
    why = "rotated away" if unreadable is None else f"({unreadable}) unreadable"
    line = f"as recorded: segment 0 {why}, replayed from {start['segment']}: "
    if start["fusion_seq"] is None:
        left = start["results_not_replayed"]
        return f"{line}its segments kept hold no frame fused: nothing compared" + (
            f"; {left} result(s) fused in the segments gone not replayed" if left else ""
        )
    run = f" of run {start['run']}" if start["run"] != "0" else ""
    at = (
        "no frame compared (none whose samples all are kept follows a recorded tracker state)"
        if start["frame_id"] is None
        else f"compared from frame {start['frame_id']}{run} (fusion #{start['fusion_seq']}) on the tracker state "
        "recorded before it"
    )
    left = start["results_not_replayed"]
    return (
        f"{line}{at}; {start['taken_as_recorded']} frame(s) taken as recorded (their recorded detections, not "
        f"compared); {gone} in the segments gone not replayed"
        + (f" ({left} of their results, delivered in the segments kept, left out)" if left else "")
    )


def run_as_recorded(args: argparse.Namespace) -> int:
    """``perception replay RECORDING --as-recorded``: the profile (``--config`` or the default) with the
    CLI's ``--url`` and ``--sensors`` (with ``--rerun-models`` only: else no model is asked, and they are a
    usage error), resolved against the recording's own source."""
    given = [flag for key, flag in _NOT_AS_RECORDED.items() if getattr(args, key, None) not in (None, False)]
    if getattr(args, "rate", 1.0) != 1.0:  # (the recorded speed, the default, is what a replay as recorded keeps)
        given.append("--rate")
    if given:
        raise ConfigError(
            f"{', '.join(given)}: not used by a replay as recorded (its decisions and timing are the recording's)",
            key="--as-recorded",
        )
    path = Path(args.drive)
    if path.is_dir():
        check_drive(path)  # a directory (a ROS 2 bag's, perhaps): said as for any drive
    if not segments(path):  # segment 0 may be gone (rotated away), the recording still there
        name = f"{path.stem}-NNNN{path.suffix or '.mcap'}"
        raise ConfigError(f"recording not found (nor a segment of it, {name})", file=str(path))
    cfg = load_config(args.config or DEFAULT_CONFIG)
    sensors = sensors_option(args)
    if not args.rerun_models:  # the recorded answers of the recorded sensors are re-fused: no model is asked
        unused = [flag for flag, value in (("--sensors", sensors), ("--url", args.url)) if value is not None]
        if unused:
            raise ConfigError(
                f"{', '.join(unused)}: used with --rerun-models only (today's models on the recorded samples); a "
                "replay as recorded re-fuses the recorded sensors' recorded answers",
                key="--as-recorded",
            )
    with output_folders_made(args):  # --out made now (one that cannot be made lost the results), unmade if it fails
        outcome: AsRecordedOutcome = anyio.run(
            lambda: replay_as_recorded(
                args.drive, cfg, rerun_models=args.rerun_models, url=args.url, sensors=sensors, strict=args.strict
            )
        )
    report = outcome.report()
    safe_output_path(args.out, AS_RECORDED_FILE).write_text(json.dumps({"as_recorded": report}, indent=2) + "\n")
    with safe_output_path(args.out, AS_RECORDED_FRAMES).open("w") as f:
        for r in outcome.results:
            record = {
                "frame_id": r.frame_id,
                "t_ns": r.t_ns,
                "status": r.status.value,
                "reason": r.reason,
                "predicted": r.predicted,
                "admission_limit": r.admission_limit,
                "sensors": {n: s.status.value for n, s in r.sensors.items()},
                "detections": [dataclasses.asdict(d) for d in r.detections],
            }
            f.write(json.dumps(record) + "\n")
    start = outcome.start
    if start is not None:  # segment 0 rotated away: from the first kept segment
        name = Path(args.drive).name
        sys.stdout.write(_start_line(start, name if name in outcome.damage else None) + "\n")
    first: Divergence | None = outcome.first
    if first is not None:
        sys.stdout.write(first.line() + "\n")
        sys.stdout.write(
            f"as recorded: {outcome.equal} of {outcome.compared} frames equal; diverged {report['diverged']}\n"
        )
    else:
        # the predictions compared are the shed frames': "fused" counts the frames fusion was given alone
        fused, predicted = outcome.compared - outcome.predicted, outcome.predicted
        shed = f", {predicted} shed (predicted)" if predicted else ""
        n = len(outcome.results)
        sys.stdout.write(f"as recorded: {fused} frames fused{shed}, every digest equal ({n} results)\n")
    if outcome.results_missing:
        n = sum(count for _, count, _ in outcome.results_missing)
        gaps = ", ".join(
            f"#{first}" + (f"..#{first + count - 1}" if count > 1 else "") + f" ({why})"
            for first, count, why in outcome.results_missing[:5]
        )
        more = f" and {len(outcome.results_missing) - 5} more gap(s)" if len(outcome.results_missing) > 5 else ""
        sys.stdout.write(f"as recorded: {n} delivered result(s) missing from the recording: {gaps}{more}\n")
    if outcome.recorder_lost:
        lost = ", ".join(f"{k} {v}" for k, v in sorted(outcome.recorder_lost.items()))
        sys.stdout.write(f"as recorded: the recorder lost items while it recorded (the recording has gaps): {lost}\n")
    for name, damage in outcome.damage.items():
        sys.stdout.write(f"recording damaged: {name}: {damage.first_problem()}: what follows it was not replayed\n")
    if outcome.drive_error is not None:
        raise outcome.drive_error  # exit 3: everything readable replayed and compared, the damage reported
    return 1 if first is not None else 0
