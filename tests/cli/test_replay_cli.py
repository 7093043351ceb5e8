"""``perception replay`` at the CLI level: the exit code tells a run that produced nothing usable from one
that did, and ``--metrics-port`` serves Prometheus metrics that a scraper reads while the replay runs."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from reliability_helpers import REPO_ROOT, TEST_MODELS, profile_data, read_records, write_drive, write_profile

from perception.cli import main
from perception.server import EmbeddedTriton

SLEEPY = {"lidar_top": "sleepy_lidar", "radar_front": "sleepy_radar", "cam_front": "sleepy_camera"}
FRAMES = 5


def _replay(drive: Path, profile: Path, out: Path) -> int:
    argv = ["replay", str(drive), "--config", str(profile), "--out", str(out), "--rate", "lockstep"]
    return main([*argv, "--no-progress", "--no-fused-mcap"])


def _failing(url: str, models: dict[str, str], failing: list[str]) -> dict[str, object]:
    faults = [{"model": m, "error_probability": 1.0} for m in failing]
    return profile_data(url, models, faults=faults)


def test_every_sensor_failing_in_every_frame_exits_1_and_says_so(
    triton: EmbeddedTriton, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    drive = write_drive(tmp_path / "drive.mcap", FRAMES)
    profile = write_profile(tmp_path / "p.yaml", _failing(triton.grpc_url, SLEEPY, list(SLEEPY.values())))
    out = tmp_path / "out"
    assert _replay(drive, profile, out) == 1
    printed, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"perception replay: error: {drive}: no usable frame: no sensor answered ok in any")
    assert "injected fault" in lines[0] and "lidar_top" in lines[0]
    # ...after writing every record: the failure is reported, the frames are not lost
    assert f"frames {FRAMES}: ok 0, degraded {FRAMES}" in printed
    records = read_records(out / "detections.jsonl")
    assert [r["frame_id"] for r in records] == list(range(FRAMES))
    for r in records:
        assert {s["status"] for s in r["sensors"].values()} <= {"error", "skipped"}, r["sensors"]
    report = json.loads((out / "report.json").read_text())
    assert report["usable"] == 0 and report["frames"] == FRAMES
    assert set(report["first_errors"]) == set(SLEEPY) and "injected fault" in report["first_errors"]["lidar_top"]


def test_one_sensor_failing_everywhere_is_still_a_usable_run(
    triton: EmbeddedTriton, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    drive = write_drive(tmp_path / "drive.mcap", FRAMES)
    profile = write_profile(tmp_path / "p.yaml", _failing(triton.grpc_url, SLEEPY, ["sleepy_lidar"]))
    out = tmp_path / "out"
    assert _replay(drive, profile, out) == 0, capsys.readouterr().err
    report = json.loads((out / "report.json").read_text())
    assert report["usable"] == FRAMES and report["ok"] == 0
    assert list(report["first_errors"]) == ["lidar_top"]
    # the one circuit that did something, reported: the failing lidar's, opened (the others: not listed)
    assert list(report["circuits"]) == ["sleepy_lidar"]
    assert report["circuits"]["sleepy_lidar"]["opened"] == 1 and report["circuits"]["sleepy_lidar"]["state"] == "open"


def _scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(url, timeout=10) as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/plain")
        text = response.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


@pytest.mark.slow  # a perception replay subprocess at recorded speed (3 s of drive)
def test_metrics_port_is_scraped_over_http_while_the_replay_runs(triton: EmbeddedTriton, tmp_path: Path) -> None:
    frames = 30
    drive = write_drive(tmp_path / "drive.mcap", frames)
    # the source waits for room (``block``): a busy host's stall of a few frames delays them instead of
    # shedding one for overload (as a run at recorded speed may: that is not what is tested here), so every
    # frame is ok on any host
    data = profile_data(triton.grpc_url, SLEEPY, pipeline={"overflow": "block"})
    profile = write_profile(tmp_path / "p.yaml", data)
    out = tmp_path / "out"
    argv = [sys.executable, "-m", "perception", "replay", str(drive), "--config", str(profile), "--out", str(out)]
    argv += ["--rate", "1.0", "--metrics-port", "0", "--no-progress", "--no-fused-mcap"]
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO_ROOT) as proc:
        try:
            assert proc.stdout is not None
            first = proc.stdout.readline()  # printed (and flushed) before the replay starts
            found = re.fullmatch(r"prometheus metrics on (http://127\.0\.0\.1:\d+/metrics)\n", first)
            assert found, first
            url = found.group(1)
            deadline = time.monotonic() + 120
            seen: list[float] = []
            while len(seen) < 2:  # two scrapes that both saw frames, the second more than the first
                assert proc.poll() is None, "the replay ended before it was scraped twice"
                assert time.monotonic() < deadline, f"no frames in the metrics: {seen}"
                ok = _scrape(url).get(("perception_frames_total", (("status", "ok"),)), 0.0)
                if ok and (not seen or ok > seen[-1]):
                    seen.append(ok)
                time.sleep(0.2)
            metrics = _scrape(url)
            assert metrics[("perception_sensor_status_total", (("sensor", "cam_front"), ("status", "ok")))] >= 1
            assert metrics[("perception_frame_latency_seconds_count", ())] >= seen[-1]
            # the sleepy camera takes >= 40 ms per request: no observation in the buckets below that
            assert metrics[("perception_sensor_latency_seconds_bucket", (("le", "0.03"), ("sensor", "cam_front")))] == 0
            stdout, stderr = proc.communicate(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert proc.returncode == 0, stderr
    assert f"frames {frames}: ok {frames}" in stdout
    assert seen[-1] <= frames
    with pytest.raises(urllib.error.URLError):  # the endpoint closes with the run
        urllib.request.urlopen(url, timeout=5)


def test_a_replay_opens_its_drive_once_and_assembles_its_session_once(
    triton: EmbeddedTriton, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # --strict's check, the session, the replay: one reader and one assembly for the run (issue 46).
    # report.md's rendered frames read the outputs as `perception render DIR` does, with a handle of their own.
    import inspect

    from perception.drives import DriveReader
    from perception.scheduler import Session

    opened: list[str] = []  # the drives opened, "render " + path by report.md's frames
    assembled: list[object] = []
    real_init, real_assemble = DriveReader.__init__, Session.assemble.__func__  # type: ignore[attr-defined]

    def counting_init(self: DriveReader, path: object, **kw: object) -> None:
        renderer = any("perception/viz/" in f.filename for f in inspect.stack()[1:6])
        opened.append(("render " if renderer else "") + str(path))
        real_init(self, path, **kw)  # type: ignore[arg-type]

    def counting_assemble(cls: type[Session], *args: object, **kw: object) -> Session:
        assembled.append(args[0])
        return real_assemble(cls, *args, **kw)  # type: ignore[no-any-return]

    monkeypatch.setattr(DriveReader, "__init__", counting_init)
    monkeypatch.setattr(Session, "assemble", classmethod(counting_assemble))
    drive = write_drive(tmp_path / "drive.mcap", FRAMES)
    profile = write_profile(tmp_path / "p.yaml", profile_data(triton.grpc_url, SLEEPY))
    argv = ["replay", str(drive), "--config", str(profile), "--out", str(tmp_path / "out"), "--rate", "lockstep"]
    assert main([*argv, "--strict", "--no-progress", "--no-fused-mcap"]) == 0
    assert [p for p in opened if not p.startswith("render ")] == [str(drive)], opened
    assert len(assembled) == 1


def test_compare_modes_names_the_modes_file_among_those_written(
    triton: EmbeddedTriton, urban_drive: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # --compare-modes wrote DIR/modes.json, but the closing "wrote ..." line left it out.
    out = tmp_path / "out"
    argv = ["replay", str(urban_drive), "--url", triton.grpc_url, "--rate", "lockstep", "--no-progress"]
    assert main([*argv, "--compare-modes", "--no-fused-mcap", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    wrote = next(line for line in printed.splitlines() if line.startswith("wrote "))
    assert (out / "modes.json").is_file()
    names = ("detections.jsonl", "report.json", "report.md", "modes.json")
    assert wrote == "wrote " + ", ".join(str(out / name) for name in names)


def test_a_model_not_in_the_repository_is_said_before_the_server_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The embedded server started, then the runtime waited the profile's whole start-up timeout (90 s by
    # default) for a model its repository does not hold, to say 'not ready after 90 s: model is not ready'.
    repo = tmp_path / "models"
    repo.mkdir()
    for model in ("sleepy_radar", "sleepy_camera"):
        (repo / model).symlink_to(TEST_MODELS / model, target_is_directory=True)
    models = {"lidar_top": "no_such_lidar", "radar_front": "sleepy_radar", "cam_front": "sleepy_camera"}
    server = {"url": "embedded", "models": [str(repo)], "startup_timeout_s": 30}
    profile = write_profile(tmp_path / "p.yaml", profile_data("embedded", models, server=server))
    drive = write_drive(tmp_path / "drive.mcap", FRAMES)
    out = tmp_path / "out"
    assert _replay(drive, profile, out) == 2
    err = capsys.readouterr().err
    assert err == (
        f"perception replay: error: {repo}: model 'no_such_lidar' of sensor 'lidar_top' is not in this model "
        "repository (models there: sleepy_camera, sleepy_radar)\n"
    )
    assert not out.exists() or not any(out.iterdir())
