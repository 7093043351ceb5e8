"""Multi-object tracker: constant-velocity Kalman filters in the world frame beside a standing-still
model, Hungarian association.

State per track: ``[x, y, vx, vy]`` in the world frame (``map`` when ego poses are known, otherwise the
frame's ``base_link`` — then ego motion is not compensated), with covariance; a standing-still position
with its covariance, and each model's discounted prediction error, which say whether the track is
*still* (:mod:`._track_kernels`, module docstring); plus smoothed height, size, yaw (lidar boxes: yaw
modulo pi, since a sweep cannot tell front from back), class evidence and score. Each stage of a step
is one compiled loop over the tracks or the (track, detection) pairs (:mod:`._track_kernels`).

Why two models: a parked car's box fit jitters from frame to frame (a sparse fragment's L-fit, its
hidden sides completed), and the constant-velocity filter reads the jitter as motion. On the nuScenes
scene its cars stood still (median 0.03 m/s) while their tracks moved at a median 1.65 m/s, and a
coasting track drifted 2.2 m. The standing-still model averages such a car's detections instead.

Per frame:

1. predict every track to the frame time (white-noise acceleration, per-class sigma; the standing-still
   position's variance grows by a small random walk; the error sums are discounted);
2. associate detections to tracks: squared Mahalanobis distance of the detection position from the
   track's (the constant-velocity prediction, the detection moved by the track velocity over its
   ``age``; a still track's standing-still position) under ``P_pos + R``, plus a penalty when labels
   differ; pairs beyond the chi-square gate or ``track_max_distance`` are not allowed; Hungarian. Then
   the young tracks and the detections left, of the same class, under either model (:meth:`Tracker._associate`);
3. update matched tracks with the position, then with a full radar velocity (2D measurement, applied
   as two scalar ones: its noise is isotropic) or a radial radar velocity (scalar ``u . v``
   measurement: the track's own direction resolves the rest); update the standing-still position and
   both models' errors, and judge whether the track is still;
4. unmatched tracks coast (predicted state, decaying score); a tentative track (fewer than
   ``track_min_hits`` hits) dies on its first miss, a confirmed one after ``track_max_misses``;
5. unmatched detections start tentative tracks.

Output: every track observed this frame and every confirmed coasting track, in ``base_link`` at the
frame time (a still track where it stands, with zero velocity once it is no longer young), ``id`` =
track id, ``sources`` = the sensors of this frame's detection (``()`` when coasting), score = smoothed
detection score times ``tentative_factor`` (unconfirmed) and ``track_coast_decay ** misses``. Frames
older than the last one (out-of-order completion) are answered read-only: detections take the id of
the track they associate with, the tracks are untouched; a detection associated with none takes a fresh id
(the next id advances: no track ever has it).

The world frame is the tracks', whatever a frame knows: once tracks are held in ``map``, a frame without an
ego pose (odometry stopped, ``live.ego_max_age_ms``) takes the last pose stepped with (an unknown ego motion is
none, as fusion's compensation takes it), never ``base_link`` read as ``map``; tracks held in ``base_link``
(no pose yet) are dropped when the first pose comes (logged), never read as ``map`` ones.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from dataclasses import fields

import numpy as np
import numpy.typing as npt

from perception.config import FusionConfig
from perception.errors import InputError
from perception.fusion import _track_kernels as _tk
from perception.fusion._associate import assign_pairs
from perception.fusion._kernels import c_array
from perception.fusion._objects import Objects, SourceNames
from perception.fusion._params import FusionParams
from perception.types import LABELS, Detection3D

__all__ = ["Tracker", "detections_from_objects"]

log = logging.getLogger(__name__)

F64 = npt.NDArray[np.float64]
B = npt.NDArray[np.bool_]
I64 = npt.NDArray[np.int64]
IP = npt.NDArray[np.intp]
_POS, _VEL = slice(0, 2), slice(2, 4)  # columns of the track table (all in _track_kernels)


def _face_velocity(yaw: F64, velocity: F64, min_speed: float) -> F64:
    """Yaws (any angle) wrapped, and turned by pi where they point against a velocity faster than
    ``min_speed`` (:func:`._track_kernels.face_velocity`)."""
    out = np.empty(yaw.shape[0])
    _tk.face_velocity(c_array(yaw), c_array(velocity), float(min_speed), out)
    return out


def _sigma(cov: F64) -> F64:
    """``[N,2]`` x, y standard deviations of ``[N,2,2]`` covariances."""
    out: F64 = np.sqrt(np.maximum(np.diagonal(cov, axis1=1, axis2=2), 0.0))
    return out


def _rows(score: F64, center: F64, size: F64, yaw: F64, vel: F64, sigma: F64) -> F64:
    """Output rows (:data:`._track_kernels.OUT_COLS`) of detections given by their fields."""
    out: F64 = np.column_stack([score, center, size, yaw, vel, sigma])
    return out


def detections_from_objects(
    objs: Objects, names: SourceNames, threshold: float, min_speed: float
) -> tuple[Detection3D, ...]:
    """Untracked output: ``id`` is the index among this frame's emitted detections."""
    keep = objs.score >= threshold
    if not keep.all():
        objs = objs.take(keep)
    n = len(objs)
    if n == 0:
        return ()
    vel = np.where(np.isfinite(objs.vel_var)[:, None], objs.velocity, 0.0)
    yaw = _face_velocity(objs.yaw, vel, min_speed)
    rows = _rows(objs.score, objs.center, objs.size, yaw, vel, _sigma(objs.cov))
    return _build(np.arange(n), objs.labels, rows, names(objs.sources))


