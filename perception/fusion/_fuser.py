"""The fusion stage: per-sensor model outputs of one frame -> fused, tracked 3D detections.

Per frame (all in ``base_link`` at the frame time ``t_f``). Each step handles every sensor of a kind
in one pass (all cameras together, all radars together): whole-array numpy where a step is a handful of
calls, and loops compiled by numba (:mod:`._kernels`) for the pairwise work (radar gating, camera
projection, occlusion and matching), where numpy's per-call cost would dominate on tens of objects:

1. **Common frame.** Each sensor's output is moved from its sensor frame at its capture time ``t_s``
   (``SensorResult.sample_t_ns``) to ``base_link(t_f)``: extrinsic, then ego motion
   ``base_link(t_f) <- base_link(t_s)`` (:mod:`._motion`). Radar objects are also propagated over
   ``t_f - t_s`` with their velocity; lidar boxes are propagated once a velocity is known (radar), else
   their age is handed to the tracker, which propagates them with the track velocity.
2. **Lidar** boxes are the anchor objects (accurate position, size, heading).
3. **Radar -> lidar objects.** Mahalanobis gate in BEV between each radar object and the nearest
   point of each box (radar returns come from the surface) under the radar's anisotropic covariance
   (small along the line of sight, ``azimuth_sigma * range`` across it) plus the object's. A radar
   object joins the object it is nearest to within the gate (several radar objects may support one
   object, e.g. two radars or a split cluster). It contributes its velocity (full 2D when finite,
   averaged by inverse variance; otherwise its radial speed, turned into a velocity along the box
   heading when the box is elongated and its heading is not across the line of sight) and its score.
4. **Camera -> lidar objects.** Boxes (moved to each camera's capture time) are projected into the
   cameras whose view frustum their bounding sphere touches (pinhole model; lens distortion is not
   applied); boxes out of view, mostly truncated, or mostly covered by a nearer projected box of the
   same camera (depth order) are not matchable. Hungarian assignment on 2D IoU (boxes grown by a few
   pixels, so small far objects still match) with a minimum IoU, one problem for all cameras in which
   a box may only take a detection of its own camera. A match adds the camera's class vote
   (score-weighted; outweighs the lidar's size-based vote) and score. A lidar object that a camera
   should clearly see but that none of its detections matches loses confidence (only cameras that
   answered give this negative evidence).
5. **Camera-only candidates** from unmatched camera detections that overlap no projected lidar box
   and whose 3D position is not within the gate of a lidar object: position where the box bottom
   meets the ground plane (``z = 0`` in ``base_link``), combined by inverse variance with the depth
   implied by the class's typical height; covariance long along the ray. Radar objects not used in 3
   are associated to them as in 3 and refine their position (Kalman fusion of the two covariances),
   giving camera+radar objects. A detection needs ``camera_only_min_score`` to become a candidate when a
   lidar answered in the frame (the lidar should have seen it), ``camera_alone_min_score`` when none did.
   **Camera-guided lidar objects** (``FusionConfig.camera_guided``, :mod:`._guided`) come first: an
   unmatched detection (overlapping no projected object by ``absorb_iou``) takes the frame's lidar
   points in its frustum (``Frame.samples``; ground and already-found objects' points removed); the
   nearest depth cluster that agrees with the class's height-prior depth places the class's size prior,
   near face first, on the detection's ray. Even one point will do: this is what the lidar model cannot
   box (a ring fragment). These objects are always emitted, with sources camera, lidar and the
   pseudo-source ``camera_guided``; their detection becomes no camera-only candidate.
6. **Radar-only objects** from radar objects still unused (merged across radars); class from RCS.
7. **Emission:** lidar-anchored and camera+radar objects always; camera-only and radar-only objects
   when ``FusionConfig.camera_only`` / ``radar_only``, at lower confidence. Class-agnostic BEV NMS
   (rotated IoU above ``nms_iou`` or centre distance below the smaller per-class radius).
8. **Tracking** (``FusionConfig.tracking``): :class:`~perception.fusion._tracker.Tracker`.

``Detection3D.sources`` names the sensors whose detections contributed this frame, so degraded modes
are explicit. Missing, late, failed or malformed sensor outputs only remove that sensor's evidence.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields

import numpy as np
import numpy.typing as npt

from perception.config import FusionConfig
from perception.errors import ConfigError, InputError
from perception.fusion import _kernels, _point_kernels, _track_kernels
from perception.fusion._associate import (
    assign,
)
from perception.fusion._geometry import (
    bev_iou_pairs,
    invert_transform,
    transform_points,
    wrap_angle,
)
from perception.fusion._guided import camera_guided
from perception.fusion._inputs import CameraBoxes, LidarBoxes, RadarObjects, parse_camera, parse_lidar, parse_radar
from perception.fusion._motion import EgoAt, EgoMotion
from perception.fusion._objects import Objects, Origin, SourceNames, filled
from perception.fusion._params import CLASS_SIZES, FusionParams
from perception.fusion._tracker import Tracker, detections_from_objects
from perception.kinds import FusionRole, kind_def
from perception.types import LABELS, Detection3D, Frame, PointCloudSample, SensorResult, SensorSpec, SensorStatus

__all__ = ["CAMERA_GUIDED_SOURCE", "Fuser", "warm_up"]

#: The pseudo-source in ``Detection3D.sources`` of a camera-guided lidar object (``fusion.camera_guided``),
#: beside the camera and the lidar whose points placed it.
CAMERA_GUIDED_SOURCE = "camera_guided"

log = logging.getLogger(__name__)

#: Distinct warnings fusion logs at most (each once).
_MAX_WARNINGS = 64

F64 = npt.NDArray[np.float64]
F32 = npt.NDArray[np.float32]
B = npt.NDArray[np.bool_]
IP = npt.NDArray[np.intp]

_SIZES = np.asarray(CLASS_SIZES, dtype=np.float64)
_CAR, _TRUCK, _PEDESTRIAN, _CYCLIST = (LABELS.index(n) for n in ("car", "truck", "pedestrian", "cyclist"))
_LIDAR, _CAMERA, _RADAR = int(Origin.LIDAR), int(Origin.CAMERA), int(Origin.RADAR)  # plain ints: cheap to compare


def _role(name: str, spec: SensorSpec) -> FusionRole:
    """The fusion role of a rig's sensor; :class:`InputError` naming it when its kind is unknown or has
    no fusion rule (caught at construction, not on the first frame)."""
    try:
        role = kind_def(spec.kind).fusion
    except ConfigError as exc:
        raise InputError(exc.message, sensor=name) from None
    if role is None:
        raise InputError(f"fusion has no rule for sensor kind {spec.kind!r} (it declares no fusion role)", sensor=name)
    return role


@dataclass(frozen=True, slots=True)
class _Sensor:
    name: str
    role: FusionRole
    index: int
    extrinsic: F64  # base_link <- sensor
    k: F64  # camera matrix (identity for other kinds)
    width: int = 0
    height: int = 0
    # half-angle tangents of a camera's view frustum and their secants (culling)
    tan_x: float = 0.0
    tan_y: float = 0.0
    sec_x: float = 1.0
    sec_y: float = 1.0


@dataclass(slots=True)
class _Radar:
    """Every radar's objects of the frame, in ``base_link`` at the frame time."""

    sensor: IP  # [K] sensor index
    pos: F64  # [K,2]
    vel: F64  # [K,2] full velocity, or radial speed along the line of sight
    full: B  # [K]
    vr: F64  # [K]
    los: F64  # [K,2] unit line of sight from the radar
    cov: F64  # [K,2,2]
    score: F64  # [K]
    rcs: F64  # [K]
    returns: F64  # [K] returns each radar object was formed from
    free: B  # [K] not yet used by an object
    radial: F64  # [K,3] (vr, los x, los y), as Objects.radial

    def __len__(self) -> int:
        return int(self.score.shape[0])


