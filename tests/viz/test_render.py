"""The PNGs show the boxes on the right objects: drawn colours checked against projected ground truth."""

from __future__ import annotations

import dataclasses
import io
import json
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest
from PIL import Image
from viz_fixtures import ALL_KINDS, record

from perception.cli import main
from perception.drives import DriveReader
from perception.fusion import bev_corners, box_corners, invert_transform, project_points, transform_points
from perception.kinds import CAMERA, LIDAR, register_kind, unregister_kind
from perception.metrics import frame_record
from perception.types import FrameResult, GroundTruthObject, ImageSample, PointCloudSample
from perception.viz import load_frame_views, render_frame
from perception.viz._load import FrameView
from perception.viz._palette import COMBINATIONS
from perception.viz._render import RenderedView, render_bev, render_camera

FUSED = COMBINATIONS[ALL_KINDS]
FRAME = 2


@pytest.fixture(scope="module")
def replay_dir(recorded: tuple[Path, list[FrameResult]]) -> Path:
    return recorded[0]


@pytest.fixture(scope="module")
def frame(replay_dir: Path) -> FrameView:
    (view,) = load_frame_views(replay_dir, [FRAME])
    return view


def _pixels(path: Path) -> npt.NDArray[np.float64]:
    with Image.open(path) as img:
        return np.asarray(img.convert("RGB"), dtype=np.float64) / 255.0


def _hits(img: npt.NDArray[np.float64], pts: npt.NDArray[np.float64], rgb: tuple[float, ...], radius: int = 2) -> float:
    """Share of the pixel positions ``pts`` (column, row) with a pixel of colour ``rgb`` within ``radius``."""
    close = np.abs(img - np.asarray(rgb)).max(axis=2) < 0.12
    hits = [
        close[max(r - radius, 0) : r + radius + 1, max(c - radius, 0) : c + radius + 1].any()
        for c, r in np.rint(pts).astype(int)
    ]
    return float(np.mean(hits)) if hits else float("nan")


def _edge_samples(
    a: npt.NDArray[np.float64], b: npt.NDArray[np.float64], step_px: float = 3.0
) -> npt.NDArray[np.float64]:
    n = max(int(np.linalg.norm(b - a) / step_px), 1)
    t = np.linspace(0.1, 0.9, n)[:, None]  # away from the corners
    return a + t * (b - a)


_EDGES = [(0, 1), (1, 2), (2, 3), (3, 0), (4, 5), (5, 6), (6, 7), (7, 4), (0, 4), (1, 5), (2, 6), (3, 7)]


def _camera_edge_pixels(
    view: RenderedView, frame: FrameView, obj: GroundTruthObject, sensor: str
) -> npt.NDArray[np.float64]:
    """Pixels along the projected edges of a ground-truth box (edges well in front of the camera only)."""
    spec = frame.specs[sensor]
    assert spec.calibration is not None
    cam = transform_points(invert_transform(spec.extrinsic.matrix()), box_corners([[*obj.center, *obj.size, obj.yaw]]))[
        0
    ]
    if (cam[:, 2] < 1.0).any():
        return np.zeros((0, 2))
    uv = project_points(spec.calibration.matrix(), cam)
    pts = np.concatenate([_edge_samples(uv[i], uv[j]) for i, j in _EDGES])
    w, h = spec.calibration.width, spec.calibration.height
    inside = (pts[:, 0] > 3) & (pts[:, 0] < w - 3) & (pts[:, 1] > 20) & (pts[:, 1] < h - 3)  # not the title
    return view.to_pixel(pts[inside])


def _visible(frame: FrameView, sensor: str, min_px: float = 20.0) -> list[GroundTruthObject]:
    """Ground-truth objects whose projected box in ``sensor`` is big enough to check edge by edge."""
    assert frame.ground_truth is not None
    spec = frame.specs[sensor]
    assert spec.calibration is not None
    out = []
    for obj in frame.ground_truth.objects:
        cam = transform_points(
            invert_transform(spec.extrinsic.matrix()), box_corners([[*obj.center, *obj.size, obj.yaw]])
        )[0]
        if (cam[:, 2] < 1.0).any():
            continue
        uv = project_points(spec.calibration.matrix(), cam)
        lo, hi = uv.min(axis=0), uv.max(axis=0)
        if hi[1] - lo[1] >= min_px and hi[0] > 0 and lo[0] < spec.calibration.width:
            out.append(obj)
    return out


