"""Stage data: the small frozen types passed between the runtime's stages.

Conventions used everywhere in the package:

* Time is integer nanoseconds (``*_ns``). A sample's ``t_ns`` is its sensor's own capture time.
* Ego frame ``base_link``: x forward, y left, z up (metres, radians, yaw about +z).
* World frame ``map``; ego pose is ``map <- base_link``.
* Camera frames are optical: z forward, x right, y down.
* Arrays held by these types are made read-only on construction; treat them as values.
"""

from __future__ import annotations

import bisect
import enum
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = [
    "FUSION_HANDOFF",
    "LABELS",
    "LIVE_METADATA",
    "SERVER_STAGES",
    "SIM_GENERATOR",
    "SIM_METADATA",
    "CameraCalibration",
    "Detection3D",
    "EgoPose",
    "Frame",
    "FrameResult",
    "FrameStatus",
    "GroundTruth",
    "GroundTruthObject",
    "GroundTruthRegion",
    "ImageSample",
    "LatencyTree",
    "PointCloudSample",
    "Sample",
    "SensorKind",
    "SensorResult",
    "SensorSpec",
    "SensorStatus",
    "SessionSource",
    "Transform",
    "interpolate_ego",
    "label_id",
]

F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]

#: Object classes, index = label id used in every tensor contract.
LABELS: tuple[str, ...] = ("car", "truck", "pedestrian", "cyclist")


def label_id(name: str) -> int:
    """Label id of a class name (raises ``ValueError`` naming the label)."""
    try:
        return LABELS.index(name)
    except ValueError:
        raise ValueError(f"unknown label {name!r}; expected one of {', '.join(LABELS)}") from None


def _frozen_array(a: npt.ArrayLike, dtype: npt.DTypeLike) -> npt.NDArray[np.generic]:
    """``a`` as a read-only array of its own: a copy, unless it is one already (a read-only C-contiguous
    array of ``dtype`` owning its data, e.g. a merged cloud: no second copy of hundreds of KiB)."""
    if (
        isinstance(a, np.ndarray)
        and a.dtype == np.dtype(dtype)
        and a.base is None
        and not a.flags.writeable
        and a.flags.c_contiguous
    ):
        return a
    arr = np.array(a, dtype=dtype, copy=True)
    arr.setflags(write=False)
    return arr


class SensorKind(enum.StrEnum):
    """The names of the built-in sensor kinds (:mod:`perception.kinds` defines them; more can be
    registered there). A :attr:`SensorSpec.kind` is a plain ``str``: compare it with ``==``."""

    CAMERA = "camera"
    LIDAR = "lidar"
    RADAR = "radar"


