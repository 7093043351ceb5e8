"""Bad input: a clear error or a counted, reported skip -- never a crash, never a silent loss.

Drives that are malformed, truncated, damaged mid-file or carry the wrong schema; point clouds full of
NaN/inf or empty (through the REAL reference models); images of zero or huge size; wrong camera
calibrations; bad YAML; models whose tensor contract is wrong; timestamps that repeat or go back.
Property-based tests: decoding arbitrary point-cloud and image bytes raises nothing but DriveError /
InputError. (Fusion geometry properties live in tests/fusion/test_geometry.py.)
"""

from __future__ import annotations

import io
import json
import struct
import tempfile
import threading
import warnings
import zlib
from pathlib import Path
from typing import Any

import anyio
import numpy as np
import numpy.typing as npt
import pytest
from foxglove_schemas_protobuf.LaserScan_pb2 import LaserScan
from foxglove_schemas_protobuf.PackedElementField_pb2 import PackedElementField
from foxglove_schemas_protobuf.PointCloud_pb2 import PointCloud
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mcap.writer import CompressionType
from mcap.writer import Writer as McapWriter
from mcap_protobuf.schema import register_schema
from PIL import Image
from reliability_helpers import (
    CALIBRATION,
    LIDAR_FIELDS,
    MS,
    RADAR_FIELDS,
    T0,
    assert_bounded,
    assert_consecutive_records,
    assert_one_record_per_frame,
    make_frame,
    profile_data,
    read_records,
    rig,
    runtime_config,
    write_drive,
    write_profile,
)

from perception import _imageio
from perception._imageio import encode_jpeg
from perception.cli._main import main as cli_main
from perception.config import RuntimeConfig, SensorConfig, TriggerConfig, from_data
from perception.drives import DriveReader
from perception.drives import _codec as codec
from perception.errors import DriveError, InputError, ModelContractError
from perception.fusion import Fuser
from perception.metrics import LatencyAccumulator, frame_record
from perception.replay import ReplayOptions, replay_drive
from perception.scheduler import FrameAssembler, Runtime
from perception.server import EmbeddedTriton
from perception.types import (
    CameraCalibration,
    Frame,
    FrameStatus,
    ImageSample,
    PointCloudSample,
    Sample,
    SensorSpec,
    SensorStatus,
)

BUNDLED_DRIVE = Path(__file__).resolve().parents[2] / "replay_data" / "urban_seed7_10s.mcap"

SLEEPY = {"lidar_top": "sleepy_lidar", "radar_front": "sleepy_radar", "cam_front": "sleepy_camera"}


def replay_cli(drive: Path, out: Path, *extra: str) -> int:
    return cli_main(["replay", str(drive), "--out", str(out), "--no-progress", "--no-fused-mcap", *extra])


def one_error_line(err: str) -> str:
    assert "Traceback" not in err, err
    lines = [line for line in err.splitlines() if ": error: " in line]
    assert len(lines) == 1, err
    return lines[0]


# -- drives ---------------------------------------------------------------------------------------------


def _wrong_schema_drive(path: Path) -> str:
    """A drive whose lidar topic carries foxglove.LaserScan instead of foxglove.PointCloud."""
    lidar = rig()[0]
    with path.open("wb") as f:
        w = McapWriter(f, compression=CompressionType.NONE)
        w.start()
        w.add_metadata(codec.RIG_METADATA, codec.encode_rig([lidar]))
        channel = w.register_channel(lidar.topic, "protobuf", register_schema(w, LaserScan))
        w.add_message(channel, T0, LaserScan().SerializeToString(), T0)
        w.finish()  # type: ignore[no-untyped-call]
    return lidar.topic


