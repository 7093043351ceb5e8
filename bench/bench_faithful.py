"""Faithful replay (issue 27): one drive through every entry point gives the same detections; throughput beside.

The bundled drive, served by the production models (CPU-bound on this machine: the lidar, camera and radar
models compute on the same cores as the replay), through:

* ``lockstep``: one frame at a time, every sensor awaited (the reference);
* ``max``: ``--rate max`` with the adaptive admission (the default: frames in flight follow what the
  servers sustain, each frame's deadline from its admission);
* ``fixed K``: ``--rate max`` with ``pipeline.admission: fixed`` and K = 1, 2, 4 frames in flight;
* ``readme``: the README's vehicle path, ``Runtime(config, source=drive.source)`` with
  ``rt.session.assembler()`` and ``rt.process`` per frame, under the real deadline;
* ``fleet``: ``perception fleet`` with its defaults on three copies of the drive (its own local Ray
  cluster and embedded server, as a user runs it).

Every in-process variant replays against one embedded server, in rounds whose order rotates (the
machine is shared and noisy: compare within a run). Per variant: frames/s (frames after the first over
the time from the first result to the last), deadline misses, degraded frames, and how many frames'
detections equal lockstep's. Writes ``bench/results/faithful.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import logging
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import anyio

from perception import Runtime, load_config
from perception.benchmark import environment
from perception.config import RuntimeConfig, with_overrides
from perception.drives import DriveReader
from perception.metrics import frame_record
from perception.replay import ReplayOptions, each_frame, replay_drive
from perception.server import EmbeddedTriton
from perception.triton import ClientOptions, TritonClient
from perception.types import FrameResult

log = logging.getLogger("bench_faithful")

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results" / "faithful.json"
DRIVE = ROOT / "replay_data" / "urban_seed7_10s.mcap"
PROFILE = ROOT / "launch" / "replay.yaml"


def _detections(results: list[FrameResult]) -> list[Any]:
    return [frame_record(r)["detections"] for r in results]


def _summary(results: list[FrameResult], times: list[float], reference: list[Any] | None) -> dict[str, Any]:
    fps = (len(times) - 1) / (times[-1] - times[0]) if len(times) > 1 and times[-1] > times[0] else 0.0
    dets = _detections(results)
    return {
        "frames": len(results),
        "frames_per_s": round(fps, 2),
        "deadline_misses": sum(r.deadline_missed for r in results),
        "degraded": sum(r.status.value == "degraded" for r in results),
        "identical_to_lockstep": None
        if reference is None
        else sum(a == b for a, b in zip(dets, reference, strict=False)),
    }


async def _replay(
    config: RuntimeConfig, rate: str, client: TritonClient
) -> tuple[list[FrameResult], list[float], dict[str, Any]]:
    times: list[float] = []
    results: list[FrameResult] = []

    def add(result: FrameResult) -> None:
        results.append(result)
        times.append(time.perf_counter())

    outcome = await replay_drive(
        DRIVE,
        config,
        ReplayOptions(rate=rate, progress=False, evaluate=False, report_md=False),  # type: ignore[arg-type]
        client=client,
        sinks=[each_frame(add)],
    )
    return results, times, dict(outcome.report.admission or {})


async def _readme(config: RuntimeConfig, client: TritonClient) -> tuple[list[FrameResult], list[float], dict[str, Any]]:
    results: list[FrameResult] = []
    times: list[float] = []
    with DriveReader(DRIVE) as drive:
        async with Runtime(config, source=drive.source, client=client) as rt:
            for frame in rt.session.assembler().feed(drive.samples()):
                results.append(await rt.process(frame))
                times.append(time.perf_counter())
    return results, times, {}


def _fleet(tmp: Path, copies: int, reference: list[Any], extra: tuple[str, ...] = ()) -> dict[str, Any]:
    """``perception fleet`` (its defaults, plus ``extra`` arguments) on ``copies`` copies of the drive, each
    drive's frames compared with ``reference`` (lockstep's detections, :func:`_detections`)."""
    drives = tmp / "drives"
    drives.mkdir(exist_ok=True)
    for i in range(copies):
        shutil.copy(DRIVE, drives / f"copy{i}.mcap")
    out = tmp / ("fleet" + "".join(extra).replace("-", "_"))
    cmd = [
        sys.executable,
        "-m",
        "perception",
        "fleet",
        str(drives),
        "--out",
        str(out),
        "--no-report-md",
        "--no-fused-mcap",
        *extra,
    ]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, cwd=ROOT)
    wall = time.perf_counter() - t0
    report = json.loads((out / "fleet.json").read_text()) if (out / "fleet.json").exists() else {}
    summaries = {d["name"]: d for d in report.get("drives", [])}
    per_drive = {}
    for i in range(copies):
        path = out / f"copy{i}" / "detections.jsonl"
        rows = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
        per_drive[f"copy{i}"] = {
            "frames": len(rows),
            "ok": sum(r["status"] == "ok" for r in rows),
            "deadline_misses": sum(bool(r.get("deadline_missed")) for r in rows),
            "identical_to_lockstep": sum(r["detections"] == b for r, b in zip(rows, reference, strict=False)),
            # a frame with a sensor late changes the tracker's state, and so the frames after it
            "first_not_ok": next((j for j, r in enumerate(rows) if r["status"] != "ok"), None),
            "first_different": next(
                (j for j, (r, b) in enumerate(zip(rows, reference, strict=False)) if r["detections"] != b), None
            ),
            "late_sensors": dict(Counter(n for r in rows for n, sr in r["sensors"].items() if sr["status"] == "late")),
            "admission": summaries.get(f"copy{i}", {}).get("admission"),
        }
    frames = sum(d["frames"] for d in per_drive.values())
    phase = report.get("drive_phase_s")
    return {
        "exit_code": proc.returncode,
        "args": list(extra),
        "workers": report.get("workers"),
        "wall_s": round(wall, 1),
        "drive_phase_s": phase,
        "frames_per_s_drive_phase": round(frames / phase, 2) if phase else None,
        "drives": per_drive,
        "stderr_tail": proc.stderr[-600:] if proc.returncode else "",
    }


async def lockstep_reference() -> list[Any]:
    """The drive's detections per frame at ``--rate lockstep`` (the reference), on an embedded server."""
    async with EmbeddedTriton([ROOT / "models"]) as server:
        config = with_overrides(load_config(PROFILE), url=server.grpc_url)
        async with TritonClient(ClientOptions(urls=(server.grpc_url,), channels=2)) as client:
            lockstep, _, _ = await _replay(config, "lockstep", client)
    return _detections(lockstep)