@dataclass(frozen=True, slots=True)
class Transform:
    """Rigid transform ``parent <- child``: ``p_parent = R(rotation) @ p_child + translation``.

    ``rotation`` is a unit quaternion ``(x, y, z, w)``.
    """

    translation: tuple[float, float, float] = (0.0, 0.0, 0.0)
    rotation: tuple[float, float, float, float] = (0.0, 0.0, 0.0, 1.0)

    @staticmethod
    def identity() -> Transform:
        return Transform()

    @staticmethod
    def from_matrix(m: npt.ArrayLike) -> Transform:
        mat = np.asarray(m, dtype=np.float64)
        r = mat[:3, :3]
        # Shepperd's method, numerically stable for all rotations.
        tr = float(np.trace(r))
        if tr > 0:
            s = np.sqrt(tr + 1.0) * 2
            w, x, y, z = 0.25 * s, (r[2, 1] - r[1, 2]) / s, (r[0, 2] - r[2, 0]) / s, (r[1, 0] - r[0, 1]) / s
        elif r[0, 0] > r[1, 1] and r[0, 0] > r[2, 2]:
            s = np.sqrt(1.0 + r[0, 0] - r[1, 1] - r[2, 2]) * 2
            w, x, y, z = (r[2, 1] - r[1, 2]) / s, 0.25 * s, (r[0, 1] + r[1, 0]) / s, (r[0, 2] + r[2, 0]) / s
        elif r[1, 1] > r[2, 2]:
            s = np.sqrt(1.0 + r[1, 1] - r[0, 0] - r[2, 2]) * 2
            w, x, y, z = (r[0, 2] - r[2, 0]) / s, (r[0, 1] + r[1, 0]) / s, 0.25 * s, (r[1, 2] + r[2, 1]) / s
        else:
            s = np.sqrt(1.0 + r[2, 2] - r[0, 0] - r[1, 1]) * 2
            w, x, y, z = (r[1, 0] - r[0, 1]) / s, (r[0, 2] + r[2, 0]) / s, (r[1, 2] + r[2, 1]) / s, 0.25 * s
        t = mat[:3, 3]
        return Transform((float(t[0]), float(t[1]), float(t[2])), (float(x), float(y), float(z), float(w)))

    @staticmethod
    def from_xyz_rpy(xyz: tuple[float, float, float], rpy: tuple[float, float, float]) -> Transform:
        """From translation and roll/pitch/yaw (extrinsic x-y-z, radians)."""
        cr, sr = np.cos(rpy[0] / 2), np.sin(rpy[0] / 2)
        cp, sp = np.cos(rpy[1] / 2), np.sin(rpy[1] / 2)
        cy, sy = np.cos(rpy[2] / 2), np.sin(rpy[2] / 2)
        q = (
            float(sr * cp * cy - cr * sp * sy),
            float(cr * sp * cy + sr * cp * sy),
            float(cr * cp * sy - sr * sp * cy),
            float(cr * cp * cy + sr * sp * sy),
        )
        return Transform((float(xyz[0]), float(xyz[1]), float(xyz[2])), q)

    def rotation_matrix(self) -> F64:
        x, y, z, w = self.rotation
        n = x * x + y * y + z * z + w * w
        if n == 0.0:
            raise ValueError("transform rotation is a zero quaternion")
        s = 2.0 / n
        return np.array(
            [
                [1 - s * (y * y + z * z), s * (x * y - z * w), s * (x * z + y * w)],
                [s * (x * y + z * w), 1 - s * (x * x + z * z), s * (y * z - x * w)],
                [s * (x * z - y * w), s * (y * z + x * w), 1 - s * (x * x + y * y)],
            ],
            dtype=np.float64,
        )

    def matrix(self) -> F64:
        m = np.eye(4, dtype=np.float64)
        m[:3, :3] = self.rotation_matrix()
        m[:3, 3] = self.translation
        return m

    def inverse(self) -> Transform:
        return Transform.from_matrix(np.linalg.inv(self.matrix()))

    def compose(self, other: Transform) -> Transform:
        """``self @ other`` (apply ``other`` first)."""
        return Transform.from_matrix(self.matrix() @ other.matrix())

    def apply(self, points: npt.ArrayLike) -> F64:
        """Transform ``[N,3]`` points from child to parent frame."""
        p = np.asarray(points, dtype=np.float64).reshape(-1, 3)
        out: F64 = p @ self.rotation_matrix().T + np.asarray(self.translation)
        return out

    def yaw(self) -> float:
        x, y, z, w = self.rotation
        return float(np.arctan2(2 * (w * z + x * y), 1 - 2 * (y * y + z * z)))


@dataclass(frozen=True, slots=True)
class CameraCalibration:
    """Pinhole intrinsics; ``k`` is the row-major 3x3 matrix, ``d`` plumb-bob distortion."""

    width: int
    height: int
    k: tuple[float, ...]
    d: tuple[float, ...] = ()
    distortion_model: str = "plumb_bob"

    def __post_init__(self) -> None:
        if self.width <= 0 or self.height <= 0:
            raise ValueError(f"camera calibration size must be positive, got {self.width}x{self.height}")
        if len(self.k) != 9:
            raise ValueError(f"camera calibration K must have 9 values, got {len(self.k)}")

    def matrix(self) -> F64:
        return np.asarray(self.k, dtype=np.float64).reshape(3, 3)

    def problem(self) -> str | None:
        """Why this is not a usable pinhole calibration, or None: ``k`` must be a finite
        ``[fx s cx; 0 fy cy; 0 0 1]`` with ``fx, fy > 0`` (fusion projects through it and inverts it in
        closed form), ``d`` finite. The one check of a camera matrix: the session refuses such a rig
        camera before a run, the fuser before it fuses; each names the sensor."""
        k = self.k
        if not all(math.isfinite(v) for v in k):
            return f"calibration.k has non-finite values: {list(k)}"
        if not all(math.isfinite(v) for v in self.d):
            return f"calibration.d has non-finite values: {list(self.d)}"
        if not (k[0] > 0 and k[4] > 0 and (k[3], k[6], k[7], k[8]) == (0, 0, 0, 1)):
            return f"calibration.k={list(k)} is not a pinhole matrix [fx s cx; 0 fy cy; 0 0 1] with fx, fy > 0"
        return None