def test_camera_png_draws_fused_boxes_on_the_projected_ground_truth(frame: FrameView, tmp_path: Path) -> None:
    sensor = "cam_front"
    objects = _visible(frame, sensor)
    assert objects, "the test frame must show some objects in the front camera"
    view = render_camera(frame, sensor, tmp_path / "cam.png")
    img = _pixels(view.path)
    spec = frame.specs[sensor]
    assert spec.calibration is not None
    assert img.shape[:2] == (spec.calibration.height, spec.calibration.width)  # pixel-exact image
    np.testing.assert_allclose(view.affine, [[1, 0, 0], [0, 1, 0]], atol=1e-6)
    for obj in objects:
        pts = _camera_edge_pixels(view, frame, obj, sensor)
        assert _hits(img, pts, FUSED) > 0.9, f"object {obj.track_id} ({obj.label}) not outlined"
    assert (np.abs(img - FUSED).max(axis=2) < 0.12).mean() < 0.1  # the colour is on the boxes, not everywhere

    # the same frame without the nearest object: its outline is gone
    target = min(objects, key=lambda o: float(np.hypot(o.center[0], o.center[1])))
    kept = tuple(d for d in frame.detections if d.id != target.track_id)
    assert len(kept) == len(frame.detections) - 1
    without = render_camera(dataclasses.replace(frame, detections=kept), sensor, tmp_path / "without.png")
    assert _hits(_pixels(without.path), _camera_edge_pixels(without, frame, target, sensor), FUSED) < 0.5


def test_bev_png_draws_fused_boxes_at_the_ground_truth(frame: FrameView, tmp_path: Path) -> None:
    range_m = 40.0
    view = render_bev(frame, tmp_path / "bev.png", range_m=range_m)
    img = _pixels(view.path)
    assert frame.ground_truth is not None
    near = [o for o in frame.ground_truth.objects if max(abs(o.center[0]), abs(o.center[1])) < range_m - 5]
    assert len(near) >= 3
    for obj in near:
        c = bev_corners(obj.center[:2], obj.size[:2], obj.yaw)[0]
        pts = view.to_pixel(np.concatenate([_edge_samples(c[i], c[(i + 1) % 4], 2.0) for i in range(4)]))
        assert _hits(img, pts, FUSED) > 0.9, f"object {obj.track_id} ({obj.label}) not outlined in the BEV"
    # forward is up and left is left: an object ahead is above the ego, one on the left left of it
    ego = view.to_pixel([[0.0, 0.0]])[0]
    ahead, left = view.to_pixel([[10.0, 0.0]])[0], view.to_pixel([[0.0, 10.0]])[0]
    assert ahead[1] < ego[1] and abs(ahead[0] - ego[0]) < 1e-6
    assert left[0] < ego[0] and abs(left[1] - ego[1]) < 1e-6

    # without detections the outlines are the ground truth's (white), not the fused colour
    bare = render_bev(dataclasses.replace(frame, detections=()), tmp_path / "bare.png", range_m=range_m)
    bare_img = _pixels(bare.path)
    obj = near[0]
    c = bev_corners(obj.center[:2], obj.size[:2], obj.yaw)[0]
    pts = bare.to_pixel(np.concatenate([_edge_samples(c[i], c[(i + 1) % 4], 2.0) for i in range(4)]))
    assert _hits(bare_img, pts, FUSED) < 0.2
    assert _hits(bare_img, pts, (1.0, 1.0, 1.0)) > 0.5  # dashed


def test_frame_has_the_samples_the_runtime_used(frame: FrameView, small_drive: Path) -> None:
    assert set(frame.samples) == {"lidar_top", "cam_front", "cam_back", "radar_front", "radar_rear"}
    assert frame.frame_id == FRAME and frame.status == "ok"
    assert {"cam_front", "cam_back"} <= set(frame.camera_detections)
    with DriveReader(small_drive) as reader:
        gt = reader.ground_truth()[FRAME]
    assert frame.t_ns == gt.t_ns and frame.ground_truth == gt
    assert [d.center for d in frame.detections] == [o.center for o in gt.objects]
    for name, sample in frame.samples.items():
        assert sample.t_ns <= frame.t_ns + 30_000_000, name