def _build(ids: I64 | IP, labels: I64 | IP, rows: F64, sources: list[tuple[str, ...]]) -> tuple[Detection3D, ...]:
    """Detections from their ids, labels, output rows ``[M, OUT_COLS]`` (score, centre, size, yaw,
    velocity, sigma) and sources."""
    # columns as Python lists by one conversion; vectors as tuples by zipping their columns; Detection3D
    # built positionally (half the cost of keyword arguments)
    c = rows.T.tolist()
    return tuple(
        map(
            Detection3D,
            ids.tolist(),
            [LABELS[lab] for lab in labels.tolist()],
            c[0],
            zip(c[1], c[2], c[3], strict=True),
            zip(c[4], c[5], c[6], strict=True),
            c[7],
            zip(c[8], c[9], strict=True),
            zip(c[10], c[11], strict=True),
            sources,
        )
    )


_FIELDS = tuple(f.name for f in fields(Objects))


def _contiguous(objs: Objects) -> Objects:
    """``objs`` with every field C-contiguous and writable, as the kernels take them (one specialization
    each)."""
    return Objects(*[c_array(a, a.dtype) for a in map(objs.__getattribute__, _FIELDS)])


class Tracker:
    """Tracks fused objects across frames (see the module docstring). Not thread-safe: one caller.

    State is one table row per track (columns in :mod:`._track_kernels`: kinematic state, height, size,
    yaw, score, hits, misses, id, class votes), a ``[T,4,4]`` covariance stack and a ``[T,S]`` sources
    mask. Each stage of a step is one compiled loop over the tracks or the (track, detection) pairs
    (:mod:`._track_kernels`): at tens of tracks a numpy call costs 1-5 us whatever the array size, so
    whole-array code paid for its number of calls, not its arithmetic.
    """

    def __init__(self, config: FusionConfig, params: FusionParams, names: SourceNames) -> None:
        self.config = config
        self.params = params
        self.names = names
        self._accel_var = np.asarray(params.track_accel_sigma, np.float64) ** 2
        self._init_speed_var = np.asarray(params.track_init_speed_sigma, np.float64) ** 2
        self._radial_var = np.asarray(params.radar_radial_sigma, np.float64) ** 2
        self._still_margin = np.asarray(params.track_still_margin, np.float64)
        # update weights of (z, size, yaw) indexed by 2 * (track has no box yet) + (detection is a lidar box):
        # until a track has a box its size and heading are its detection's; the first box sets them, later
        # boxes are smoothed in, other detections leave them; height is smoothed in from every detection,
        # except that the first box sets it
        sa, ya = params.track_size_alpha, params.track_yaw_alpha
        self._alpha = np.array([[sa, 0.0, 0.0], [sa, sa, ya], [sa, 1.0, 1.0], [1.0, 1.0, 1.0]], np.float64)
        _tk.warm_up()  # compile (or load) the kernels now, not on the first frame
        self.reset()

    def reset(self) -> None:
        """Forget every track and restart ids at 1 (a new drive)."""
        self._next_id = 1
        self._t_ns: int | None = None
        #: ``map <- base_link`` of the last frame stepped with a pose: the tracks are held in ``map`` (None: in
        #: ``base_link``, no pose stepped with yet).
        self._world: F64 | None = None
        self.table: F64 = np.zeros((0, _tk.NCOL))
        self.p: F64 = np.zeros((0, 4, 4))
        self.sources: B = np.zeros((0, len(self.names.names)), bool)

    def __len__(self) -> int:
        return int(self.table.shape[0])

    def state(self) -> dict[str, npt.NDArray[np.generic]]:
        """The whole state as arrays (copies): the track table, covariances, sources, the next id, the
        last frame time (-1 before the first) and the pose the tracks are held against (``world``: ``[1,4,4]``,
        or ``[0,4,4]`` while they are held in ``base_link``) -- what a digest of the tracker covers."""
        return {
            "table": self.table.copy(),
            "p": self.p.copy(),
            "sources": self.sources.copy(),
            "next_id": np.array([self._next_id], np.int64),
            "t_ns": np.array([-1 if self._t_ns is None else self._t_ns], np.int64),
            "world": np.zeros((0, 4, 4)) if self._world is None else self._world[None].copy(),
        }

    def restore(self, state: Mapping[str, npt.NDArray[np.generic]]) -> None:
        """Set the whole state to ``state`` (copies), as :meth:`state` gave it: a recorded run replayed from a
        later segment starts from the state recorded after a frame (``perception.record``). A state of another
        shape (another rig's sources, another table layout) is an :class:`InputError` naming the array. A state
        without ``world`` (recorded before it was part of it: format 5 and older) takes its tracks as they were taken
        then: held in the frame of the next pose, identity until one comes (the frame they are in is unknown)."""
        n = self.names.names
        want = {"table": (-1, _tk.NCOL), "p": (-1, 4, 4), "sources": (-1, len(n)), "next_id": (1,), "t_ns": (1,)}
        world = state.get("world", np.eye(4)[None])  # before it was recorded: as then, the next pose's frame
        if not isinstance(world, np.ndarray) or world.shape not in ((0, 4, 4), (1, 4, 4)):
            shape = world.shape if isinstance(world, np.ndarray) else type(world).__name__
            raise InputError(f"tracker state: 'world' is {shape}, expected [0 or 1, 4, 4]", tensor="world")
        rows: set[int] = set()
        for key, shape in want.items():
            a = state.get(key)
            if not isinstance(a, np.ndarray) or a.ndim != len(shape):
                raise InputError(f"tracker state: {key!r} missing or not a {len(shape)}-d array", tensor=key)
            if any(w not in (-1, got) for w, got in zip(shape, a.shape, strict=True)):
                raise InputError(f"tracker state: {key!r} has shape {a.shape}, expected {shape} (-1: any)", tensor=key)
            if shape[0] == -1:
                rows.add(a.shape[0])
        if len(rows) > 1:
            raise InputError(f"tracker state: its arrays have different numbers of tracks ({sorted(rows)})")
        self.table = np.array(state["table"], np.float64)
        self.p = np.array(state["p"], np.float64)
        self.sources = np.array(state["sources"], bool)
        self._next_id = int(state["next_id"][0])
        t_ns = int(state["t_ns"][0])
        self._t_ns = None if t_ns < 0 else t_ns
        self._world = np.array(world[0], np.float64) if len(world) else None

    @property
    def ids(self) -> I64:
        out: I64 = self.table[:, _tk.ID].astype(np.int64)
        return out

    # -- helpers ----------------------------------------------------------------------------------
    def _world_now(self, world_from_ego: F64 | None) -> F64:
        """``map <- base_link`` to step, predict or answer a frame with: its own pose; without one, the last
        pose stepped with while the tracks are held in ``map`` (module docstring), else identity (``base_link``)."""
        if world_from_ego is not None:
            return c_array(world_from_ego)
        return np.eye(4) if self._world is None else self._world

    def _keep(self, mask: B) -> None:
        idx = mask.nonzero()[0]
        self.table, self.p = self.table.take(idx, axis=0), self.p.take(idx, axis=0)
        self.sources = self.sources.take(idx, axis=0)

    def _associate(self, table: F64, zw: F64, rw: F64, objs: Objects, labels: IP) -> tuple[IP, IP]:
        """Hungarian assignment of detections to tracks whose (predicted) rows are ``table``, among the
        candidate pairs of :func:`._track_kernels.candidates`, in two rounds: each track as its motion model
        predicts it (a still track where it stands); then the young tracks
        (:data:`._track_kernels.YOUNG_HITS`) and the detections of their class left, under either model:
        a track is born still, and a moving object's next detections may lie beyond where it stands
        before its velocity has told the models apart."""
        prm = self.params
        n_t, n_d = table.shape[0], zw.shape[0]
        ti, di, cost = np.empty(n_t * n_d, np.intp), np.empty(n_t * n_d, np.intp), np.empty(n_t * n_d)
        args = (table, self.p, zw, rw, objs.age, labels, float(prm.track_max_distance) ** 2, float(prm.track_gate))
        m = _tk.candidates(*args, float(prm.track_label_penalty), False, ti, di, cost)
        rows, cols = assign_pairs(ti[:m], di[:m], cost[:m], (n_t, n_d))
        if rows.size == min(n_t, n_d) or not table[:, _tk.STILL].any():
            return rows, cols
        young, free = table[:, _tk.HITS] < _tk.YOUNG_HITS, np.ones(n_d, bool)  # and left by the first round
        young[rows], free[cols] = False, False
        # buffers of its own: the first round's answer may be views of ti and di (assign_pairs)
        ti, di, cost = np.empty(n_t * n_d, np.intp), np.empty(n_t * n_d, np.intp), np.empty(n_t * n_d)
        m = _tk.candidates(*args, float(prm.track_label_penalty), True, ti, di, cost)
        same = table[ti[:m], _tk.VOTES :].argmax(axis=1) == labels[di[:m]]
        keep = (young[ti[:m]] & free[di[:m]] & same).nonzero()[0]
        more_rows, more_cols = assign_pairs(ti[keep], di[keep], cost[keep], (n_t, n_d))
        return np.concatenate([rows, more_rows]), np.concatenate([cols, more_cols])

    # -- the frame step ---------------------------------------------------------------------------
    def step(self, t_ns: int, objs: Objects, world_from_ego: F64 | None) -> tuple[Detection3D, ...]:
        """Advance to ``t_ns`` with this frame's fused objects (``base_link``); returns the tracks' output."""
        prm, cfg = self.params, self.config
        w = self._world_now(world_from_ego)
        w2 = c_array(w[:2, :2])
        ego_yaw = math.atan2(w[1, 0], w[0, 0])
        objs = _contiguous(objs)
        n = len(objs)
        zw, rw = np.empty((n, 3)), np.empty((n, 2, 2))  # detections in the world frame
        _tk.to_world(objs.center, objs.cov, w, zw, rw)
        labels = objs.labels

        if self._t_ns is not None and t_ns < self._t_ns:
            return self._read_only(t_ns, objs, zw, rw, labels, w2)
        dt = 0.0 if self._t_ns is None else (t_ns - self._t_ns) * 1e-9
        if dt > prm.track_max_gap_s and len(self):
            log.info("tracker: %.2f s gap between frames, dropping %d tracks", dt, len(self))
            self._keep(np.zeros(len(self), bool))
        if world_from_ego is not None:
            if self._world is None and len(self):  # held in base_link (no pose yet): not map coordinates
                log.info("tracker: the ego pose is known from now on; dropping %d tracks held without it", len(self))
                self._keep(np.zeros(len(self), bool))
            self._world = w.copy()
        self._t_ns = t_ns
        if dt > 0 and len(self):
            _tk.predict(
                self.table, self.p, dt, self._accel_var, float(prm.track_still_sigma) ** 2,
                math.exp(-dt / float(prm.track_model_memory_s)),
            )  # fmt: skip

        ti, di = self._associate(self.table, zw, rw, objs, labels)
        alive = np.empty(len(self), bool)
        dead = _tk.update(
            self.table, self.p, self.sources, ti, di, zw, rw, objs.age, labels, objs.velocity, objs.vel_var,
            objs.vel_full, objs.radial, objs.size, objs.yaw, objs.score, objs.votes, objs.sources, objs.origin, w2,
            ego_yaw, self._radial_var, self._alpha, float(prm.track_score_alpha), float(prm.track_vote_decay),
            int(cfg.track_min_hits), int(cfg.track_max_misses), self._still_margin, float(prm.track_gate), alive,
        )  # fmt: skip
        if dead:
            self._keep(alive)
        if di.size < n:  # births
            new = np.empty(n, bool)
            if _tk.new_detections(self.table, self.p, zw, rw, objs.age, objs.origin, di, float(prm.track_gate), new):
                self._birth(new.nonzero()[0], objs, zw, rw, labels, w2, ego_yaw)
        return self._output(w, ego_yaw)

    def _birth(self, idx: IP, objs: Objects, zw: F64, rw: F64, labels: IP, w2: F64, ego_yaw: float) -> None:
        m = idx.size
        rows, p = np.empty((m, _tk.NCOL)), np.empty((m, 4, 4))
        _tk.birth_rows(
            idx, zw, rw, objs.age, labels, objs.velocity, objs.vel_var, objs.size, objs.yaw, objs.score, objs.votes,
            objs.origin, w2, ego_yaw, self._init_speed_var, self._next_id, self._still_margin,
            float(self.params.track_gate), rows, p,
        )  # fmt: skip
        self._next_id += m
        self.table = np.concatenate([self.table, rows])
        self.p = np.concatenate([self.p, p])
        self.sources = np.concatenate([self.sources, objs.sources.take(idx, axis=0)])

    def predicted(self, t_ns: int, world_from_ego: F64 | None) -> tuple[Detection3D, ...]:
        """The tracks' output predicted to ``t_ns`` without any detection (a frame shed under overload),
        read-only: the state is untouched, so frames after it are tracked as if it never came. A time
        before the last frame's moves the tracks back along their velocities (as :meth:`_read_only`);
        past ``track_max_gap_s`` nothing is predicted (the tracker would drop its tracks)."""
        if self._t_ns is None or not len(self):
            return ()
        prm = self.params
        dt = (t_ns - self._t_ns) * 1e-9
        if dt > prm.track_max_gap_s:
            return ()
        w = self._world_now(world_from_ego)
        table, p = self.table.copy(), self.p.copy()
        if dt > 0:
            _tk.predict(
                table, p, dt, self._accel_var, float(prm.track_still_sigma) ** 2,
                math.exp(-dt / float(prm.track_model_memory_s)),
            )  # fmt: skip
        else:
            table[:, _POS] += dt * table[:, _VEL]
        return self._output(w, math.atan2(w[1, 0], w[0, 0]), table, p)

    def _output(
        self, w: F64, ego_yaw: float, table: F64 | None = None, p: F64 | None = None
    ) -> tuple[Detection3D, ...]:
        prm = self.params
        table = self.table if table is None else table
        p = self.p if p is None else p
        n_t = len(self)
        idx, ints, rows = np.empty(n_t, np.intp), np.empty((n_t, 2), np.int64), np.empty((n_t, _tk.OUT_COLS))
        m = _tk.track_rows(
            table, p, w, ego_yaw, int(self.config.track_min_hits), bool(prm.emit_tentative),
            float(prm.tentative_factor), float(prm.track_coast_decay), float(self.config.score_threshold),
            float(prm.flip_speed), idx, ints, rows,
        )  # fmt: skip
        if not m:
            return ()
        return _build(ints[:m, 0], ints[:m, 1], rows[:m], self.names(self.sources.take(idx[:m], axis=0)))

    def _read_only(self, t_ns: int, objs: Objects, zw: F64, rw: F64, labels: IP, w2: F64) -> tuple[Detection3D, ...]:
        assert self._t_ns is not None
        log.debug("tracker: frame at %d is older than the last (%d); answering read-only", t_ns, self._t_ns)
        dt = (t_ns - self._t_ns) * 1e-9
        table = self.table.copy()
        table[:, _POS] += dt * table[:, _VEL]  # association takes a still track's own position (STILL)
        table[(table[:, _tk.STILL] != 0.0) & (table[:, _tk.HITS] >= _tk.YOUNG_HITS), _VEL] = 0.0  # as output
        ti, di = self._associate(table, zw, rw, objs, labels)
        keep = objs.score >= self.config.score_threshold
        ids = np.full(len(objs), -1, np.int64)
        ids[di] = table[ti, _tk.ID].astype(np.int64)
        fresh = ids < 0
        ids[fresh] = np.arange(self._next_id, self._next_id + int(fresh.sum()))
        self._next_id += int(fresh.sum())
        vel = np.where(np.isfinite(objs.vel_var)[:, None], objs.velocity, 0.0)
        vel[di] = table[ti, _VEL] @ w2  # world -> base_link: R^T v, i.e. v @ R for row vectors
        yaw = _face_velocity(objs.yaw, vel, self.params.flip_speed)
        rows = _rows(objs.score, objs.center, objs.size, yaw, vel, _sigma(objs.cov))
        k = keep.nonzero()[0]
        return _build(ids[k], labels[k], rows[k], self.names(objs.sources[k]))