@dataclass(frozen=True, slots=True)
class SensorSpec:
    """A sensor of the rig: how it is named, where it is mounted, and where its data lives in a drive."""

    name: str
    #: A registered sensor kind's name (:func:`perception.kinds.kind_def`), e.g. ``"lidar"``; a
    #: :class:`SensorKind` member is stored as its plain string value.
    kind: str
    frame_id: str
    extrinsic: Transform  # base_link <- sensor frame
    topic: str
    calibration: CameraCalibration | None = None  # image kinds only
    rate_hz: float = 0.0

    def __post_init__(self) -> None:
        if isinstance(self.kind, enum.Enum):
            object.__setattr__(self, "kind", str(self.kind.value))


@dataclass(frozen=True, slots=True)
class PointCloudSample:
    """A lidar sweep or radar scan in its sensor frame.

    Lidar ``points`` are ``[N,4]`` float32 ``x, y, z, intensity``; radar are ``[N,5]`` float32
    ``x, y, z, radial_velocity, rcs`` (``fields`` names the columns).
    """

    sensor: str
    t_ns: int
    frame_id: str
    points: F32
    fields: tuple[str, ...]
    seq: int = 0
    #: How an accumulated cloud was made (:class:`perception.scheduler.SweepAccumulator`): after the sweep's
    #: own rows, each earlier sweep merged into it, in order, as ``(its stamp, its row count, the row-major
    #: 4x4 transform its x, y, z were moved by)``; ``()`` for a sweep as captured. A recording keeps this
    #: instead of the merged rows (``perception.record``).
    merged_from: tuple[tuple[int, int, tuple[float, ...]], ...] = ()
    #: An accumulated cloud's provenance by identity, set with ``merged_from`` by the accumulator: the arrays
    #: it wrote (``points``), then the received sweeps' ``points`` it was made of (the sweep's own, then each
    #: merged one's, in ``merged_from``'s order). A recording traces the cloud to the sweeps it received by
    #: identity, without reading rows (``perception.record``); a sample whose ``points`` are not the first is
    #: traced by its rows. Not compared, not shown.
    merged_points: tuple[F32, ...] = field(default=(), compare=False, repr=False)

    def __post_init__(self) -> None:
        pts = _frozen_array(self.points, np.float32)
        if pts.ndim != 2 or pts.shape[1] != len(self.fields):
            raise ValueError(
                f"sensor {self.sensor!r}: points must be [N,{len(self.fields)}] for fields "
                f"{self.fields}, got shape {pts.shape}"
            )
        object.__setattr__(self, "points", pts)

    @property
    def kind_hint(self) -> str:
        return "radar" if "radial_velocity" in self.fields else "lidar"


@dataclass(frozen=True, slots=True)
class ImageSample:
    """A camera image: ``data`` is encoded bytes (``format`` 'jpeg' / 'png')."""

    sensor: str
    t_ns: int
    frame_id: str
    data: bytes
    format: str = "jpeg"
    seq: int = 0

    def decode(self) -> npt.NDArray[np.uint8]:
        """Decode to ``[H,W,3]`` uint8 RGB (matplotlib's Pillow-backed reader)."""
        from perception._imageio import decode_image

        return decode_image(self.data, sensor=self.sensor)


@dataclass(frozen=True, slots=True)
class EgoPose:
    """Ego pose ``map <- base_link`` at ``t_ns``, with ego velocity in ``base_link`` (m/s, rad/s)."""

    t_ns: int
    pose: Transform
    linear_velocity: tuple[float, float, float] = (0.0, 0.0, 0.0)
    yaw_rate: float = 0.0