def test_malformed_and_wrong_schema_drives_are_one_line_exit_1_a_damaged_one_exit_3(
    tmp_path: Path, small_drive: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A drive cut short is damaged, exit 3 as for every damaged drive (7952eb8: cut before its first message it
    # was exit 1, cut later exit 3); a file that is no MCAP, or of the wrong schema, is a bad input, exit 1.
    garbage = tmp_path / "garbage.mcap"
    garbage.write_bytes(b"PK\x03\x04 this is a zip file, not a drive" * 10)
    cut = tmp_path / "cut_early.mcap"
    cut.write_bytes(small_drive.read_bytes()[:300])  # magic and header, no complete record
    schema = tmp_path / "schema.mcap"
    topic = _wrong_schema_drive(schema)
    for drive, expected, exit_code in (
        (garbage, "not an MCAP file", 1),
        (cut, "truncated", 3),
        (schema, "foxglove.LaserScan", 1),
    ):
        # The drive is opened before any server is started: these fail in well under a second.
        code = replay_cli(drive, tmp_path / "out")
        line = one_error_line(capsys.readouterr().err)
        assert code == exit_code, line
        assert str(drive) in line and expected in line, line
    assert topic in line


def test_truncated_drive_replays_its_prefix_and_says_where_it_stopped(
    triton: EmbeddedTriton, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    drive = write_drive(tmp_path / "full.mcap", 30)
    cut = tmp_path / "cut.mcap"
    cut.write_bytes(drive.read_bytes()[: int(drive.stat().st_size * 0.6)])  # a recorder that died
    profile = write_profile(tmp_path / "p.yaml", profile_data(triton.grpc_url, SLEEPY))
    out = tmp_path / "out"
    code = replay_cli(cut, out, "--config", str(profile), "--rate", "max")
    line = one_error_line(capsys.readouterr().err)
    assert code == 3 and str(cut) in line and "truncated at byte" in line, line  # 3: drive damaged
    records = read_records(out / "detections.jsonl")
    assert 5 < len(records) < 30
    assert_consecutive_records(records)
    for r in records:  # the last sweep before the cut may lack its radar/camera samples: missing
        assert r["status"] == "ok" or {s["status"] for s in r["sensors"].values()} <= {"ok", "missing"}, r
    report = json.loads((out / "report.json").read_text())
    assert report["frames"] == len(records)
    assert "truncated at byte" in report["drive_truncated"]
    assert "last readable message t=" in report["drive_truncated"]


# A damaged chunk mid-drive (zeroed block, flipped bytes) is skipped and counted, the replay goes on
# with the chunks after it and exits 3: tests/reliability/test_damaged_drive.py.


# -- sensor data through the real models -----------------------------------------------------------------


Sweep = tuple[dict[str, SensorSpec], dict[str, npt.NDArray[np.float32]]]


@pytest.fixture(scope="module")
def real_sweep() -> Sweep:
    """The first lidar sweep and front radar scan of the bundled urban drive (cars in view), and their rig
    (read, not generated again: each drive is generated once)."""
    names = ("lidar_top", "radar_front")
    with DriveReader(BUNDLED_DRIVE) as reader:
        specs = {n: reader.rig[n] for n in names}
        points: dict[str, npt.NDArray[np.float32]] = {}
        for sample in reader.samples(sensors=names):
            assert isinstance(sample, PointCloudSample)
            points.setdefault(sample.sensor, np.ascontiguousarray(sample.points, dtype=np.float32))
    return specs, points


@pytest.mark.anyio
async def test_nan_inf_and_empty_point_clouds_through_the_reference_models(
    triton: EmbeddedTriton, real_sweep: Sweep
) -> None:
    cfg = runtime_config(
        triton.grpc_url,
        {"lidar_top": "lidar_detector", "radar_front": "radar_detector"},
        budget={"total_ms": 20000, "fusion_reserve_ms": 100},
        pipeline={"max_in_flight": 1, "queue_size": 0, "overflow": "block"},
        fusion={"enabled": True},
    )
    specs, real = real_sweep
    clouds: list[tuple[npt.NDArray[np.float32], npt.NDArray[np.float32]]] = []
    partly_broken: list[int] = []
    for fill in (np.nan, np.inf, -np.inf):
        # a real sweep with cars in it, a third of the returns broken: the rest must still be detected
        lidar, radar = real["lidar_top"].copy(), real["radar_front"].copy()
        lidar[::3] = fill
        radar[::2, :3] = fill
        partly_broken.append(len(clouds))
        clouds.append((lidar, radar))
        clouds.append((np.full((500, 4), fill, np.float32), np.full((10, 5), fill, np.float32)))  # all broken
    clouds.append((np.zeros((0, 4), np.float32), np.zeros((0, 5), np.float32)))  # empty
    frames = []
    for i, (lidar, radar) in enumerate(clouds):
        f = make_frame(i, ["lidar_top", "radar_front"])
        samples = {
            "lidar_top": PointCloudSample("lidar_top", f.t_ns, "lidar_top", lidar, LIDAR_FIELDS),
            "radar_front": PointCloudSample("radar_front", f.t_ns, "radar_front", radar, RADAR_FIELDS),
        }
        frames.append(type(f)(frame_id=i, t_ns=f.t_ns, samples=samples))
    with anyio.fail_after(120):
        async with Runtime(cfg, rig=specs, fusion=Fuser(cfg.fusion, specs)) as rt:
            results = [r async for r in rt.run(frames)]
    assert_one_record_per_frame(results, len(clouds))
    for r in results:
        assert r.status is FrameStatus.OK, [(s.sensor, s.status, s.error) for s in r.sensors.values()]
        json.dumps(frame_record(r, include_outputs=True), allow_nan=False)  # the record is valid JSON
        for d in r.detections:
            assert np.isfinite(d.center).all() and np.isfinite(d.size).all()
    # the finiteness checks above ran on real detections: every partly broken sweep still has its cars
    assert all(results[i].detections for i in partly_broken), [len(r.detections) for r in results]


def _chunk(kind: bytes, payload: bytes) -> bytes:
    body = kind + payload
    return struct.pack(">I", len(payload)) + body + struct.pack(">I", zlib.crc32(body) & 0xFFFFFFFF)


def _png(width: int, height: int, idat: bytes, *, after_idat: bytes = b"") -> bytes:
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)  # 8-bit RGB
    return b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", ihdr) + _chunk(b"IDAT", idat) + after_idat + _chunk(b"IEND", b"")


def test_a_png_whose_pixels_go_on_in_a_broken_chunk_is_that_camera_s_error() -> None:
    """Pillow reads a PNG's chunks while it decodes the pixels, and raises SyntaxError ("broken PNG
    file") for a chunk type that is not one: an input error like any other damage, not a traceback."""
    rows = b"".join(b"\x00" + bytes(range(24 * 3)) for _ in range(16))
    pixels = zlib.compress(rows)
    half = len(pixels) // 2
    data = _png(24, 16, pixels[:half], after_idat=_chunk(b"\x00\x01\x02\x03", pixels[half:]))
    with pytest.raises(InputError, match="broken PNG file") as info:
        _imageio.decode_image(data, sensor="cam_front")
    assert info.value.sensor == "cam_front"


def _png_header(width: int, height: int) -> bytes:
    """A PNG that declares a size but holds no pixels (decoders read the size first)."""
    return _png(width, height, zlib.compress(b""))


def _big_png(width: int, height: int) -> bytes:
    """A valid PNG, small to store and slow to decode (all black)."""
    row = b"\x00" * (1 + 3 * width)
    z = zlib.compressobj(1)
    return _png(width, height, b"".join(z.compress(row) for _ in range(height)) + z.flush())


@pytest.mark.parametrize(("width", "height"), [(10_000, 10_000), (9000, 100), (100, 9000)])
def test_an_image_over_the_limit_is_refused_from_its_header_without_a_warning(width: int, height: int) -> None:
    """Pillow warns from ~89 Mpx (its DecompressionBombWarning) and refuses only past twice that: the
    header's size is checked first, so an image over the limit is an error naming the sensor and nothing else."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(InputError, match=f"image of {width}x{height} exceeds the limit") as info:
            _imageio.decode_image(_png_header(width, height), sensor="cam_front")
    assert info.value.sensor == "cam_front"


@pytest.mark.anyio
async def test_zero_size_and_huge_images_are_that_cameras_error(triton: EmbeddedTriton) -> None:
    # what each is refused with: the intake check's reason (the runtime checks a frame's samples first), or the
    # camera's decode error (a header the check does not read)
    images = {
        "empty": (b"", "empty image data"),
        "zero width": (_png_header(0, 48), "image has zero size 0x48"),
        "over the pixel limit": (_png_header(10_000, 10_000), "image of 10000x10000 exceeds the limit"),
        "decompression bomb": (_png_header(40_000, 40_000), "image of 40000x40000 exceeds the limit"),
        "cut short": (b"\xff\xd8\xff garbage", "JPEG image does not end with its end-of-image marker"),
        "not an image": (b"\xff\xd8\xff garbage\xff\xd9", "image: "),
    }
    cfg = runtime_config(
        triton.grpc_url,
        {"lidar_top": "sleepy_lidar", "cam_front": "sleepy_camera"},
        pipeline={"queue_size": 0, "overflow": "block", "circuit": {"failure_threshold": 100}},
    )
    frames = [make_frame(i, ["lidar_top", "cam_front"], image=img) for i, (img, _) in enumerate(images.values())]
    with anyio.fail_after(60):
        async with Runtime(cfg) as rt:
            results = [r async for r in rt.run(frames)]
    assert_one_record_per_frame(results, len(images))
    assert_bounded(results, cfg)
    for (what, (_, said)), r in zip(images.items(), results, strict=True):
        cam = r.sensors["cam_front"]
        assert cam.status is SensorStatus.ERROR, what
        assert cam.error is not None and cam.error.startswith(f"cam_front: {said}"), (what, cam.error)
        assert r.status is FrameStatus.DEGRADED
        assert r.sensors["lidar_top"].status is SensorStatus.OK


@pytest.mark.anyio
async def test_an_image_slow_to_decode_does_not_hold_the_frame_past_its_deadline(
    triton: EmbeddedTriton, monkeypatch: pytest.MonkeyPatch
) -> None:
    big = _big_png(6000, 6000)  # 36 Mpx: under the limit, but decoding takes far longer than the budget
    # Its decode is held until the frame's result is back (bounded, so a runtime that waits for it
    # fails the test instead of hanging): no race with how long the decode takes on this machine.
    decoding, release, decoded = threading.Event(), threading.Event(), threading.Event()
    decode = _imageio.decode_image_scaled

    def held(data: bytes, **kwargs: Any) -> Any:
        if len(data) != len(big):
            return decode(data, **kwargs)
        decoding.set()
        release.wait(30)
        try:
            return decode(data, **kwargs)
        finally:
            decoded.set()

    monkeypatch.setattr(_imageio, "decode_image_scaled", held)
    cfg = runtime_config(
        triton.grpc_url,
        {"lidar_top": "sleepy_lidar", "cam_front": "sleepy_camera"},
        budget={"total_ms": 150, "fusion_reserve_ms": 10},
    )
    try:
        with anyio.fail_after(60):
            async with Runtime(cfg) as rt:
                r = await rt.process(make_frame(0, ["lidar_top", "cam_front"], image=big))
                # Abandoned at the deadline, not waited for: the frame is back while its decode still runs.
                still_decoding = decoding.is_set() and not decoded.is_set()
    finally:
        release.set()
    assert still_decoding
    assert r.sensors["cam_front"].status is SensorStatus.LATE


# -- calibration -------------------------------------------------------------------------------------------


def test_zero_calibration_is_a_drive_error_naming_the_camera(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    drive = write_drive(tmp_path / "k0.mcap", 5, calibration=CameraCalibration(64, 48, (0.0,) * 9))
    profile = write_profile(tmp_path / "p.yaml", profile_data("embedded", SLEEPY))  # never started
    code = replay_cli(drive, tmp_path / "out", "--config", str(profile))
    line = one_error_line(capsys.readouterr().err)
    assert code == 1
    assert str(drive) in line and "cam_front" in line and "not a pinhole matrix" in line, line


@pytest.mark.anyio
async def test_images_not_matching_their_calibration_are_counted_and_reported(
    triton: EmbeddedTriton, tmp_path: Path
) -> None:
    drive = write_drive(tmp_path / "mismatch.mcap", 10, image_hw=(24, 32))  # calibration says 64x48
    cfg = runtime_config(triton.grpc_url, SLEEPY, fusion={"enabled": True})
    out = tmp_path / "out"
    with anyio.fail_after(60):
        outcome = await replay_drive(drive, cfg, ReplayOptions(out_dir=out, report_md=False))
    assert outcome.report.image_size_mismatch == {"cam_front": 10}
    assert json.loads((out / "report.json").read_text())["image_size_mismatch"] == {"cam_front": 10}
    records = read_records(out / "detections.jsonl")
    assert len(records) == 10 and all(r["status"] == "ok" for r in records)


def test_calibration_is_checked_only_for_what_fusion_needs() -> None:
    # A real-world K with skew and a principal point anywhere is fine; zeros, NaN or a wrong last row not.
    # (The one check, CameraCalibration.problem, is the session's and the fuser's.)
    assert CALIBRATION.problem() is None
    assert CameraCalibration(64, 48, (500.0, 0.5, -3.0, 0.0, 510.0, 90.0, 0.0, 0.0, 1.0)).problem() is None
    for k in ((0.0,) * 9, (50.0, 0, 32, 0, float("nan"), 24, 0, 0, 1), (50.0, 0, 32, 0, 50, 24, 0, 0, 0)):
        assert CameraCalibration(64, 48, k).problem() is not None


# -- configuration and models ------------------------------------------------------------------------------


def test_bad_yaml_is_one_line_with_file_and_line_exit_2(
    small_drive: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    profile = tmp_path / "bad.yaml"
    profile.write_text("server:\n  url: embedded\nsensors: [\n  {name: lidar_top\n")
    code = replay_cli(small_drive, tmp_path / "out", "--config", str(profile))
    line = one_error_line(capsys.readouterr().err)
    assert code == 2 and str(profile) in line and "line " in line, line


def test_wrong_tensor_contract_is_one_line_naming_model_and_tensor(
    triton: EmbeddedTriton, small_drive: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    models = {"lidar_top": "sleepy_radar", "radar_front": "sleepy_radar"}  # a radar model for the lidar
    profile = write_profile(tmp_path / "p.yaml", profile_data(triton.grpc_url, models))
    code = replay_cli(small_drive, tmp_path / "out", "--config", str(profile))
    line = one_error_line(capsys.readouterr().err)
    assert code == 1 and "sleepy_radar" in line and "tensor=BOXES" in line, line


@pytest.mark.anyio
async def test_wrong_tensor_contract_error_carries_model_and_tensor(triton: EmbeddedTriton) -> None:
    cfg = runtime_config(triton.grpc_url, {"lidar_top": "sleepy_radar"})
    with anyio.fail_after(60), pytest.raises(ModelContractError) as info:
        async with Runtime(cfg):
            pass
    assert (info.value.model, info.value.tensor) == ("sleepy_radar", "BOXES"), info.value


# -- timestamps --------------------------------------------------------------------------------------------


def test_timestamps_going_backwards_or_repeating_are_dropped_and_counted() -> None:
    sensors = [SensorConfig("lidar_top", "lidar", "m"), SensorConfig("radar_front", "radar", "m")]
    asm = FrameAssembler(sensors, TriggerConfig(sensor="lidar_top"))

    def cloud(name: str, t: int) -> PointCloudSample:
        fields = LIDAR_FIELDS if name == "lidar_top" else RADAR_FIELDS
        return PointCloudSample(name, t, name, np.zeros((1, len(fields)), np.float32), fields)

    frames = []
    for name, t in [("lidar_top", 0), ("radar_front", 0), ("lidar_top", 100 * MS), ("lidar_top", 100 * MS)]:
        frames += asm.push(cloud(name, t))
    frames += asm.push(cloud("lidar_top", 50 * MS))  # back in time
    frames += asm.push(cloud("radar_front", 0))  # repeated
    frames += asm.push(cloud("lidar_top", 200 * MS))
    frames += asm.flush()
    assert [f.t_ns for f in frames] == [0, 100 * MS, 200 * MS]
    assert (asm.stats.out_of_order, asm.stats.duplicate) == (1, 2)


@pytest.mark.anyio
async def test_repeated_timestamps_in_a_drive_are_counted_in_the_report(triton: EmbeddedTriton, tmp_path: Path) -> None:
    drive = write_drive(tmp_path / "dup.mcap", 12, duplicate_lidar_at=(2, 5, 9))
    out = tmp_path / "out"
    with anyio.fail_after(60):
        await replay_drive(drive, runtime_config(triton.grpc_url, SLEEPY), ReplayOptions(out_dir=out, report_md=False))
    report = json.loads((out / "report.json").read_text())
    assert report["alignment"]["duplicate"] == 3
    assert report["alignment"]["out_of_order"] == 0
    assert report["frames"] == 12  # one frame per distinct sweep; the repeats are counted, not replayed
    assert_consecutive_records(read_records(out / "detections.jsonl"))


# -- property-based decoding -------------------------------------------------------------------------------

_FIELD_NAMES = st.sampled_from(["x", "y", "z", "intensity", "radial_velocity", "rcs", "ring", ""])


@st.composite
def point_clouds(draw: st.DrawFn) -> PointCloud:
    """Arbitrary foxglove.PointCloud messages: any fields, types, offsets, stride and data."""
    fields = [
        PackedElementField(
            name=draw(_FIELD_NAMES),
            offset=draw(st.integers(0, 40)),
            type=draw(st.integers(0, 9)),  # type: ignore[arg-type]
        )
        for _ in range(draw(st.integers(0, 7)))
    ]
    return PointCloud(
        frame_id=draw(st.sampled_from(["lidar_top", "elsewhere"])),
        point_stride=draw(st.integers(0, 48)),
        fields=fields,
        data=draw(st.binary(max_size=256)),
    )


def _drive_with_one_lidar_message(path: Path, payload: bytes) -> None:
    lidar = rig()[0]
    with path.open("wb") as f:
        w = McapWriter(f, compression=CompressionType.NONE)
        w.start()
        w.add_metadata(codec.RIG_METADATA, codec.encode_rig([lidar]))
        tf = codec.encode_tf_static(T0, [lidar])
        w.add_message(
            w.register_channel(codec.TF_STATIC_TOPIC, "protobuf", register_schema(w, type(tf))),
            T0,
            tf.SerializeToString(),
            T0,
        )
        channel = w.register_channel(lidar.topic, "protobuf", register_schema(w, PointCloud))
        w.add_message(channel, T0 + 1, payload, T0 + 1)
        w.finish()  # type: ignore[no-untyped-call]


def _read_all(payload: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "d.mcap"
        _drive_with_one_lidar_message(path, payload)
        try:
            with DriveReader(path) as reader:
                for sample in reader.samples():
                    assert isinstance(sample, PointCloudSample) and sample.points.shape[1] == 4
        except DriveError as exc:
            assert exc.file == str(path)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(msg=point_clouds())
def test_decoding_any_point_cloud_message_raises_only_drive_error(msg: PointCloud) -> None:
    _read_all(msg.SerializeToString())


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(payload=st.binary(max_size=300))
def test_decoding_arbitrary_message_bytes_raises_only_drive_error(payload: bytes) -> None:
    _read_all(payload)


_rng = np.random.default_rng(0)
_JPEG = encode_jpeg(_rng.integers(0, 255, (16, 24, 3), dtype=np.uint8))
_buf = io.BytesIO()
Image.fromarray(_rng.integers(0, 255, (16, 24, 3), dtype=np.uint8)).save(_buf, format="PNG")
_PNG = _buf.getvalue()


@st.composite
def damaged_images(draw: st.DrawFn) -> bytes:
    """Valid JPEG/PNG files with bytes overwritten and/or cut short."""
    data = bytearray(draw(st.sampled_from([_JPEG, _PNG])))
    for _ in range(draw(st.integers(0, 8))):
        data[draw(st.integers(0, len(data) - 1))] = draw(st.integers(0, 255))
    return bytes(data[: draw(st.integers(0, len(data)))])


@settings(max_examples=300, deadline=None)
@given(data=st.one_of(st.binary(max_size=200), damaged_images()))
def test_decoding_any_image_bytes_raises_only_input_error(data: bytes) -> None:
    from perception.types import ImageSample

    try:
        image = ImageSample("cam_front", 0, "cam_front", data).decode()
    except InputError as exc:
        assert exc.sensor == "cam_front"
    else:
        assert image.dtype == np.uint8 and image.ndim == 3 and image.shape[2] == 3


@pytest.mark.anyio
@pytest.mark.parametrize("decode", [None, "auto", "server", "client"])
async def test_a_corrupt_image_is_its_own_cameras_error_not_its_batchs(
    triton: EmbeddedTriton, decode: str | None
) -> None:
    """Two cameras on one camera model share one batched request; whoever decodes (the default, ``auto``:
    the model, which answers an undecodable row on its own in ``DECODE_ERROR``; ``server``; ``client``)
    one camera's undecodable image is that camera's error, naming it and counted as such, and the other
    camera's image is still detected on. (The camera left out of the batch used to be reported ok, with
    the whole batch's outputs: the other camera's detections; and with the model decoding, one bad image
    failed the whole request: both cameras were errors.)"""
    good = encode_jpeg(np.random.default_rng(0).integers(0, 255, (360, 640, 3), dtype=np.uint8))
    data = profile_data(
        triton.grpc_url,
        {"cam_front": "camera_detector"},
        pipeline={"queue_size": 0, "overflow": "block", "circuit": {"failure_threshold": 100}},
    )
    if decode is not None:
        data["sensors"][0]["decode"] = decode
    data["sensors"].append({**data["sensors"][0], "name": "cam_back"})
    cfg = from_data(RuntimeConfig, data)
    t = T0
    frames = [
        Frame(
            frame_id=i,
            t_ns=t + i * 100 * MS,
            samples={
                "cam_front": ImageSample("cam_front", t + i * 100 * MS, "cam_front", bad),
                "cam_back": ImageSample("cam_back", t + i * 100 * MS, "cam_back", good),
            },
        )
        # images that pass the runtime's intake check (a JPEG with its end marker, a PNG whose header is within
        # the limits) and that no decoder can read: the decode is the path under test
        for i, bad in enumerate((b"\xff\xd8\xff garbage\xff\xd9", _png_header(64, 48)))
    ]
    with anyio.fail_after(60):
        async with Runtime(cfg) as rt:
            results = [r async for r in rt.run(frames)]
    assert_one_record_per_frame(results, len(frames))
    for r in results:
        front, back = r.sensors["cam_front"], r.sensors["cam_back"]
        assert front.status is SensorStatus.ERROR and front.error is not None and "cam_front" in front.error, front
        assert back.status is SensorStatus.OK, back
        assert front.outputs == {}  # none of the batch's outputs: they are the other camera's
        # the path under test: the model decoded (and said which image it could not), or the client did
        by_model = decode != "client"
        assert ("IMAGE_BYTES: not decoded by the model" in front.error) is by_model, front.error
    # counted as that camera's fault (the run's report), like a decode failure in the client
    counts = LatencyAccumulator(budget_ns=100 * MS)
    for r in results:
        counts.add(r)
    assert counts.sensor_status["cam_front"] == {"error": 2} and counts.sensor_status["cam_back"] == {"ok": 2}
    assert counts.first_errors.keys() == {"cam_front"}


@pytest.mark.anyio
@pytest.mark.parametrize("decode", [None, "client"])
async def test_a_camera_sending_bad_images_does_not_switch_its_model_off(
    triton: EmbeddedTriton, decode: str | None
) -> None:
    """A camera's own undecodable images are its input's fault, not its model's: with the default circuit
    (3 consecutive failures open it), six frames of one bad camera beside a good one on the same model
    leave the circuit closed and the good camera detected on every frame; then a frame of the bad camera
    alone (nothing reaches the model) and the next good frames are answered. (Every input error counted
    as a model failure: the circuit opened on frame 3 and skipped both cameras.)"""
    good = encode_jpeg(np.random.default_rng(1).integers(0, 255, (360, 640, 3), dtype=np.uint8))
    pipeline = {"queue_size": 0, "overflow": "block"}
    data = profile_data(triton.grpc_url, {"cam_front": "camera_detector"}, pipeline=pipeline)
    if decode is not None:
        data["sensors"][0]["decode"] = decode
    data["sensors"].append({**data["sensors"][0], "name": "cam_back"})
    cfg = from_data(RuntimeConfig, data)
    assert cfg.pipeline.circuit.failure_threshold == 3

    def frame(i: int, front: bytes, back: bytes | None) -> Frame:
        t = T0 + i * 100 * MS
        samples: dict[str, Sample | None] = {"cam_front": ImageSample("cam_front", t, "cam_front", front)}
        samples["cam_back"] = None if back is None else ImageSample("cam_back", t, "cam_back", back)
        return Frame(frame_id=i, t_ns=t, samples=samples)

    # a JPEG with its end marker passes the runtime's intake check: the decode (the model's or the client's) fails
    frames = [frame(i, b"\xff\xd8\xff garbage\xff\xd9", good) for i in range(6)]
    frames += [frame(6, b"not an image", None), frame(7, good, good), frame(8, good, good)]
    with anyio.fail_after(90):
        async with Runtime(cfg) as rt:
            results = [r async for r in rt.run(frames)]
    assert_one_record_per_frame(results, len(frames))
    for r in results[:6]:
        assert r.sensors["cam_front"].status is SensorStatus.ERROR, r.sensors["cam_front"]
        assert r.sensors["cam_back"].status is SensorStatus.OK, (r.frame_id, r.sensors["cam_back"])
    assert results[6].sensors["cam_front"].status is SensorStatus.ERROR
    for r in results[7:]:
        assert {s: r.sensors[s].status for s in ("cam_front", "cam_back")} == dict.fromkeys(
            ("cam_front", "cam_back"), SensorStatus.OK
        ), r.sensors