def test_render_from_jsonl_and_drive(frame: FrameView, small_drive: Path, replay_dir: Path, tmp_path: Path) -> None:
    """Without fused.mcap: detections.jsonl (raw outputs give the camera boxes) + the drive from report.json."""
    from viz_fixtures import gt_results

    with DriveReader(small_drive) as reader:
        results = gt_results(reader)
    with (tmp_path / "detections.jsonl").open("w") as f:
        for r in results:
            f.write(json.dumps(frame_record(r, include_outputs=True)) + "\n")
        f.write('{"frame_id": 99, "t_n')  # an interrupted last line is skipped
    (tmp_path / "report.json").write_text(json.dumps({"drive": str(small_drive)}))
    (view,) = load_frame_views(tmp_path, [FRAME])
    assert view.t_ns == frame.t_ns and view.source.endswith("detections.jsonl")
    assert [(d.id, d.label) for d in view.detections] == [(d.id, d.label) for d in frame.detections]
    np.testing.assert_allclose([d.center for d in view.detections], [d.center for d in frame.detections], atol=1e-3)
    assert set(view.samples) == set(frame.samples)
    np.testing.assert_allclose(
        view.camera_detections["cam_front"].boxes, frame.camera_detections["cam_front"].boxes, atol=1e-3
    )
    paths = [v.path.name for v in render_frame(view, tmp_path / "png")]
    assert sorted(paths) == ["frame_000002_bev.png", "frame_000002_cam_back.png", "frame_000002_cam_front.png"]


def test_render_cli(replay_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["render", str(replay_dir), "--frame", "1", "--out", str(tmp_path), "--range", "30"])
    assert code == 0
    printed = capsys.readouterr().out.split()
    assert sorted(Path(p).name for p in printed) == [
        "frame_000001_bev.png",
        "frame_000001_cam_back.png",
        "frame_000001_cam_front.png",
    ]
    assert all(Path(p).stat().st_size > 10_000 for p in printed)
    with pytest.raises(SystemExit):
        main(["render", "--help"])
    assert "frame_000010_bev.png" in capsys.readouterr().out  # the help names the files as written


