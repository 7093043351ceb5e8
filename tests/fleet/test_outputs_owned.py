"""The fleet writes only what it owns (issue 33): an OUT holding other files is refused unless --force,
and a directory that is not a fleet drive output is never replaced (a drive named ``models.mcap`` with
``--out .`` leaves ``./models`` as it was)."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from reliability_helpers import profile_data, write_drive, write_profile

from perception.cli import main
from perception.errors import FleetError
from perception.fleet._outputs import (
    DRIVE_MARKER,
    OUT_MARKER,
    STAGING,
    STAGING_MARKER,
    SUMMARY_FILE,
    claim_output,
    clear_staging,
    earlier_drives,
    publish,
    staging_dir,
)
from perception.fleet._worker import DriveJob, DriveWorker, WorkerSettings
from perception.server import EmbeddedTriton

SLEEPY = {"lidar_top": "sleepy_lidar", "radar_front": "sleepy_radar", "cam_front": "sleepy_camera"}


def _models(root: Path) -> Path:
    models = root / "models"
    (models / "lidar_detector" / "1").mkdir(parents=True)
    (models / "lidar_detector" / "config.pbtxt").write_text("backend: python\n")
    return models


def _tree(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


def test_publish_never_replaces_a_directory_that_is_not_a_drive_output(tmp_path: Path) -> None:
    models = _models(tmp_path)
    before = _tree(models)
    staging = staging_dir(tmp_path, "models", 1)
    (staging / "report.json").write_text("{}")
    with pytest.raises(FleetError, match="is not a fleet drive output") as info:
        publish(staging, models)
    assert info.value.file == str(models) and _tree(models) == before
    # a symlink named like the drive is not replaced (nor followed) either
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    with pytest.raises(FleetError):
        publish(staging, tmp_path / "link")
    assert (tmp_path / "link").is_symlink()


def test_publish_replaces_its_own_output_and_an_earlier_runs(tmp_path: Path) -> None:
    for attempt in (1, 2):
        staging = staging_dir(tmp_path, "a", attempt)
        (staging / "n").write_text(str(attempt))
        publish(staging, tmp_path / "a")
        assert (tmp_path / "a" / "n").read_text() == str(attempt) and (tmp_path / "a" / DRIVE_MARKER).is_file()
    legacy = tmp_path / "b"  # written before the markers: it has the drive summary
    legacy.mkdir()
    (legacy / SUMMARY_FILE).write_text("{}")
    staging = staging_dir(tmp_path, "b", 1)
    publish(staging, legacy)
    assert (legacy / DRIVE_MARKER).is_file() and not (legacy / SUMMARY_FILE).exists()


def test_earlier_drives_are_the_drive_outputs_this_run_does_not_replay(tmp_path: Path) -> None:
    for name in ("a", "b", "c"):
        (tmp_path / name).mkdir()
    (tmp_path / "a" / DRIVE_MARKER).write_text("")
    (tmp_path / "b" / DRIVE_MARKER).write_text("")
    (tmp_path / "c" / SUMMARY_FILE).write_text("{}")  # a run's before the markers
    (tmp_path / "notes").mkdir()  # the user's: not a drive output
    assert earlier_drives(tmp_path, ["a"]) == ["b", "c"]


def test_claim_output(tmp_path: Path) -> None:
    claim_output(tmp_path / "new")
    assert (tmp_path / "new" / OUT_MARKER).is_file()
    claim_output(tmp_path / "new")  # ours already
    (tmp_path / "empty").mkdir()
    claim_output(tmp_path / "empty")
    busy = tmp_path / "busy"
    _models(busy)
    with pytest.raises(FleetError, match=r"holds other files \(models\).*--force") as info:
        claim_output(busy)
    assert info.value.file == str(busy) and not (busy / OUT_MARKER).exists()
    claim_output(busy, force=True)
    assert (busy / OUT_MARKER).is_file()
    old = tmp_path / "old_run"  # a fleet run from before the markers: its report
    old.mkdir()
    (old / "fleet.json").write_text("{}")
    (old / "a").mkdir()
    claim_output(old)
    (tmp_path / "file").write_text("x")
    with pytest.raises(FleetError, match="not a directory"):
        claim_output(tmp_path / "file", force=True)


def test_force_writes_beside_a_user_s_dot_directories_and_removes_only_its_own_staging(tmp_path: Path) -> None:
    # issue 45: `fleet --force` removed OUT/.staging after claiming OUT, whoever had made it
    out = tmp_path / "out"
    for user in (".staging", ".git", ".cache/sub"):
        (out / user).mkdir(parents=True)
        (out / user / "notes.txt").write_text(f"{user} is mine")
    before = _tree(out)
    claim_output(out, force=True)  # what the driver does at the start of a run,
    clear_staging(out)
    staging = staging_dir(out, "a", 1)  # a worker's attempt,
    assert staging.parent == out / STAGING and (out / STAGING / STAGING_MARKER).is_file()
    (staging / "detections.jsonl").write_text("{}\n")
    publish(staging, out / "a")
    staging_dir(out, "a", 2)  # an attempt republished over the first one, another one left unfinished
    publish(staging_dir(out, "a", 3), out / "a")
    clear_staging(out)  # and what it does at the end
    assert not (out / STAGING).exists()
    assert {k: v for k, v in _tree(out).items() if k.split("/")[0].startswith(".") and k != OUT_MARKER} == before
    assert sorted(p.name for p in out.iterdir()) == sorted([".staging", ".git", ".cache", OUT_MARKER, "a"])


def test_a_directory_named_like_the_staging_is_not_the_tool_s_unless_marked(tmp_path: Path) -> None:
    out = tmp_path / "out"
    (out / STAGING).mkdir(parents=True)  # the user's, whatever its name
    (out / STAGING / "notes.txt").write_text("mine")
    with pytest.raises(FleetError, match="not the fleet's staging directory") as info:
        claim_output(out, force=True)
    assert info.value.file == str(out / STAGING)
    clear_staging(out)
    with pytest.raises(FleetError, match="not the fleet's staging directory"):
        staging_dir(out, "a", 1)
    assert (out / STAGING / "notes.txt").read_text() == "mine" and not (out / STAGING / "a.1").exists()


def test_fleet_out_dot_beside_models_is_refused_without_starting_a_cluster(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    models = _models(tmp_path)
    before = _tree(models)
    drives = tmp_path / "drives"
    drives.mkdir()
    write_drive(drives / "models.mcap", 3)
    monkeypatch.chdir(tmp_path)
    code = main(["fleet", "drives", "--out", ".", "--no-progress"])
    err = capsys.readouterr().err
    assert code != 0 and "not a fleet output" in err and "--force" in err, err
    assert _tree(models) == before and not (tmp_path / OUT_MARKER).exists()


@pytest.mark.anyio
async def test_a_drive_named_like_a_foreign_directory_fails_alone_and_leaves_it_untouched(
    triton: EmbeddedTriton, tmp_path: Path
) -> None:
    # `perception fleet drives/ --out . --force` beside models/: the worker replays models.mcap, then
    # refuses to replace ./models; the drive is reported failed, naming it.
    models = _models(tmp_path)
    before = _tree(models)
    (tmp_path / "drives").mkdir()
    drive = write_drive(tmp_path / "drives" / "models.mcap", 5)
    profile = write_profile(tmp_path / "p.yaml", profile_data(triton.grpc_url, SLEEPY))
    claim_output(tmp_path, force=True)
    settings = WorkerSettings(profile=str(profile), fused_mcap=False, report_md=False)
    worker = DriveWorker([triton.grpc_url], settings, str(profile))
    with anyio.fail_after(150):  # watchdog (the worker's close too)
        try:
            summary = await worker.replay(DriveJob("models", str(drive), str(tmp_path), 1))
        finally:
            await worker.close()
    assert summary.status == "failed" and "is not a fleet drive output" in str(summary.error), summary
    assert str(models) in str(summary.error)
    assert _tree(models) == before
