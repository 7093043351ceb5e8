"""What recording a run costs (issue 47): client CPU per frame and bytes per second, on the bundled drive.

The bundled drive is replayed at its recorded speed (``--rate 1``, the vehicle's timing) through the
embedded Triton serving the reference models, with the default profile, alternately without and with a
:class:`perception.record.RunRecorder` (``perception replay --rate 1 --record FILE``'s path). Per frame:

* ``client_cpu_ms``: this process's CPU time (every thread: intake, dispatch, fusion, the recorder's
  writer) per frame -- Triton runs in its own process and is not counted;
* ``writer_cpu_ms``: the recorder's writer thread, all of its CPU time (waking, encoding, file writes,
  finishing the segment; formats 1-3 also digested each frame, format 4 leaves that to the reader), per
  frame;
* ``hook_cpu_ms``: the recorder's calls on the run's threads (handing samples, poses and results over, the
  copy of the tracker state in fusion's thread) per frame;
* ``share_of_client``: (writer + hook) / the client's CPU per frame without recording: the target is at
  most 5 %; the median of the pairs (each recorded run over the plain run just before it: the runs
  alternate, so a pair saw about the same load), with ``share_spread`` (min, max over the pairs);
* ``bytes_per_s``: the recording's size over the drive's duration.

The recording's chunks are uncompressed and carry no CRC (the recorder's defaults; why: bench/README.md).

    .venv/bin/python bench/bench_record.py [--repeats 4] [--compression none|lz4|zstd]

Writes ``bench/results/record.json``.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
import numpy as np

from perception.benchmark import environment
from perception.config import load_config
from perception.drives import DriveReader
from perception.record import RecordOptions, RunRecorder
from perception.replay import ReplayOptions, replay_drive

log = logging.getLogger("bench_record")

ROOT = Path(__file__).resolve().parents[1]
DRIVE = ROOT / "replay_data" / "urban_seed7_10s.mcap"
PROFILE = ROOT / "launch" / "replay.yaml"
RESULTS = ROOT / "bench" / "results" / "record.json"


def _run(recorder: RunRecorder | None) -> dict[str, float]:
    config = load_config(PROFILE)
    options = ReplayOptions(rate=1.0, progress=False, evaluate=False, server_split=False)
    cpu0 = time.process_time()
    outcome = anyio.run(lambda: replay_drive(DRIVE, config, options, observer=recorder))
    if recorder is not None:
        recorder.close()
    cpu = time.process_time() - cpu0  # includes the server's start-up in this process (the same both ways)
    frames = outcome.report.counters.frames
    return {"frames": frames, "client_cpu_s": cpu, "client_cpu_ms": 1e3 * cpu / max(1, frames)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=4)
    parser.add_argument("--compression", default=RecordOptions().compression, choices=("lz4", "zstd", "none"))
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    with DriveReader(DRIVE) as reader:
        duration_s = (reader.end_ns - reader.start_ns) / 1e9
        poses = tuple(reader.ego_poses())
    plain: list[dict[str, float]] = []
    recorded: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="bench-record-") as tmp:
        for i in range(args.repeats):
            plain.append(_run(None))
            path = Path(tmp) / f"run{i}.mcap"
            rec = RunRecorder(path, RecordOptions(compression=args.compression), ego_poses=poses)
            with rec:
                row: dict[str, Any] = _run(rec)
            frames = max(1, row["frames"])
            row.update(
                writer_cpu_ms=rec.cpu_ns / 1e6 / frames,
                hook_cpu_ms=rec.hook_cpu_ns / 1e6 / frames,
                bytes=rec.bytes,
                bytes_per_s=rec.bytes / duration_s,
                gaps={k: v for k, v in rec.stats.items() if k.startswith("dropped_") or k in ("refused", "failed")},
                fused=rec.stats["fused"],
            )
            recorded.append(row)
            log.warning("repeat %d: plain %s, recorded %s", i, plain[-1], row)
    shares = [
        (r["writer_cpu_ms"] + r["hook_cpu_ms"]) / p["client_cpu_ms"] for p, r in zip(plain, recorded, strict=True)
    ]
    client = float(np.median([r["client_cpu_ms"] for r in plain]))
    writer = float(np.median([r["writer_cpu_ms"] for r in recorded]))
    hook = float(np.median([r["hook_cpu_ms"] for r in recorded]))
    result = {
        "drive": str(DRIVE.relative_to(ROOT)),
        "profile": str(PROFILE.relative_to(ROOT)),
        "rate": 1.0,
        "compression": args.compression,
        "duration_s": duration_s,
        "client_cpu_ms_per_frame": round(client, 2),
        "client_cpu_ms_per_frame_recording": round(float(np.median([r["client_cpu_ms"] for r in recorded])), 2),
        "writer_cpu_ms_per_frame": round(writer, 3),
        "hook_cpu_ms_per_frame": round(hook, 3),
        "share_of_client": round(float(np.median(shares)), 4),
        "share_spread": [round(min(shares), 4), round(max(shares), 4)],
        "writer_cpu_ms_spread": [
            round(min(r["writer_cpu_ms"] for r in recorded), 3),
            round(max(r["writer_cpu_ms"] for r in recorded), 3),
        ],
        "target_share": 0.05,
        "bytes_per_s": round(float(np.median([r["bytes_per_s"] for r in recorded]))),
        "runs": {"plain": plain, "recorded": recorded},
        "environment": environment(),
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    sys.stdout.write(json.dumps({k: v for k, v in result.items() if k not in ("runs", "environment")}, indent=2) + "\n")


if __name__ == "__main__":
    main()
