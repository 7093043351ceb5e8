"""The issue-33 fuzzers, run long: the CI-sized ones in the tests, with many more inputs, and what held.

* **assembly** -- random events (samples with stamps of any type and range, shapes, NaN/Inf, sizes,
  quaternions, bursts, silences) into live assembly, trigger and fixed-rate; invariants: nothing raises,
  frames in time order with consecutive ids, each trigger sample taken in exactly one frame, buffers
  within their caps (``tests/live/test_assembler_fuzz.py``);
* **drives** -- a small drive with bytes overwritten anywhere, read strict and not; invariant: a
  DriveError or a counted skip, never another exception (``tests/drives/test_drive_fuzz.py``);
* **outputs** -- random answers of the ``told_*`` test models through the real server; invariants: every
  frame a result, the radar never disturbed, lidar and camera ``ok`` or ``error``, never a dropped frame
  (``tests/reliability/test_hostile_outputs.py``).

A failing input stops the run with hypothesis' shrunk example (the JSON is then not written).

Usage::

    .venv/bin/python bench/bench_fuzz.py              # ~5-10 min; writes bench/results/fuzz.json
    .venv/bin/python bench/bench_fuzz.py --scale 0.1  # a quick look
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
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

REPO = Path(__file__).resolve().parents[1]
for sub in ("live", "drives", "reliability"):  # the fuzzers' strategies and checks: one definition, the tests'
    sys.path.insert(0, str(REPO / "tests" / sub))

from perception.benchmark import environment, load_average  # noqa: E402
from perception.config import LiveConfig, TriggerConfig  # noqa: E402
from perception.errors import DriveError  # noqa: E402
from perception.scheduler import Runtime  # noqa: E402
from perception.server import EmbeddedTriton  # noqa: E402
from perception.types import FrameStatus, SensorStatus  # noqa: E402

RESULTS = REPO / "bench" / "results" / "fuzz.json"
def _settings(examples: int) -> settings:
    return settings(max_examples=examples, deadline=None, suppress_health_check=list(HealthCheck), database=None)


def fuzz_assembly(examples: int) -> dict[str, Any]:
    from test_assembler_fuzz import EVENT, _run

    totals = {"runs": 0, "events": 0, "frames": 0, "samples_taken": 0, "invalid": 0, "slots_skipped": 0}
    totals["buffer_evicted"] = 0

    @_settings(examples)
    @given(
        events=st.lists(EVENT, max_size=120),
        mode=st.sampled_from(["monotonic", "estimate", "offset"]),
        rate=st.booleans(),
    )
    def run(events: list[Any], mode: str, rate: bool) -> None:
        live = LiveConfig(time_base=mode, transit_ms=20, trigger_tolerance_ms=50)  # type: ignore[arg-type]
        trigger = TriggerConfig(rate_hz=20.0) if rate else TriggerConfig(sensor="lidar")
        asm = _run(live, trigger, events)
        totals["runs"] += 1
        totals["events"] += len(events)
        totals["frames"] += asm.stats.frames
        totals["samples_taken"] += asm.stats.samples
        totals["invalid"] += asm.stats.invalid
        totals["slots_skipped"] += asm.stats.slots_skipped
        totals["buffer_evicted"] += asm.stats.buffer_evicted

    run()
    return totals


def fuzz_drives(examples: int) -> dict[str, Any]:
    from drive_fixtures import write_drive
    from test_drive_fuzz import MUTATION, read_all

    totals = {"runs": 0, "mutations": 0, "read_through": 0, "drive_errors": 0, "items_read": 0}
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / "d.mcap"
        write_drive(source, frames=12, chunk_size=3_000, compression="zstd")
        pristine = source.read_bytes()

        @_settings(examples)
        @given(mutations=st.lists(MUTATION, min_size=1, max_size=6), strict=st.booleans())
        def run(mutations: list[tuple[float, bytes]], strict: bool) -> None:
            data = bytearray(pristine)
            for where, block in mutations:
                at = min(len(data) - len(block), int(where * len(data)))
                data[at : at + len(block)] = block
            path = Path(tmp) / "m.mcap"
            path.write_bytes(bytes(data))
            totals["runs"] += 1
            totals["mutations"] += len(mutations)
            try:
                totals["items_read"] += read_all(path, strict)
                totals["read_through"] += 1
            except DriveError:
                totals["drive_errors"] += 1

        run()
    return totals


def fuzz_outputs(frames: int) -> dict[str, Any]:
    from reliability_helpers import rig, runtime_config
    from test_hostile_outputs import _OUTPUT, MODELS, told_frame

    answers = st.tuples(st.tuples(*[_OUTPUT] * 3), st.tuples(*[_OUTPUT] * 4))
    drawn: list[Any] = []

    @_settings(frames)
    @given(answer=answers)
    def draw(answer: Any) -> None:
        drawn.append(answer)

    draw()
    totals: dict[str, Any] = {"frames": len(drawn), "lidar": {}, "camera": {}, "frame_status": {}}

    async def run() -> None:
        async with EmbeddedTriton([REPO / "tests" / "triton_models"], startup_timeout_s=300) as server:
            cfg = runtime_config(
                server.grpc_url, MODELS, fusion={"enabled": True}, pipeline={"circuit": {"failure_threshold": 10**6}}
            )
            async with Runtime(cfg, rig={s.name: s for s in rig()}) as rt:
                for i, (lidar, camera) in enumerate(drawn):
                    r = await rt.process(told_frame(i, lidar, camera))
                    assert r.frame_id == i and r.status is not FrameStatus.DROPPED, r.reason
                    assert r.sensors["radar_front"].status is SensorStatus.OK, r.sensors["radar_front"]
                    for name, key in (("lidar_top", "lidar"), ("cam_front", "camera")):
                        status = r.sensors[name].status
                        assert status in (SensorStatus.OK, SensorStatus.ERROR), r.sensors[name]
                        totals[key][status.value] = totals[key].get(status.value, 0) + 1
                    totals["frame_status"][r.status.value] = totals["frame_status"].get(r.status.value, 0) + 1

    anyio.run(run)
    return totals


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scale", type=float, default=1.0, help="multiply every count (0.1: a quick look)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)  # the inputs are bad on purpose: their warnings are expected
    n = {"assembly": 3000, "drives": 2000, "outputs": 400}
    out: dict[str, Any] = {"environment": environment(), "load_before": load_average(), "sections": {}}
    for name, fn in (("assembly", fuzz_assembly), ("drives", fuzz_drives), ("outputs", fuzz_outputs)):
        t0 = time.monotonic()
        result = fn(max(1, round(n[name] * args.scale)))
        result["seconds"] = round(time.monotonic() - t0, 1)
        result["invariants_held"] = True  # a broken one raised above (hypothesis prints the shrunk input)
        out["sections"][name] = result
        print(name, json.dumps(result), flush=True)
    out["load_after"] = load_average()
    args.out.write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