def interpolate_ego(poses: Sequence[EgoPose], t_ns: int, times: Sequence[int] | None = None) -> EgoPose:
    """The ego pose at ``t_ns`` from time-ordered ``poses`` (``times``: their ``t_ns``, if at hand):
    exact at a pose's time, else translation/velocity lerp and rotation slerp between the neighbours;
    held constant outside their range. ``poses`` must not be empty."""
    if not poses:
        raise ValueError("interpolate_ego: no poses")
    ts = times if times is not None else [p.t_ns for p in poses]
    i = bisect.bisect_left(ts, t_ns)
    if i < len(poses) and ts[i] == t_ns:
        return poses[i]
    if i == 0 or i == len(poses):
        return replace(poses[0 if i == 0 else -1], t_ns=t_ns)
    return _interpolate(poses[i - 1], poses[i], t_ns)


def _slerp(q0: Sequence[float], q1: Sequence[float], w: float) -> tuple[float, float, float, float]:
    # plain floats: four components, several times a frame (numpy's per-call cost would dominate)
    n0, n1 = math.sqrt(sum(x * x for x in q0)), math.sqrt(sum(x * x for x in q1))
    a, b = [x / n0 for x in q0], [x / n1 for x in q1]
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    if dot < 0.0:  # take the short way round
        b, dot = [-x for x in b], -dot
    if dot > 0.9995:  # nearly parallel: normalised lerp is exact enough and stable
        q = [x + w * (y - x) for x, y in zip(a, b, strict=True)]
    else:
        theta = math.acos(dot)
        s0, s1, s = math.sin((1.0 - w) * theta), math.sin(w * theta), math.sin(theta)
        q = [(s0 * x + s1 * y) / s for x, y in zip(a, b, strict=True)]
    n = math.sqrt(sum(x * x for x in q))
    return (q[0] / n, q[1] / n, q[2] / n, q[3] / n)


def _lerp(a: Sequence[float], b: Sequence[float], w: float) -> tuple[float, ...]:
    return tuple(float(x + w * (y - x)) for x, y in zip(a, b, strict=True))


def _interpolate(a: EgoPose, b: EgoPose, t_ns: int) -> EgoPose:
    w = (t_ns - a.t_ns) / (b.t_ns - a.t_ns)
    tx, ty, tz = _lerp(a.pose.translation, b.pose.translation, w)
    vx, vy, vz = _lerp(a.linear_velocity, b.linear_velocity, w)
    return EgoPose(
        t_ns=t_ns,
        pose=Transform((tx, ty, tz), _slerp(a.pose.rotation, b.pose.rotation, w)),
        linear_velocity=(vx, vy, vz),
        yaw_rate=a.yaw_rate + w * (b.yaw_rate - a.yaw_rate),
    )


@dataclass(frozen=True, slots=True)
class GroundTruthObject:
    """A true object in ``base_link`` at the ground-truth sample time."""

    track_id: int
    label: str
    center: tuple[float, float, float]
    size: tuple[float, float, float]  # length, width, height
    yaw: float
    velocity: tuple[float, float]  # over ground, expressed in base_link (vx, vy)
    # What a dataset's own evaluation protocol needs; ``None`` = not known (simulated drives, older drives).
    #: The dataset's own category (nuScenes: ``vehicle.bus.rigid``, ``human.pedestrian.adult``...).
    category: str | None = None
    #: The dataset's attribute name (nuScenes: ``vehicle.parked``...); ``""`` = the annotation has none.
    attribute: str | None = None
    #: Lidar / radar points inside the box, as annotated (nuScenes ``num_lidar_pts``/``num_radar_pts``).
    num_lidar_pts: int | None = None
    num_radar_pts: int | None = None


@dataclass(frozen=True, slots=True)
class GroundTruthRegion:
    """An annotated region that is not an object of ours but that an evaluation protocol needs
    (nuScenes: a ``static_object.bicycle_rack``), in ``base_link`` at the ground-truth sample time."""

    kind: str  # the dataset's category of the region
    center: tuple[float, float, float]
    size: tuple[float, float, float]  # length, width, height
    yaw: float


