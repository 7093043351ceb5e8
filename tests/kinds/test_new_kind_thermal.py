"""A new sensor kind from this file and one model directory alone: a 16-bit single-channel thermal camera.

The kind is registered here (a 16-bit PNG ``ImageSample``, an ``IMAGE UINT16 [-1, -1, 1]`` input, the
camera's fusion role); its model is ``tests/triton_models/thermal_detector`` (hot blobs -> camera-style
boxes). A small drive (thermal + lidar, a warm car in view) is written and replayed through the real
embedded Triton with the default profile, which takes the sensors from the drive. The kind's simulator
model is registered here too (warm road users on a cool background), and a simulated drive of a rig
with a thermal camera replays the same way.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import anyio
import numpy as np
import numpy.typing as npt
import pytest
from PIL import Image

from perception.config import load_config
from perception.drives import DriveReader, DriveWriter
from perception.errors import ConfigError, InputError
from perception.kinds import (
    FusionRole,
    KindContract,
    SensorKindDef,
    TensorSpec,
    kind_def,
    register_kind,
    unregister_kind,
)
from perception.modelkit import SyntheticBox, synthetic_lidar_sweep
from perception.replay import ReplayOptions, each_frame, replay_drive
from perception.server import EmbeddedTriton
from perception.sim import SimKind, SimSensor, generate_drive, project_ground_truth, register_sim_kind
from perception.sim._kinds import unregister_sim_kind
from perception.sim._world import Scene
from perception.types import (
    CameraCalibration,
    EgoPose,
    FrameResult,
    ImageSample,
    PointCloudSample,
    Sample,
    SensorSpec,
    SensorStatus,
    Transform,
)

ROOT = Path(__file__).resolve().parents[2]
W, H, F = 160, 120, 100.0
CAR = SyntheticBox(8.0, 0.0, 4.5, 1.9, 1.6, 0.0)
CAM_XYZ = (0.0, 0.0, 1.5)
#: base_link <- optical frame (z forward, x right, y down)
OPTICAL = np.array([[0.0, 0.0, 1.0], [-1.0, 0.0, 0.0], [0.0, -1.0, 0.0]])


def _png16(image: npt.NDArray[np.uint16]) -> bytes:
    out = io.BytesIO()
    Image.fromarray(image).save(out, format="PNG")
    return out.getvalue()


def _prepare(
    sample: Sample, input_size: tuple[int, int] | None
) -> tuple[dict[str, npt.NDArray[np.uint16]], tuple[float, float]]:
    if not isinstance(sample, ImageSample):
        raise InputError(f"expected a thermal image, got {type(sample).__name__}", sensor=sample.sensor)
    image = np.asarray(Image.open(io.BytesIO(sample.data)), dtype=np.uint16)
    return {"IMAGE": np.ascontiguousarray(image[..., None])}, (1.0, 1.0)


def _warmup(sensor: str, spec: SensorSpec | None) -> Sample:
    return ImageSample(sensor, 0, sensor, _png16(np.full((H, W), 20000, np.uint16)), format="png")


THERMAL = SensorKindDef(
    name="thermal",
    sample=ImageSample,
    contract=KindContract(
        inputs=(TensorSpec("IMAGE", "UINT16", (-1, -1, 1), description="temperature counts, one image per row"),),
        outputs=kind_def("camera").contract.outputs,
        batched=True,
    ),
    prepare=_prepare,
    warmup=_warmup,
    fusion=FusionRole.IMAGE_BOXES,
    default_model="thermal_detector",
    color=(1.0, 0.3, 0.0),
)


@pytest.fixture
def thermal() -> Iterator[SensorKindDef]:
    register_kind(THERMAL)
    yield THERMAL
    unregister_kind("thermal")


def _car_pixels() -> tuple[int, int, int, int]:
    """The car's box projected into the thermal image (x1, y1, x2, y2)."""
    xs = (CAR.x - CAR.l / 2, CAR.x + CAR.l / 2)
    ys = (CAR.y - CAR.w / 2, CAR.y + CAR.w / 2)
    corners = np.array([(x, y, z) for x in xs for y in ys for z in (0.0, CAR.h)]) - CAM_XYZ
    opt = corners @ OPTICAL  # base -> optical: R^T p, as row vectors
    u = F * opt[:, 0] / opt[:, 2] + W / 2
    v = F * opt[:, 1] / opt[:, 2] + H / 2
    return int(u.min()), int(v.min()), int(np.ceil(u.max())), int(np.ceil(v.max()))


def _write_drive(path: Path) -> None:
    extrinsic = np.eye(4)
    extrinsic[:3, :3] = OPTICAL
    extrinsic[:3, 3] = CAM_XYZ
    cal = CameraCalibration(W, H, (F, 0.0, W / 2, 0.0, F, H / 2, 0.0, 0.0, 1.0))
    rig = [
        SensorSpec("lidar_top", "lidar", "lidar_top", Transform((0.0, 0.0, 1.8)), "/sensors/lidar_top/points"),
        SensorSpec(
            "thermal_front",
            "thermal",
            "thermal_front_optical",
            Transform.from_matrix(extrinsic),
            "/sensors/thermal_front/image/compressed",
            calibration=cal,
        ),
    ]
    image = np.full((H, W), 20000, np.uint16)
    x1, y1, x2, y2 = _car_pixels()
    image[y1:y2, x1:x2] = 45000  # the warm car
    png = _png16(image)
    points = synthetic_lidar_sweep([CAR], sensor_height=1.8)
    with DriveWriter(path, rig) as writer:
        for i in range(12):
            t = 1_000_000_000 + i * 100_000_000
            writer.write_ego_pose(EgoPose(t, Transform()))
            writer.write(PointCloudSample("lidar_top", t, "lidar_top", points, ("x", "y", "z", "intensity"), seq=i))
            writer.write(ImageSample("thermal_front", t, "thermal_front_optical", png, format="png", seq=i))