def warm_up() -> None:
    """Compile the fusion and tracking kernels now, or load them from numba's on-disk cache (~1 s).

    The first run after an install compiles them: ~45 s on two cores. A :class:`Fuser` does this when it
    is built; call it earlier (at process start, or once after installing) to keep that out of the way.
    """
    t0 = time.perf_counter()
    _kernels.warm_up()
    _point_kernels.warm_up()
    _track_kernels.warm_up()
    spent = time.perf_counter() - t0
    if spent > 2.0:
        log.info("fusion: compiled the fusion and tracking kernels in %.0f s (cached on disk from now on)", spent)


class Fuser:
    """The fusion stage (a :class:`perception.scheduler.FusionStage`); see the module docstring.

    ``rig`` maps sensor names to their specs (kind, extrinsic, camera calibration); sensors of a frame
    that are not in the rig are ignored with a warning. ``ego_at(t_ns)`` returns the ego pose
    ``map <- base_link`` at any time (or ``None``). Calls are serialised by a lock (the runtime may
    fuse two in-flight frames from two worker threads).
    """

    def __init__(
        self,
        config: FusionConfig,
        rig: Mapping[str, SensorSpec],
        *,
        ego_at: EgoAt | None = None,
        params: FusionParams | None = None,
        ego_max_age_ns: int | None = None,
    ) -> None:
        self.config = config
        self.params = params or FusionParams()
        self._truck_returns = float(config.truck_returns())
        self._ego_at = ego_at
        #: A frame's own ego pose further than this from its time is unknown motion (live.ego_max_age_ms).
        self._ego_max_age_ns = ego_max_age_ns
        sensors = []
        for i, (name, spec) in enumerate(rig.items()):
            role = _role(name, spec)
            cal = spec.calibration
            if role is FusionRole.IMAGE_BOXES and cal is None:
                raise InputError(f"{spec.kind} has no calibration in the rig", sensor=name)
            if cal is not None and (problem := cal.problem()) is not None:
                raise InputError(f"camera {name!r}: {problem}", sensor=name)
            k = cal.matrix() if cal is not None else np.eye(3)
            frustum: dict[str, float] = {}
            if cal is not None:
                tx = max(k[0, 2], cal.width - k[0, 2]) / k[0, 0]
                ty = max(k[1, 2], cal.height - k[1, 2]) / k[1, 1]
                frustum = {"tan_x": tx, "tan_y": ty, "sec_x": math.hypot(1.0, tx), "sec_y": math.hypot(1.0, ty)}
            sensors.append(
                _Sensor(
                    name=name,
                    role=role,
                    index=i,
                    extrinsic=spec.extrinsic.matrix(),
                    k=k,
                    width=cal.width if cal is not None else 0,
                    height=cal.height if cal is not None else 0,
                    **frustum,
                )
            )
        self._sensors = tuple(sensors)
        self._guided = config.camera_guided if config.camera_guided.enabled else None
        if self._guided is not None and CAMERA_GUIDED_SOURCE in rig:
            raise InputError(f"a sensor may not be named {CAMERA_GUIDED_SOURCE!r} with fusion.camera_guided on",
                             sensor=CAMERA_GUIDED_SOURCE)  # fmt: skip
        # sources: the rig's sensors, then the camera-guided pseudo-source when that step is on
        self._names = SourceNames([s.name for s in sensors] + ([CAMERA_GUIDED_SOURCE] if self._guided else []))
        self._n_sources = len(self._names.names)
        # the rig is static: per-sensor tables indexed by sensor index, and the parameters as arrays
        self._sensor_from_base = np.array([invert_transform(s.extrinsic) for s in sensors]).reshape(-1, 4, 4)
        self._extrinsic = np.array([s.extrinsic for s in sensors]).reshape(-1, 4, 4)
        self._k = np.array([s.k for s in sensors]).reshape(-1, 3, 3)
        self._k_inv = np.linalg.inv(self._k)
        self._image_size = np.array([[s.width, s.height] for s in sensors], dtype=np.float64).reshape(-1, 2)
        self._frustum = np.array([[s.tan_x, s.tan_y, s.sec_x, s.sec_y] for s in sensors]).reshape(-1, 4)
        self._class_max_speed = np.asarray(self.params.class_max_speed, dtype=np.float64)
        self._radial_sigma = np.asarray(self.params.radar_radial_sigma, dtype=np.float64)
        self._velocity_sigma = np.asarray(self.params.radar_velocity_sigma, dtype=np.float64)
        self._nms_radius = np.asarray(self.params.nms_radius, dtype=np.float64)
        self._empty = Objects.empty(self._n_sources)  # shared: read-only, returned wherever nothing is found
        for f in fields(self._empty):
            getattr(self._empty, f.name).setflags(write=False)
        self._radar_only_labels = np.array([_TRUCK, _CAR, _CYCLIST, _PEDESTRIAN], dtype=np.intp)  # by strength
        self._radar_index = np.array([s.index for s in sensors if s.role is FusionRole.DOPPLER_POINTS], dtype=np.intp)
        self._tracker = Tracker(config, self.params, self._names) if config.tracking else None
        self._lock = threading.Lock()
        self._scratch = _point_kernels.Scratch()  # the lidar points' buffers, reused frame to frame (per thread)
        self._warned: set[str] = set()
        warm_up()  # compile (or load) the compiled loops now, not on the first frame

    # -- public -------------------------------------------------------------------------------------
    def __call__(
        self, frame: Frame, results: Mapping[str, SensorResult]
    ) -> tuple[tuple[Detection3D, ...], dict[str, int]]:
        with self._lock:
            t0 = time.perf_counter_ns()
            if not self.config.enabled:
                return (), {"fusion": time.perf_counter_ns() - t0}
            motion = EgoMotion(frame, self._ego_at, warn=self._warn_once, max_age_ns=self._ego_max_age_ns)
            objs = self.fuse(frame, results, motion)
            t1 = time.perf_counter_ns()
            if self._tracker is None:
                dets = detections_from_objects(objs, self._names, self.config.score_threshold, self.params.flip_speed)
                return dets, {"fusion": time.perf_counter_ns() - t0}
            dets = self._tracker.step(frame.t_ns, objs, motion.world_from_ego)
            t2 = time.perf_counter_ns()
        return dets, {"fusion": t1 - t0, "tracking": t2 - t1}

    def predict(self, frame: Frame) -> tuple[Detection3D, ...]:
        """The tracks predicted to ``frame``'s time, without its samples (a frame shed under overload:
        :mod:`perception.scheduler._shedding`). Read-only: the tracker is not advanced, so the frames
        after it are tracked as if it never came. Without tracking there is nothing to predict: ``()``."""
        with self._lock:
            if not self.config.enabled or self._tracker is None:
                return ()
            motion = EgoMotion(frame, self._ego_at, warn=self._warn_once, max_age_ns=self._ego_max_age_ns)
            return self._tracker.predicted(frame.t_ns, motion.world_from_ego)

    def reset(self) -> None:
        """Forget all tracks (a new drive); ids restart at 1."""
        with self._lock:
            if self._tracker is not None:
                self._tracker.reset()

    def tracker_state(self) -> dict[str, npt.NDArray[np.generic]]:
        """The tracker's state now (:meth:`Tracker.state`; empty without tracking): with the detections, what
        a recorded run's per-frame digest covers (``perception.record``)."""
        with self._lock:
            return self._tracker.state() if self._tracker is not None else {}

    def restore_tracker_state(self, state: Mapping[str, npt.NDArray[np.generic]]) -> None:
        """Set the tracker's state to ``state`` (:meth:`tracker_state`'s, e.g. recorded after a frame): the frames
        fused next are tracked as they were after it. An :class:`InputError` without tracking, or for a state
        of another shape (:meth:`Tracker.restore`)."""
        with self._lock:
            if self._tracker is None:
                raise InputError("fusion tracks nothing here (tracking off): there is no tracker state to restore")
            self._tracker.restore(state)

    @property
    def sensor_names(self) -> tuple[str, ...]:
        return self._names.names

    def fuse(self, frame: Frame, results: Mapping[str, SensorResult], motion: EgoMotion | None = None) -> Objects:
        """One frame's fused objects (before tracking, score threshold and output conversion)."""
        motion = motion or EgoMotion(frame, self._ego_at, warn=self._warn_once, max_age_ns=self._ego_max_age_ns)
        prm = self.params
        lidars: list[tuple[_Sensor, LidarBoxes, int]] = []
        radars: list[tuple[_Sensor, RadarObjects, int]] = []
        cameras: list[tuple[_Sensor, CameraBoxes, int]] = []
        for name in results:
            if name not in self._names.names:
                self._warn_once(f"sensor {name!r} is not in the rig; its outputs are ignored")
        for sensor in self._sensors:
            res = results.get(sensor.name)
            if res is None or res.status is not SensorStatus.OK:
                continue
            t_s = self._sample_time(frame, res)
            try:
                if sensor.role is FusionRole.BOXES_3D:
                    lidars.append((sensor, parse_lidar(res.outputs, sensor.name, prm.lidar_min_score), t_s))
                elif sensor.role is FusionRole.DOPPLER_POINTS:
                    radars.append((sensor, parse_radar(res.outputs, sensor.name, prm.radar_min_score), t_s))
                else:  # FusionRole.IMAGE_BOXES (every role is handled: see _role)
                    cameras.append((sensor, parse_camera(res.outputs, sensor.name, prm.camera_min_score), t_s))
            except InputError as exc:
                self._warn_once(f"ignoring malformed outputs: {exc}")

        n_s = self._n_sources
        objs = Objects.concat([self._lidar(s, boxes, motion, t_s) for s, boxes, t_s in lidars], n_s)
        if not len(objs):
            objs = self._empty
        radar = self._radar(radars, motion)
        self._attach_radar(objs, radar, refine=False)
        self._finish_velocity(objs, heading_known=True)
        points = self._lidar_points(frame, motion) if self._guided is not None and cameras else None
        cands = self._cameras(cameras, objs, motion, lidar_answered=bool(lidars), points=points)
        self._attach_radar(cands, radar, refine=True)
        self._finish_velocity(cands, heading_known=False)

        parts = [objs]
        if len(cands):
            if self.config.camera_only:
                parts.append(cands)
            else:  # camera+radar and camera-guided objects only
                kept = cands.sources[:, self._radar_index].any(1)
                if self._guided is not None:
                    kept |= cands.sources[:, -1]
                parts.append(cands.take(kept.nonzero()[0]))
        if self.config.radar_only and len(radar):
            parts.append(self._radar_only(radar))
        return self._nms(Objects.concat(parts, n_s))

    # -- helpers --------------------------------------------------------------------------------------
    def _warn_once(self, message: str) -> None:
        # Bounded: messages carry shapes and names from outside, so past _MAX_WARNINGS distinct ones
        # the rest go to the debug log only.
        if message in self._warned:
            return
        if len(self._warned) < _MAX_WARNINGS:
            self._warned.add(message)
            log.warning("fusion: %s", message)
        else:
            log.debug("fusion: %s", message)

    @staticmethod
    def _sample_time(frame: Frame, res: SensorResult) -> int:
        if res.sample_t_ns is not None:
            return res.sample_t_ns
        sample = frame.samples.get(res.sensor)
        return sample.t_ns if sample is not None else frame.t_ns

    # -- lidar ------------------------------------------------------------------------------------------
    def _lidar(self, sensor: _Sensor, lidar: LidarBoxes, motion: EgoMotion, t_s: int) -> Objects:
        n = lidar.scores.shape[0]
        if n == 0:
            return self._empty
        m = motion.relative(t_s) @ sensor.extrinsic
        cov = np.zeros((n, 2, 2))
        cov[:, 0, 0] = cov[:, 1, 1] = self.params.lidar_sigma**2
        votes = np.zeros((n, len(LABELS)))
        votes[np.arange(n), lidar.labels] = self.params.lidar_class_weight * lidar.scores
        sources = np.zeros((n, self._n_sources), bool)
        sources[:, sensor.index] = True
        return Objects(
            center=transform_points(m, lidar.boxes[:, :3]),
            size=lidar.boxes[:, 3:6].copy(),
            yaw=wrap_angle(lidar.boxes[:, 6] + math.atan2(m[1, 0], m[0, 0])),
            velocity=np.zeros((n, 2)),
            vel_var=filled(n, np.inf),
            vel_full=np.zeros(n, bool),
            radial=filled((n, 3), np.nan),
            cov=cov,
            score=lidar.scores.copy(),
            votes=votes,
            sources=sources,
            age=filled(n, (motion.t_ns - t_s) * 1e-9),
            origin=np.zeros(n, np.int8),  # Origin.LIDAR
        )

    def _lidar_points(self, frame: Frame, motion: EgoMotion) -> tuple[F32, F64, IP]:
        """The frame's lidar points for the camera-guided step: a float32 cloud ``[P, >=3]`` (x, y, z first),
        the ``[4,4]`` that moves it to ``base_link`` at the frame time, and the sensor index of each lidar
        that gave any. One lidar's sweep is passed as it is, to be moved in the guided kernel's one pass
        over it; several are moved here, one compiled pass each, into this thread's reused buffer (valid
        until its next frame: the points do not leave :meth:`fuse`), with the identity."""
        clouds: list[tuple[_Sensor, PointCloudSample]] = []
        for sensor in self._sensors:
            sample = frame.samples.get(sensor.name) if sensor.role is FusionRole.BOXES_3D else None
            if isinstance(sample, PointCloudSample) and sample.points.shape[0]:
                clouds.append((sensor, sample))
        given = np.array([sensor.index for sensor, _ in clouds], np.intp)
        if len(clouds) == 1:
            sensor, sample = clouds[0]
            return sample.points, _kernels.c_array(motion.relative(sample.t_ns) @ sensor.extrinsic), given
        pts: F32 = self._scratch.array("xyz", (sum(s.points.shape[0] for _, s in clouds), 3), np.float32)
        at = 0
        for sensor, sample in clouds:
            m = _kernels.c_array(motion.relative(sample.t_ns) @ sensor.extrinsic)
            n = sample.points.shape[0]
            _point_kernels.transform_xyz(m, _point_kernels.cloud(sample.points), pts[at : at + n])
            at += n
        return pts, np.eye(4), given

    # -- radar ------------------------------------------------------------------------------------------
    def _radar(self, radars: Sequence[tuple[_Sensor, RadarObjects, int]], motion: EgoMotion) -> _Radar:
        """Every radar's objects in ``base_link`` at the frame time, propagated over their time offset."""
        prm = self.params
        counts = [r.scores.shape[0] for _, r, _ in radars]
        k = sum(counts)
        if k == 0:
            z = np.zeros(0)
            return _Radar(
                np.zeros(0, np.intp),
                np.zeros((0, 2)),
                np.zeros((0, 2)),
                np.zeros(0, bool),
                z,
                np.zeros((0, 2)),
                np.zeros((0, 2, 2)),
                z,
                z,
                z,
                np.zeros(0, bool),
                np.zeros((0, 3)),
            )
        # per radar: rotation and origin of base_link(t_f) <- radar(t_s), and the time to propagate over
        mats = [motion.relative(t_s) @ s.extrinsic for s, _, t_s in radars]
        if len(radars) == 1:
            r0 = radars[0][1]
            positions, velocity, vr, scores, rcs = r0.positions, r0.velocity, r0.radial, r0.scores, r0.rcs
            returns = r0.returns
        else:
            positions = np.concatenate([r.positions for _, r, _ in radars])
            velocity = np.concatenate([r.velocity for _, r, _ in radars])
            vr = np.concatenate([r.radial for _, r, _ in radars])
            scores = np.concatenate([r.scores for _, r, _ in radars])
            rcs = np.concatenate([r.rcs for _, r, _ in radars])
            returns = np.concatenate([r.returns for _, r, _ in radars])
        sensor, full = np.empty(k, np.intp), np.empty(k, bool)
        pos, vel, los = np.empty((k, 2)), np.empty((k, 2)), np.empty((k, 2))
        cov, radial = np.empty((k, 2, 2)), np.empty((k, 3))
        _kernels.radar_to_frame(
            _kernels.c_array(positions), _kernels.c_array(velocity), _kernels.c_array(vr),
            np.repeat(np.arange(len(radars)), counts), np.stack(mats),
            np.array([(motion.t_ns - t_s) * 1e-9 for _, _, t_s in radars]),
            np.array([s.index for s, _, _ in radars], dtype=np.intp),
            prm.radar_range_sigma, prm.radar_azimuth_sigma, prm.radar_lateral_floor,
            sensor, pos, vel, full, los, cov, radial,
        )  # fmt: skip
        return _Radar(
            sensor=sensor,
            pos=pos,
            vel=vel,
            full=full,
            vr=vr,
            los=los,
            cov=cov,
            score=scores,
            rcs=rcs,
            returns=returns,
            free=filled(k, True, bool),
            radial=radial,
        )

    def _attach_radar(self, objs: Objects, radar: _Radar, *, refine: bool) -> None:
        """Gate free radar objects to ``objs``; each joins its nearest (Mahalanobis) gated object.

        The rules are step 3 of the module docstring; the loop is :func:`._kernels.attach_radar`.
        """
        if len(objs) == 0 or not radar.free.any():
            return
        prm = self.params
        _kernels.attach_radar(
            objs.center,
            objs.size,
            objs.yaw,
            objs.cov,
            objs.labels,
            objs.score,
            objs.sources,
            objs.velocity,
            objs.vel_var,
            objs.vel_full,
            objs.radial,
            radar.pos,
            radar.cov,
            radar.vel,
            radar.full,
            radar.vr,
            radar.score,
            radar.radial,
            radar.los,
            radar.sensor,
            radar.free,
            prm.radar_gate,
            prm.radar_weight,
            prm.radar_vru_weight,
            _TRUCK,
            self._class_max_speed,
            self._radial_sigma,
            self._velocity_sigma,
            prm.radar_surface_factor,
            refine,
        )

    def _finish_velocity(self, objs: Objects, *, heading_known: bool) -> None:
        """Velocity from a radial speed where no full velocity arrived; propagate positions by age."""
        if len(objs) == 0:
            return
        prm = self.params
        _kernels.finish_velocity(
            objs.center, objs.size, objs.yaw, objs.labels, objs.velocity, objs.vel_var, objs.vel_full, objs.radial,
            objs.age, self._radial_sigma, prm.min_heading_cos, prm.max_speed, 0.1 if heading_known else 0.5,
        )  # fmt: skip

    # -- cameras ----------------------------------------------------------------------------------------
    def _cameras(
        self,
        cameras: Sequence[tuple[_Sensor, CameraBoxes, int]],
        objs: Objects,
        motion: EgoMotion,
        *,
        lidar_answered: bool,
        points: tuple[F32, F64, IP] | None = None,
    ) -> Objects:
        """Match objects with every camera's detections; return camera-only candidates (scoring at
        least ``camera_only_min_score`` when a lidar answered in the frame, else ``camera_alone_min_score``).

        Works on flat lists: detections of all cameras, and (camera, object) pairs that survive a
        bounding-sphere/frustum cull; one assignment problem covers every camera (a pair may only take a
        detection of its own camera, so each camera is still one-to-one).
        """
        prm = self.params
        c_n = len(cameras)
        if c_n == 0:
            return self._empty
        cam_sensor = np.array([s.index for s, _, _ in cameras], dtype=np.intp)
        if c_n == 1:
            det_boxes, det_scores, det_labels = cameras[0][1].boxes, cameras[0][1].scores, cameras[0][1].labels
            det_cam = np.zeros(det_scores.shape[0], np.intp)
        else:
            det_cam = np.repeat(np.arange(c_n), [cam.scores.shape[0] for _, cam, _ in cameras])
            det_boxes = np.concatenate([cam.boxes for _, cam, _ in cameras])
            det_scores = np.concatenate([cam.scores for _, cam, _ in cameras])
            det_labels = np.concatenate([cam.labels for _, cam, _ in cameras])
        rels = [motion.relative(t_s) for _, _, t_s in cameras]  # base_link(t_f) <- base_link(t_s)
        unmatched = filled(det_cam.size, True, bool)
        # for the camera-guided step: detections matched to an object, and their largest IoU with one
        matched, overlap = np.zeros(det_cam.size, bool), np.zeros(det_cam.size)
        dts = np.array([(t_s - motion.t_ns) * 1e-9 for _, _, t_s in cameras])  # capture time - frame time
        n = len(objs)
        if n:
            # camera(t_s) <- base_link(t_f); cameras of a frame usually share their capture time
            back: dict[int, F64] = {}
            for (_, _, t_s), rel in zip(cameras, rels, strict=True):
                if t_s not in back:
                    back[t_s] = invert_transform(rel)
            cam_from_base = self._sensor_from_base[cam_sensor] @ np.array([back[t_s] for _, _, t_s in cameras])
            # homogeneous pixels h = K [R|t] p; K's last row is [0, 0, 1] (checked at construction), so
            # h[..., 2] is the depth
            kpt = (self._k[cam_sensor] @ cam_from_base[:, :3, :]).transpose(0, 2, 1).copy()  # [C,4,3]
            most = c_n * n
            pc, po = np.empty(most, np.intp), np.empty(most, np.intp)
            boxes, matchable, expected = np.empty((most, 4)), np.empty(most, bool), np.empty(most, bool)
            iou, allowed = np.empty((most, det_cam.size)), np.empty((most, det_cam.size), bool)
            frustum, image_size = self._frustum.take(cam_sensor, axis=0), self._image_size.take(cam_sensor, axis=0)
            m = _kernels.camera_pairs(
                objs.center, objs.size, objs.yaw, objs.velocity, objs.vel_var, objs.origin == _LIDAR,
                cam_from_base, kpt, frustum, image_size, dts, _kernels.c_array(det_boxes), det_cam,
                prm.camera_match_pad, prm.min_visible_fraction, prm.occlusion_coverage, prm.camera_miss_max_depth,
                prm.camera_miss_min_height, prm.camera_iou,
                pc, po, boxes, matchable, expected, iou, allowed,
            )  # fmt: skip
            if m:
                pc, po, iou = pc[:m], po[:m], iou[:m]
                rows, di = assign(-iou, allowed[:m])
                if points is not None:
                    matched[di] = True
                    overlap = np.where(allowed[:m], iou, 0.0).max(axis=0)
                rows, di = _kernels.c_array(rows, np.intp), _kernels.c_array(di, np.intp)  # nonzero gives views
                _kernels.camera_evidence(
                    rows, di, pc, po, expected[:m], iou, cam_sensor, det_scores, det_labels, c_n,
                    prm.camera_class_min_score, prm.camera_weight, prm.camera_miss_min_recall, prm.camera_miss_factor,
                    prm.camera_absorb_iou, objs.score, objs.votes, objs.sources, unmatched,
                )  # fmt: skip
        widths = self._image_size[cam_sensor, 0][det_cam]
        whole = (
            (det_boxes[:, 3] - det_boxes[:, 1] >= prm.camera_only_min_height)
            & (det_boxes[:, 0] > 1.0)  # cut at the side of the image: centre and size unknown
            & (det_boxes[:, 2] < widths - 1.0)
        )
        guided = self._empty
        if points is not None and points[0].shape[0] and self._guided is not None:
            # unmatched, and overlapping no projected object by absorb_iou: a car behind a row of parked
            # cars overlaps their projections without being any of them (its points are told apart)
            free = ~matched & (overlap < self._guided.absorb_iou) if n else unmatched
            guided, used = self._camera_guided(
                points, free & whole, det_cam, det_boxes, det_scores, det_labels, cam_sensor, rels, dts, objs
            )
            unmatched[used] = False
        keep = (
            unmatched
            & whole
            & (det_scores >= (prm.camera_only_min_score if lidar_answered else prm.camera_alone_min_score))
        )
        if not keep.any():
            return guided
        di = keep.nonzero()[0]
        ci = det_cam[di]
        k = di.size
        ok, yaw = np.empty(k, bool), np.empty(k)
        center, size, cov = np.empty((k, 3)), np.empty((k, 3)), np.empty((k, 2, 2))
        _kernels.camera_candidates(
            ci, det_boxes.take(di, axis=0), det_labels[di], self._extrinsic.take(cam_sensor, axis=0),
            self._k.take(cam_sensor, axis=0), self._k_inv.take(cam_sensor, axis=0),
            self._image_size[:, 1].take(cam_sensor), np.stack(rels), _SIZES,
            prm.camera_pixel_sigma, prm.camera_height_sigma, prm.camera_max_depth,
            # writable, as every kernel's arrays: with no lidar object (a late lidar) objs is the shared,
            # read-only empty set, which would compile a second specialization mid-drive (seconds)
            _kernels.c_array(objs.center), _kernels.c_array(objs.size), _kernels.c_array(objs.yaw),
            _kernels.c_array(objs.cov), prm.camera_absorb_gate,
            ok, center, size, yaw, cov,
        )  # fmt: skip
        sel = ok.nonzero()[0]
        m = sel.size
        if m == 0:
            return guided
        cands = Objects.empty(self._n_sources, m)
        cands.center[:], cands.size[:], cands.yaw[:] = center.take(sel, axis=0), size.take(sel, axis=0), yaw[sel]
        cands.cov[:] = cov.take(sel, axis=0)
        scores, labels = det_scores[di[sel]], det_labels[di[sel]]
        cands.score[:] = prm.camera_only_factor * scores
        cands.votes[np.arange(m), labels] = scores
        cands.sources[np.arange(m), cam_sensor[ci[sel]]] = True
        cands.age[:] = -dts[ci[sel]]
        cands.origin[:] = _CAMERA
        return Objects.concat([cands, guided], self._n_sources) if len(guided) else cands

    def _camera_guided(
        self,
        points: tuple[F32, F64, IP],
        eligible: B,
        det_cam: IP,
        det_boxes: F64,
        det_scores: F64,
        det_labels: IP,
        cam_sensor: IP,
        rels: Sequence[F64],
        dts: F64,
        objs: Objects,
    ) -> tuple[Objects, IP]:
        """Camera-guided lidar objects (:mod:`._guided`) for the ``eligible`` camera detections scoring at
        least ``camera_guided.min_score``; returns them and the detections they used."""
        cfg, prm = self._guided, self.params
        assert cfg is not None
        di = (eligible & (det_scores >= cfg.min_score)).nonzero()[0]
        if di.size == 0:
            return self._empty, di
        cam_from_base = self._sensor_from_base[cam_sensor] @ np.array([invert_transform(r) for r in rels])
        known = (objs.origin == _LIDAR).nonzero()[0]
        found = camera_guided(
            cfg, points[0], points[1], det_cam[di], det_boxes.take(di, axis=0), det_labels[di], cam_from_base,
            self._k.take(cam_sensor, axis=0), self._k_inv.take(cam_sensor, axis=0), _SIZES,
            objs.center.take(known, axis=0), objs.size.take(known, axis=0), objs.yaw.take(known, axis=0),
            scratch=self._scratch,
        )  # fmt: skip
        m = found.det.size
        if m == 0:
            return self._empty, found.det
        d = di[found.det]
        out = Objects.empty(self._n_sources, m)
        out.center[:], out.size[:], out.yaw[:] = found.center, found.size, found.yaw
        # covariance: long along the line of sight (the prior's unknown heading), tight across it
        los = found.los
        var_r, var_t = prm.guided_range_sigma**2, prm.guided_lateral_sigma**2
        out.cov[:, 0, 0] = var_r * los[:, 0] ** 2 + var_t * los[:, 1] ** 2
        out.cov[:, 1, 1] = var_r * los[:, 1] ** 2 + var_t * los[:, 0] ** 2
        out.cov[:, 0, 1] = out.cov[:, 1, 0] = (var_r - var_t) * los[:, 0] * los[:, 1]
        scores, labels = det_scores[d], det_labels[d]
        out.score[:] = cfg.score_factor * scores
        out.votes[np.arange(m), labels] = scores
        out.sources[np.arange(m), cam_sensor[det_cam[d]]] = True
        out.sources[:, points[2]] = True  # the lidars whose points placed it (one on every rig we have)
        out.sources[:, -1] = True  # CAMERA_GUIDED_SOURCE
        out.age[:] = -dts[det_cam[d]]
        out.origin[:] = _CAMERA
        return out, d

    # -- radar-only ---------------------------------------------------------------------------------------
    def _radar_only(self, radar: _Radar) -> Objects:
        prm = self.params
        idx = (radar.free & (radar.score >= prm.radar_only_min_score)).nonzero()[0]
        m = idx.size
        if m == 0:
            return self._empty
        pos, vel, full, score = (
            radar.pos.take(idx, axis=0),
            radar.vel.take(idx, axis=0),
            radar.full[idx],
            radar.score[idx],
        )
        cov, sensor, los = radar.cov.take(idx, axis=0), radar.sensor[idx], radar.los.take(idx, axis=0)
        # the same object seen by two radars: merge greedily by score within the Mahalanobis gate
        group = np.empty(m, np.intp)
        _kernels.radar_groups(pos, cov, sensor, score, prm.radar_gate, group)
        slot = np.empty(m, np.intp)
        center, size, yaw, vel_out = np.empty((m, 3)), np.empty((m, 3)), np.empty(m), np.empty((m, 2))
        vel_var, vel_full, radial, cov_out = np.empty(m), np.empty(m, bool), np.empty((m, 3)), np.empty((m, 2, 2))
        score_out, labels = np.empty(m), np.empty(m, np.intp)
        n = _kernels.radar_only(
            pos, vel, full, score, cov, los, radar.rcs[idx], radar.returns[idx], radar.radial.take(idx, axis=0), group,
            _SIZES, self._velocity_sigma, self._radar_only_labels, prm.radar_truck_rcs, self._truck_returns,
            prm.radar_car_rcs, prm.flip_speed,
            prm.radar_surface_factor, prm.radar_only_factor,
            slot, center, size, yaw, vel_out, vel_var, vel_full, radial, cov_out, score_out, labels,
        )  # fmt: skip
        objs = Objects(
            center=center[:n], size=size[:n], yaw=yaw[:n], velocity=vel_out[:n], vel_var=vel_var[:n],
            vel_full=vel_full[:n], radial=radial[:n], cov=cov_out[:n], score=score_out[:n],
            votes=np.zeros((n, len(LABELS))), sources=np.zeros((n, self._n_sources), bool), age=np.zeros(n),
            origin=np.empty(n, np.int8),
        )  # fmt: skip
        objs.sources[slot, sensor] = True
        heads = (group == np.arange(m)).nonzero()[0]  # in object order
        objs.votes[np.arange(n), labels[:n]] = 0.3 * score[heads]
        objs.origin[:] = _RADAR
        self._finish_velocity(objs, heading_known=False)
        return objs

    # -- NMS ----------------------------------------------------------------------------------------------
    def _nms(self, objs: Objects) -> Objects:
        """Class-agnostic BEV NMS: rotated IoU above ``nms_iou`` or centres closer than the class radius."""
        n = len(objs)
        if n < 2:
            return objs
        radius = self._nms_radius.take(objs.labels)
        capacity = 4 * n  # candidate pairs are few: room for 4 per object, a second pass when there are more
        while True:
            first, second = np.empty(capacity, np.intp), np.empty(capacity, np.intp)
            same, check = np.empty(capacity, bool), np.empty(capacity, bool)
            k = _kernels.nms_pairs(objs.center, objs.size, objs.yaw, radius, first, second, same, check)
            if k <= capacity:
                break
            capacity = k
        if k == 0:
            return objs
        first, second, same, check = first[:k], second[:k], same[:k], check[:k]
        if check.any():  # rotated IoU only where the axis-aligned bounds overlap (side-by-side lanes do not)
            c = check.nonzero()[0]
            rect = np.column_stack([objs.center[:, :2], objs.size[:, :2], objs.yaw])
            same[c] = bev_iou_pairs(rect.take(first[c], axis=0), rect.take(second[c], axis=0)) > self.config.nms_iou
        alive = np.empty(n, bool)
        _kernels.nms_suppress(first, second, same, objs.score, alive)
        return objs.take(alive.nonzero()[0])