async def _in_process(rounds: int) -> dict[str, Any]:
    base = load_config(PROFILE)
    async with EmbeddedTriton([ROOT / "models"]) as server:
        config = with_overrides(base, url=server.grpc_url)
        fixed = {
            k: dataclasses.replace(
                config, pipeline=dataclasses.replace(config.pipeline, max_in_flight=k, admission="fixed")
            )
            for k in (1, 2, 4)
        }
        async with TritonClient(ClientOptions(urls=(server.grpc_url,), channels=2)) as client:
            lockstep, _, _ = await _replay(config, "lockstep", client)
            reference = _detections(lockstep)
            variants: dict[str, Any] = {
                "lockstep": lambda: _replay(config, "lockstep", client),
                "max (adaptive)": lambda: _replay(config, "max", client),
                **{f"max, fixed K={k}": (lambda c=c: _replay(c, "max", client)) for k, c in fixed.items()},
                "readme (vehicle path)": lambda: _readme(config, client),
            }
            runs: dict[str, list[dict[str, Any]]] = {name: [] for name in variants}
            names = list(variants)
            for r in range(rounds):
                order = names[r % len(names) :] + names[: r % len(names)]
                for name in order:
                    results, times, admission = await variants[name]()
                    row = _summary(results, times, reference)
                    if admission:
                        row["admission"] = admission
                    runs[name].append(row)
                    log.info("round %d %-22s %s", r, name, row)
    out: dict[str, Any] = {}
    for name, rows in runs.items():
        out[name] = {
            "frames_per_s_median": statistics.median(x["frames_per_s"] for x in rows),
            "deadline_misses": [x["deadline_misses"] for x in rows],
            "degraded": [x["degraded"] for x in rows],
            "identical_to_lockstep": [x["identical_to_lockstep"] for x in rows],
            "runs": rows,
        }
    return {"reference_frames": len(reference), "variants": out, "reference": reference}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--copies", type=int, default=3)
    parser.add_argument("--no-fleet", action="store_true")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    inproc = anyio.run(_in_process, args.rounds, backend="asyncio")
    reference = inproc.pop("reference")
    result: dict[str, Any] = {"environment": environment(), "drive": str(DRIVE.relative_to(ROOT)), **inproc}
    with open("/proc/loadavg", encoding="utf-8") as f:
        result["loadavg_after_in_process"] = f.read().split()[:3]
    if not args.no_fleet:
        with tempfile.TemporaryDirectory(prefix="bench-faithful-") as tmp, contextlib.suppress(KeyboardInterrupt):
            result["fleet_defaults"] = _fleet(Path(tmp), args.copies, reference)
    lock = result["variants"]["lockstep"]["frames_per_s_median"]
    result["throughput_vs_lockstep"] = {
        name: round(v["frames_per_s_median"] / lock, 3) if lock else None for name, v in result["variants"].items()
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    log.info("wrote %s", args.out)
    sys.stdout.write(json.dumps({k: v for k, v in result.items() if k != "environment"}, indent=1)[:6000] + "\n")


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    main()