def _replay(drive: Path, triton: EmbeddedTriton) -> list[FrameResult]:
    cfg = load_config(ROOT / "launch" / "replay.yaml")
    cfg = replace(cfg, server=replace(cfg.server, url=triton.grpc_url))

    async def main() -> list[FrameResult]:
        with anyio.fail_after(240):
            results: list[FrameResult] = []
            opts = ReplayOptions(rate="lockstep", progress=False)
            await replay_drive(drive, cfg, opts, sinks=[each_frame(results.append)])
        return results

    return anyio.run(main)


def _assert_thermal_took_part(results: list[FrameResult], frames: int) -> None:
    assert len(results) == frames and len({r.frame_id for r in results}) == frames  # one record per frame
    for r in results:
        assert r.sensors["thermal_front"].status is SensorStatus.OK, r.sensors["thermal_front"].error
        assert r.sensors["thermal_front"].model == "thermal_detector"
    assert any("thermal_front" in d.sources for r in results for d in r.detections)


def test_a_thermal_kind_replays_through_triton(thermal: SensorKindDef, tmp_path: Path, triton: EmbeddedTriton) -> None:
    drive = tmp_path / "thermal.mcap"
    _write_drive(drive)
    _assert_thermal_took_part(_replay(drive, triton), 12)


# -- the kind's simulator model ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SimThermalParams:
    """A simulated thermal camera (rig key ``thermal:``): a pinhole of ``width`` x ``height`` pixels."""

    width: int = W
    height: int = H
    focal_px: float = F
    background: int = 20000
    warm: int = 45000

    def __post_init__(self) -> None:
        if not 0 <= self.background < self.warm <= 65535:
            raise ValueError(f"warm: must be above background and <= 65535, got {self.warm}")

    def calibration(self) -> CameraCalibration:
        w, h, f = self.width, self.height, self.focal_px
        return CameraCalibration(w, h, (f, 0.0, w / 2, 0.0, f, h / 2, 0.0, 0.0, 1.0))


class ThermalModel:
    """Road users are warm: the image rectangle of each ground-truth box in view is filled."""

    def __init__(self, cfg: SimSensor, seed: int) -> None:
        self.spec, self.p = cfg.spec, cfg.params

    def capture(self, scene: Scene, rng: np.random.Generator) -> bytes:
        image = np.full((self.p.height, self.p.width), self.p.background, np.uint16)
        for box in project_ground_truth(scene.ground_truth(), self.spec, min_visible=0.3):
            image[int(box.y1) : int(np.ceil(box.y2)), int(box.x1) : int(np.ceil(box.x2))] = self.p.warm
        return _png16(image)


RIG = """
sensors:
  - {name: lidar_top, kind: lidar, mount: {xyz: [1.0, 0.0, 1.9]}, rate_hz: 10, lidar: {beams: 16}}
  - name: thermal_front
    kind: thermal
    mount: {xyz: [1.6, 0.0, 1.5]}
    rate_hz: 10
    offset_ms: 3
    thermal: {width: 160, height: 120, focal_px: 100}
"""


@pytest.fixture
def simulated_thermal(thermal: SensorKindDef) -> Iterator[SimKind]:
    defn = SimKind("thermal", SimThermalParams, ThermalModel, image_format="png")
    register_sim_kind(defn)
    yield defn
    unregister_sim_kind("thermal")


def test_a_simulated_thermal_drive_replays_through_triton(
    simulated_thermal: SimKind, tmp_path: Path, triton: EmbeddedTriton
) -> None:
    rig = tmp_path / "thermal_rig.yaml"
    rig.write_text(RIG)
    drive = tmp_path / "sim_thermal.mcap"
    generate_drive(drive, scenario="urban", seed=3, duration_s=2.0, rig=rig)
    with DriveReader(drive) as reader:
        assert reader.rig["thermal_front"].kind == "thermal"
        sample = next(s for s in reader.samples() if s.sensor == "thermal_front")
        frames = sum(1 for s in reader.samples() if s.sensor == "lidar_top")  # the trigger
    assert isinstance(sample, ImageSample) and sample.format == "png"
    pixels = np.asarray(Image.open(io.BytesIO(sample.data)))
    assert pixels.dtype == np.uint16 and pixels.shape == (H, W)
    _assert_thermal_took_part(_replay(drive, triton), frames)


def test_a_rig_with_bad_thermal_params_names_the_key(simulated_thermal: SimKind, tmp_path: Path) -> None:
    rig = tmp_path / "thermal_rig.yaml"
    rig.write_text(RIG.replace("focal_px: 100", "focal_px: 100, warm: 10"))
    with pytest.raises(ConfigError, match=r"sensors\[1\]\.thermal\.warm") as info:
        generate_drive(tmp_path / "x.mcap", duration_s=0.5, rig=rig)
    assert str(rig) in str(info.value)