@dataclass(frozen=True, slots=True)
class GroundTruth:
    t_ns: int
    objects: tuple[GroundTruthObject, ...]
    regions: tuple[GroundTruthRegion, ...] = ()


Sample = PointCloudSample | ImageSample


@dataclass(frozen=True, slots=True)
class SessionSource:
    """What a session is assembled against: the sensors a source has and what kind of source it is.

    A drive gives its rig, its metadata (``DriveReader.source``: a drive of the simulator or a recording
    of real sensors), its ego poses and its ground truth. A vehicle gives its rig and the poses its host
    pushes; its metadata is :data:`LIVE_METADATA` (real sensors, as a recording is). The profile is
    resolved against this once (:class:`perception.scheduler.Session`), whatever the entry point, so
    replay and the vehicle run the same models, budget and fusion settings.
    """

    rig: Mapping[str, SensorSpec]
    #: The drive's metadata (``generator``/``source`` decide the source-dependent defaults).
    metadata: Mapping[str, str] = field(default_factory=dict)
    #: How messages name the source (``drive PATH`` or ``the rig``).
    name: str = "the rig"
    #: The drive file, when the source is one (errors in its rig name it).
    file: str | None = None
    #: The ego pose ``map <- base_link`` at a time (``None``: none known).
    ego_at: Callable[[int], EgoPose | None] | None = None
    #: The ground truth of a frame time (drives with annotations only).
    gt_at: Callable[[int], GroundTruth | None] | None = None

    @classmethod
    def live(
        cls, rig: Mapping[str, SensorSpec], *, ego_at: Callable[[int], EgoPose | None] | None = None
    ) -> SessionSource:
        """A vehicle's rig: real sensors, pushed live."""
        return cls(rig=rig, metadata=LIVE_METADATA, ego_at=ego_at)

    @classmethod
    def simulated(cls, rig: Mapping[str, SensorSpec], *, name: str = "the rig") -> SessionSource:
        """A simulator's rig (a ``perception sim`` rig file): resolved as a drive of the simulator is."""
        return cls(rig=rig, metadata=SIM_METADATA, name=name)


#: The metadata of a live source: a vehicle's real sensors (resolved as a recording of real sensors is).
LIVE_METADATA: Mapping[str, str] = {"source": "live"}
#: The ``generator`` metadata value ``perception sim`` writes into its drives (what marks a drive simulated).
SIM_GENERATOR = "perception sim"
#: The metadata of a simulator's rig: what a drive of the simulator says of its source.
SIM_METADATA: Mapping[str, str] = {"generator": SIM_GENERATOR}


# ---------------------------------------------------------------------------------------------
# Scheduler / fusion stage data
# ---------------------------------------------------------------------------------------------


class SensorStatus(str, enum.Enum):
    OK = "ok"
    LATE = "late"  # still outstanding at the join deadline; cancelled
    ERROR = "error"  # the request failed (translated Triton/gRPC error)
    MISSING = "missing"  # no usable sample inside the sync window / staleness limit
    SKIPPED = "skipped"  # circuit open for the sensor's model


class FrameStatus(str, enum.Enum):
    OK = "ok"  # every configured sensor answered in time
    DEGRADED = "degraded"  # emitted with at least one sensor not ok
    DROPPED = "dropped"  # never processed (queue overflow, shutdown); ``reason`` says why


@dataclass(frozen=True, slots=True)
class Frame:
    """One unit of work: the samples chosen for ``t_ns`` (``None`` = sensor missing)."""

    frame_id: int
    t_ns: int
    samples: Mapping[str, Sample | None]
    ego: EgoPose | None = None
    ground_truth: GroundTruth | None = None
    created_ns: int = 0  # monotonic ns at which the frame was assembled (scheduling-wait origin)


#: Triton's per-request stages, in order, as its statistics name them (``<stage>_ns``, ``<stage>_count``):
#: the keys of :attr:`LatencyTree.server` and, prefixed ``server_``, of a sensor's stages.
SERVER_STAGES = ("queue", "compute_input", "compute_infer", "compute_output")

