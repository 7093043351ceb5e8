"""Triton's time per request from its trace, with frames in flight, and the run's timeline (--trace-out).

One embedded server with the trace on (as ``url: embedded`` runs it) serves the sleepy test models
(lidar 20 ms, radar 30 ms, camera 40 ms of sleep per request); frames are pipelined three deep, where
Triton's statistics cannot tell frames apart.
"""

from __future__ import annotations

import itertools
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import anyio
import pytest
from reliability_helpers import read_records, runtime_config, write_drive

from perception.metrics import timeline_sink
from perception.replay import ReplayOptions, replay_drive

pytestmark = pytest.mark.triton

SLEEPY = {"lidar_top": "sleepy_lidar", "radar_front": "sleepy_radar", "cam_front": "sleepy_camera"}
DELAY_MS = {"lidar_top": 20.0, "radar_front": 30.0, "cam_front": 40.0}
FRAMES = 8
DEPTH = 3
TEST_MODELS = Path(__file__).resolve().parents[1] / "triton_models"
STAGES = ("server_queue", "server_compute_input", "server_compute_infer", "server_compute_output")


@pytest.fixture(scope="module")
def replayed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """One pipelined replay on a traced embedded server: its output directory and report."""
    root = tmp_path_factory.mktemp("trace")
    repo = root / "models"
    repo.mkdir()
    for model in SLEEPY.values():  # only the models this drive uses: a quicker start
        (repo / model).symlink_to(TEST_MODELS / model, target_is_directory=True)
    drive = write_drive(root / "drive.mcap", FRAMES, period_ns=20_000_000)
    cfg = runtime_config(
        "embedded",
        SLEEPY,
        server={"url": "embedded", "models": [str(repo)], "startup_timeout_s": 120},
        pipeline={"max_in_flight": DEPTH, "admission": "fixed"},
    )
    out = root / "out"
    sink = timeline_sink(out / "trace.json", process_name="perception replay test")

    async def run() -> dict[str, Any]:
        with anyio.fail_after(300):
            outcome = await replay_drive(
                drive,
                cfg,
                ReplayOptions(rate="max", out_dir=out, report_md=False, evaluate=False, progress=False),
                sinks=[sink],
            )
        return outcome.report.to_json()

    report = anyio.run(run, backend="asyncio")
    return out, report


def test_every_request_gets_its_own_server_time_with_frames_in_flight(replayed: tuple[Path, dict[str, Any]]) -> None:
    out, report = replayed
    assert report["server_split"]["per_frame"] is True
    assert report["server_split"]["source"] == "trace"
    assert report["admission"]["peak"] > 1  # frames really were in flight together
    records = read_records(out / "detections.jsonl")
    assert len(records) == FRAMES
    for rec in records:
        assert "server_unavailable" not in rec["latency_ms"], rec["latency_ms"]
        for name, delay in DELAY_MS.items():
            s = rec["latency_ms"]["sensors"][name]
            # the model's sleep is THIS request's compute_infer
            assert s["server_compute_infer"] >= delay, (rec["frame_id"], name, s)
            assert s["server_total"] == pytest.approx(sum(s[k] for k in STAGES), abs=0.005)
            # Clocks: only the server's own differences are used; a request's server time is inside
            # the client's time in flight for every request (no offset between the two clocks needed)
            assert s["server_total"] <= s["in_flight"], (rec["frame_id"], name, s)
            assert s["overhead"] == pytest.approx(s["in_flight"] - s["server_total"], abs=0.002)
            model = rec["latency_ms"]["server"][SLEEPY[name]]
            assert model["requests"] == 1 and model["compute_infer"] == s["server_compute_infer"]
    split = report["server_split"]["models"]
    assert all(split[m]["frames"] == FRAMES and not split[m]["unavailable"] for m in SLEEPY.values())


def _contains(outer: dict[str, Any], inner: dict[str, Any]) -> bool:
    slack = 0.002  # µs rounding of ts and dur
    return bool(outer["ts"] - slack <= inner["ts"] and inner["ts"] + inner["dur"] <= outer["ts"] + outer["dur"] + slack)