def test_a_png_the_file_system_refuses_is_a_run_time_failure_naming_it(
    replay_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # It was a usage error (exit 2) naming only the folder; a file-system error at run time is exit 1
    # naming the file in every other command.
    blocked = tmp_path / "frame_000001_bev.png"
    blocked.mkdir()  # the PNG's name taken by a directory: the write fails (root or not)
    code = main(["render", str(replay_dir), "--frame", "1", "--out", str(tmp_path)])
    out, err = capsys.readouterr()
    assert code == 1
    assert err.startswith(f"perception render: error: {blocked}: ") and err.count("\n") == 1
    assert "Traceback" not in err and out == ""


def test_a_truncated_fused_mcap_is_said_damaged_naming_it(
    small_drive: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A frame lost to the damage was 'no frame N in fused.mcap (no frames)', exit 2: a usage error, as if
    # the frame id were wrong. Now the damage is said as replay and info say it (exit 3, file and offset).
    fused = tmp_path / "fused.mcap"
    record(small_drive, tmp_path, chunk_size=32 * 1024)  # many chunks, as a long replay's
    data = fused.read_bytes()
    fused.write_bytes(data[: len(data) // 2])  # the replay killed half-way
    code = main(["render", str(tmp_path), "--frame", "4", "--out", str(tmp_path / "png")])
    err = capsys.readouterr().err.splitlines()
    assert code == 3
    assert err[-1].startswith(f"perception render: error: {fused}: drive damaged: truncated at byte ")
    assert "; frame 4 not in its readable part (frames 0..1) (offset=" in err[-1]
    assert "Traceback" not in "\n".join(err)
    assert main(["render", str(tmp_path), "--frame", "1", "--out", str(tmp_path / "png")]) == 0  # readable: drawn
    fused.write_bytes(b"\x00 junk, not an MCAP file" * 100)  # no MCAP at all: what replay and info say of it
    assert main(["render", str(tmp_path), "--frame", "4"]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err[-1] == f"perception render: error: {fused}: not an MCAP file (bad magic)"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["{missing}", "--frame", "1"], "replay output directory not found"),
        (["{dir}", "--frame", "99"], "no frame 99 in"),
        (["{empty}", "--frame", "0"], "no fused.mcap or detections.jsonl here"),
        # a file given for the directory (its fused.mcap, the drive) was "replay output directory not found"
        (["{fused}", "--frame", "1"], "fused.mcap: is a file, expected a replay output directory: pass the directory"),
        (["{drive}", "--frame", "1"], "drive.mcap: is a file, expected a replay output directory (perception replay"),
    ],
)
def test_render_cli_user_errors(
    argv: list[str], message: str, replay_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "empty").mkdir()
    (tmp_path / "drive.mcap").write_bytes(b"a file\n")
    paths = {"missing": str(tmp_path / "nope"), "dir": str(replay_dir), "empty": str(tmp_path / "empty")}
    paths |= {"fused": str(replay_dir / "fused.mcap"), "drive": str(tmp_path / "drive.mcap")}
    code = main(["render", *(a.format(**paths) for a in argv)])
    err = capsys.readouterr().err
    assert code == 2
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


def test_a_registered_image_kind_and_point_kind_render(frame: FrameView, tmp_path: Path) -> None:
    """A 16-bit thermal image gets its own view (as its top 8 bits of grey); a point kind without
    radial velocity is drawn as points in the BEV, not as radar arrows."""
    cam = next(n for n, s in frame.specs.items() if s.kind == "camera")
    lidar = next(n for n, s in frame.specs.items() if s.kind == "lidar")
    cal = frame.specs[cam].calibration
    assert cal is not None
    hot = np.full((cal.height, cal.width), 20000, np.uint16)
    hot[: cal.height // 2] = 50000
    buf = io.BytesIO()
    Image.fromarray(hot).save(buf, format="PNG")
    register_kind(dataclasses.replace(CAMERA, name="night_camera"))
    register_kind(dataclasses.replace(LIDAR, name="flash_lidar", fusion=None))
    try:
        base = frame.samples[lidar]
        assert isinstance(base, PointCloudSample)
        specs = {
            **frame.specs,
            "night": dataclasses.replace(frame.specs[cam], name="night", kind="night_camera"),
            "flash": dataclasses.replace(frame.specs[lidar], name="flash", kind="flash_lidar"),
        }
        samples = {
            **frame.samples,
            "night": ImageSample("night", frame.t_ns, "night", buf.getvalue(), format="png"),
            "flash": dataclasses.replace(base, sensor="flash"),
        }
        views = render_frame(dataclasses.replace(frame, specs=specs, samples=samples), tmp_path)
    finally:
        unregister_kind("night_camera")
        unregister_kind("flash_lidar")
    night = next(v for v in views if v.path.name.endswith("_night.png"))
    img = _pixels(night.path)
    top, bottom = img[: img.shape[0] // 4].mean(), img[-img.shape[0] // 4 :].mean()
    assert top > bottom + 0.3  # the warm half is brighter (50000 >> 8 = 195 against 78)


def test_a_fused_mcap_cut_before_its_channels_is_said_damaged_naming_it(
    small_drive: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Cut within its first chunk (the replay killed at once): no channel is readable, which is the damage's
    # doing -- said as damage, exit 3, naming the file, not as a drive missing a sensor's channel (exit 1).
    fused = tmp_path / "fused.mcap"
    record(small_drive, tmp_path)
    data = fused.read_bytes()
    first_chunk = data.index(b"\x06", data.index(b"perception.drive"))  # (its opcode after the metadata records)
    for cut in (first_chunk, first_chunk + 1_000):
        fused.write_bytes(data[:cut])
        assert main(["render", str(tmp_path), "--frame", "1", "--out", str(tmp_path / "png")]) == 3
        err = capsys.readouterr().err
        assert err.startswith(f"perception render: error: {fused}: ") and "drive damaged: truncated at byte " in err
        assert err.count("\n") == 1 and "Traceback" not in err, err


@pytest.mark.parametrize(
    ("report", "message"),
    [
        ('{"drive": "x.mcap", ', "report.json: not valid JSON"),
        ('{"schema_version": 99, "drive": "x.mcap"}', "report.json: schema_version: written by a newer version"),
        ('{"drive": 7}', "report.json: drive: expected a string"),
    ],
)
def test_render_names_a_damaged_or_newer_report_json(
    report: str, message: str, small_drive: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without fused.mcap the drive comes from report.json: one that cannot be read is said as such (it was
    'no drive named in report.json: pass --drive', as if there were none)."""
    from viz_fixtures import gt_results

    with DriveReader(small_drive) as reader:
        results = gt_results(reader)
    (tmp_path / "detections.jsonl").write_text("".join(json.dumps(frame_record(r)) + "\n" for r in results))
    (tmp_path / "report.json").write_text(report)
    code = main(["render", str(tmp_path), "--frame", str(FRAME)])
    err = capsys.readouterr().err
    assert code == 2
    assert message in err and str(tmp_path / "report.json") in err
    assert err.count("\n") == 1 and "Traceback" not in err


def _replayed(drive: Path, out: Path) -> None:
    """``out/detections.jsonl`` as a replay of ``drive`` writes it, its frames' detections the ground truth."""
    from viz_fixtures import gt_results

    with DriveReader(drive) as reader:
        results = gt_results(reader)
    (out / "detections.jsonl").write_text("".join(json.dumps(frame_record(r)) + "\n" for r in results))


def test_a_drive_named_in_report_json_that_is_not_there_says_where_it_came_from(
    small_drive: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # report.json names the drive as replay was given it (often relative to where replay ran): rendering
    # from elsewhere said only 'd1/a.mcap: drive not found', without saying where that name came from.
    _replayed(small_drive, tmp_path)
    (tmp_path / "report.json").write_text(json.dumps({"drive": "drives/moved.mcap"}))
    code = main(["render", str(tmp_path), "--frame", str(FRAME)])
    err = capsys.readouterr().err
    assert code == 2
    assert err == (
        f"perception render: error: drives/moved.mcap: drive not found (named in {tmp_path / 'report.json'}): "
        "pass --drive\n"
    )


def test_render_with_a_drive_that_was_not_replayed_is_refused(
    small_drive: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # --drive naming another drive of the same rig (another seed) rendered that drive's points under the
    # replay's boxes, the cameras left out (none of the frame's samples found), exit 0. Now refused.
    from perception.sim import generate_drive

    _replayed(small_drive, tmp_path)
    other = tmp_path / "other.mcap"
    generate_drive(other, scenario="urban", seed=8, duration_s=0.5)
    code = main(["render", str(tmp_path), "--frame", str(FRAME), "--drive", str(other), "--out", str(tmp_path / "png")])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.startswith(f"perception render: error: {other}: has no ") and "not the drive that was replayed" in err
    assert err.count("\n") == 1, err
    assert not list((tmp_path / "png").glob("*.png"))


def test_a_camera_image_that_does_not_decode_is_left_out_and_the_frame_drawn(
    frame: FrameView, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # The runtime records a frame whose camera image did not decode (the camera's status says so): rendering it
    # raised, and report.md was never written (a half-filled frames/ folder left behind).
    cams = [n for n, s in frame.samples.items() if isinstance(s, ImageSample)]
    assert len(cams) >= 2
    broken = dataclasses.replace(frame.samples[cams[0]], data=b"\xff\xd8\xff\xe0 a truncated jpeg")
    views = render_frame(dataclasses.replace(frame, samples={**frame.samples, cams[0]: broken}), tmp_path)
    assert [v.name for v in views] == [v.name for v in render_frame(frame, tmp_path / "whole") if v.name != cams[0]]
    assert (
        f"camera {cams[0]} not drawn" in caplog.text
        and not (tmp_path / f"frame_{frame.frame_id:06d}_{cams[0]}.png").exists()
    )