#: The frame stage of the time from the end of the join to the result that the fusion's own stages
#: (``fusion``, ``tracking``: timed inside its call) do not hold: the call's handoff to its worker thread
#: and back, and any wait for an abandoned fusion call; with it the frame's stages add up to its total.
FUSION_HANDOFF = "fusion_handoff"


@dataclass(frozen=True, slots=True)
class LatencyTree:
    """Where the milliseconds went, all in ns. ``stages`` are the frame's, disjoint and adding up to
    ``total_ns``: ``schedule_wait``, ``dispatch`` (until the last answer), ``join_wait``, then
    ``fusion_wait`` (its predecessor's fusion), ``fusion``, ``tracking`` and :data:`FUSION_HANDOFF` (a
    shed frame: ``shed``). ``sensors`` maps sensor -> stage -> ns.

    A sensor's stages: ``preprocess`` (tensors from the sample), ``request`` (the client call, of which
    ``serialize`` is the client's serialisation or shared-memory copy) and, when Triton's time for the
    request is known (:class:`perception.metrics.TraceSplitter` or ``ServerSplitter``), ``in_flight``
    (= request - serialize), ``server_queue``, ``server_compute_input``, ``server_compute_infer``,
    ``server_compute_output``, ``server_compute`` (their three compute stages), ``server_total`` and
    ``overhead`` (= in_flight - server_total: network, gRPC and client scheduling).
    """

    total_ns: int = 0
    stages: Mapping[str, int] = field(default_factory=dict)
    sensors: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    #: Triton's own time for this frame's requests per model: ``requests`` (count) and the ns of
    #: ``queue``, ``compute_input``, ``compute_infer``, ``compute_output`` and ``total`` (summed over
    #: the model's requests of this frame).
    server: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    #: Why Triton's time is unknown for this frame, per model (e.g. other clients' requests interleaved).
    server_unavailable: Mapping[str, str] = field(default_factory=dict)
    #: The client's monotonic ns at which ``total_ns`` starts (the frame's origin; 0 when unknown): places
    #: frames in flight together on one timeline (:class:`perception.metrics.ChromeTrace`).
    start_ns: int = 0


@dataclass(frozen=True, slots=True)
class SensorResult:
    """What one sensor's model returned for a frame."""

    sensor: str
    status: SensorStatus
    latency_ns: int = 0
    outputs: Mapping[str, npt.NDArray[Any]] = field(default_factory=dict)
    error: str | None = None
    sample_t_ns: int | None = None
    model: str | None = None
    stages: Mapping[str, int] = field(default_factory=dict)  # e.g. preprocess, request (ns)
    #: The version of ``model`` that answered (empty when the request got no answer, or the client
    #: does not say).
    model_version: str = ""
    #: Not requested for this frame: the sensor's latest result, this old (ns, from its sample to the
    #: frame time), reused while frames are shed under overload (``pipeline.required_sensors``).
    reused_age_ns: int | None = None


@dataclass(frozen=True, slots=True)
class Detection3D:
    """A fused 3D detection in ``base_link`` at the frame time."""

    id: int
    label: str
    score: float
    center: tuple[float, float, float]
    size: tuple[float, float, float]
    yaw: float
    velocity: tuple[float, float]
    uncertainty: tuple[float, float]  # 1-sigma position std-dev in x, y (m)
    sources: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class FrameResult:
    """Exactly one per frame, whatever happened to it."""

    frame_id: int
    t_ns: int
    status: FrameStatus
    sensors: Mapping[str, SensorResult]
    detections: tuple[Detection3D, ...] = ()
    latency: LatencyTree = field(default_factory=LatencyTree)
    reason: str | None = None
    deadline_missed: bool = False
    #: The detections are the tracker's prediction at ``t_ns``, not a fusion of this frame's samples (a
    #: frame shed under overload: ``reason`` ``overload (...)``).
    predicted: bool = False
    #: The limit of frames in flight (``perception.scheduler``'s adaptive admission) in force when the frame
    #: was started, or shed; None when no pipeline admitted it (lockstep's ``Runtime.process``, a frame
    #: dropped before its turn).
    admission_limit: int | None = None