def test_the_timeline_nests_and_adds_up_to_each_latency_tree(replayed: tuple[Path, dict[str, Any]]) -> None:
    out, _ = replayed
    events = json.loads((out / "trace.json").read_text())
    records = {r["frame_id"]: r for r in read_records(out / "detections.jsonl")}
    assert {e["pid"] for e in events} == {1}  # one process per run
    names = {e["tid"]: e["args"]["name"] for e in events if e["name"] == "thread_name"}
    assert {"frame", *SLEEPY} <= set(names.values())  # a frame track and one per sensor
    assert any(n.endswith("#1") for n in names.values())  # frames in flight together: a second lane
    by_frame: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for e in events:
        if e["ph"] == "X":
            by_frame[e["args"]["frame_id"] if "args" in e and "frame_id" in e["args"] else -1].append(e)
    assert set(records) <= set(by_frame)
    xs = [e for e in events if e["ph"] == "X"]
    for fid, rec in records.items():
        lat = rec["latency_ms"]
        (frame,) = [e for e in by_frame[fid] if e["cat"].startswith("frame")]
        assert frame["dur"] == pytest.approx(lat["total"] * 1e3, abs=1)
        assert frame["args"]["deadline_missed"] == rec["deadline_missed"]
        stages = sorted((e for e in by_frame[fid] if e["cat"] == "stage"), key=lambda e: e["ts"])
        expected = [k for k in lat if k not in ("total", "sensors", "server", "server_unavailable")]
        assert [e["name"] for e in stages] == expected  # in order, one after the other
        assert all(e["dur"] == pytest.approx(lat[e["name"]] * 1e3, abs=1) for e in stages)
        assert sum(e["dur"] for e in stages) == pytest.approx(frame["dur"], abs=len(stages) * 1e3 * 0.001 + 1)
        assert all(_contains(frame, e) for e in stages)
        for a, b in itertools.pairwise(stages):
            assert a["ts"] + a["dur"] == pytest.approx(b["ts"], abs=0.01)
        for sensor, tree in lat["sensors"].items():
            (req,) = [e for e in by_frame[fid] if e["cat"] == "sensor" and e["name"] == sensor]
            assert _contains(frame, req)
            tid = req["tid"]
            inside = [e for e in xs if e["tid"] == tid and _contains(req, e) and e is not req]
            parts = {e["name"]: e for e in inside}
            for part in ("preprocess", "request", "serialize", "in_flight", "server", *STAGES):
                assert parts[part]["dur"] == pytest.approx(tree.get(part, tree.get("server_total")) * 1e3, abs=1)
            assert parts["preprocess"]["dur"] + parts["request"]["dur"] == pytest.approx(req["dur"], abs=2)
            assert _contains(parts["request"], parts["serialize"]) and _contains(parts["request"], parts["in_flight"])
            assert _contains(parts["in_flight"], parts["server"])
            assert all(_contains(parts["server"], parts[s]) for s in STAGES)
            assert sum(parts[s]["dur"] for s in STAGES) == pytest.approx(parts["server"]["dur"], abs=4)
    flows = [e for e in events if e["ph"] in ("s", "f")]
    n_requests = sum(len(r["latency_ms"]["sensors"]) for r in records.values())
    assert len([e for e in flows if e["ph"] == "s"]) == n_requests == len([e for e in flows if e["ph"] == "f"])


def test_budget_gates_server_queue_and_compute_pipelined(tmp_path: Path) -> None:
    """``perception budget --in-flight 3`` on the embedded server: Triton's split per request, per-sensor
    queue vs compute rows, and budgets on ``server.<model>.queue`` and a sensor's ``server_queue`` judged."""
    import yaml
    from reliability_helpers import profile_data

    from perception.cli import main

    repo = tmp_path / "models"
    repo.mkdir()
    for model in SLEEPY.values():
        (repo / model).symlink_to(TEST_MODELS / model, target_is_directory=True)
    drive = write_drive(tmp_path / "drive.mcap", FRAMES, period_ns=20_000_000)
    data = profile_data("embedded", SLEEPY, server={"url": "embedded", "models": [str(repo)], "startup_timeout_s": 120})
    data["budget"]["stages"] = {
        "server.sleepy_radar.queue": 10_000,  # generous: judged, not a timing assertion
        "lidar_top.server_queue": 10_000,
        "server.sleepy_camera.compute_infer": 1,  # the camera model sleeps 40 ms: must fail
    }
    profile = tmp_path / "profile.yaml"
    profile.write_text(yaml.safe_dump(data))
    out = tmp_path / "out"
    trace = out / "trace.json"
    args = [str(drive), "--config", str(profile), "--no-progress", "--budget-ms", "3000", "--in-flight", "3"]
    assert main(["budget", *args, "--out", str(out), "--trace-out", str(trace)]) == 1
    report = json.loads((out / "report.json").read_text())
    assert report["server_split"]["per_frame"] is True and report["server_split"]["source"] == "trace"
    verdicts = {r["stage"]: r["verdict"] for r in report["budget"]["rows"]}
    assert verdicts["server.sleepy_radar.queue"] == "ok" and verdicts["lidar_top.server_queue"] == "ok"
    assert verdicts["server.sleepy_camera.compute_infer"] == "FAIL"
    assert report["budget"]["violations"] == ["server.sleepy_camera.compute_infer"]
    for sensor in SLEEPY:  # queue vs compute per sensor, every frame
        assert f"{sensor}.server_queue" in verdicts and verdicts[f"{sensor}.server_compute"] == "-"
        assert report["latency_ms"]["sensors"][sensor]["server_compute"]["n"] == FRAMES
    md = (out / "report.md").read_text()
    assert "from Triton's trace" in md
    assert json.loads(trace.read_text())[0]["args"]["name"].startswith("perception budget")
