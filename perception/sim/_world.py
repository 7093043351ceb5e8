"""The simulated world: a road, the ego vehicle, traffic and static scenery, as pure functions of time.

Everything lives in road (Frenet) coordinates ``(s, d)``: ``s`` is the arc length along the centre
line, ``d`` the lateral offset (left positive). The ego drives in a right-hand lane (``d < 0``) in
the ``+s`` direction; oncoming traffic uses ``d > 0``. The ground is the plane ``z = 0``, so
``base_link`` (on the ground, under the ego's rear axle) shares it.

Traffic moves analytically, so a :class:`Scene` can be evaluated at any time without stepping:

* vehicles and cyclists follow their lane with a smooth speed profile and a gentle lateral weave;
  within a lane, a follower never gets closer than a minimum gap to its leader (``min`` of the free
  motion and the leader's position minus the gap, a cumulative minimum over the lane);
* sidewalk pedestrians walk (or stand) along the sidewalk;
* crossing pedestrians walk to a crosswalk, cross the road in a gap in the traffic that is checked
  against every lane's vehicles (including the ego), and walk on along the other sidewalk.

Content is spawned in 100 m tiles, each from its own random stream, so a longer drive with the same
seed contains the same road, traffic and scenery; only road-crossing pedestrians may differ (their
gaps in the traffic are checked against every spawned vehicle, and more are spawned for longer drives).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from perception.sim._random import Stream, stream
from perception.sim._scenarios import Scenario
from perception.types import LABELS, EgoPose, GroundTruth, GroundTruthObject, Transform

__all__ = ["Ground", "GroundSampler", "Lighting", "Material", "Road", "Scene", "World"]

F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]

TILE = 100.0  # m of road per spawn tile
VIEW_RANGE = 130.0  # objects farther than this (along the road) from the ego are not in a Scene or ground truth

CAR, TRUCK, PEDESTRIAN, CYCLIST = (LABELS.index(n) for n in ("car", "truck", "pedestrian", "cyclist"))


class Material:
    """Surface kinds: decide camera texture rules and lidar reflectivity."""

    BODY = 0  # car body: head/tail lights on front/rear faces
    CABIN = 1  # car greenhouse: painted roof, glass sides
    TIRE = 2
    CAB = 3  # truck cab: windscreen on the upper front
    CARGO = 4
    CLOTH = 5
    SKIN = 6
    FRAME = 7  # bicycle
    BUILDING = 8  # windows on the sides
    POLE = 9
    BARRIER = 10


class Ground:
    """Ground surface kinds (see :meth:`Road.ground_material`)."""

    ASPHALT = 0
    WHITE = 1  # paint
    YELLOW = 2
    BIKE = 3  # painted bike lane
    SIDEWALK = 4
    VERGE = 5  # grass / gravel beyond the road
    CONCRETE = 6  # median


_DASH = 7  # internal: a dashed lane line, resolved per point

# ---------------------------------------------------------------------------------------------
# Road
# ---------------------------------------------------------------------------------------------


class Road:
    """Centre line of piecewise-constant curvature (straights and gentle arcs) plus a cross-section."""

    STEP = 0.5

    def __init__(self, scenario: Scenario, seed: int, s_min: float, s_max: float) -> None:
        self.scenario = sc = scenario
        self.s_min = math.floor(s_min / self.STEP) * self.STEP
        i0 = round(-self.s_min / self.STEP)
        n = i0 + math.ceil(s_max / self.STEP) + 2
        self.s = (np.arange(n, dtype=np.float64) - i0) * self.STEP
        self.kappa = np.zeros(n)
        for sign, key in ((1.0, Stream.ROAD_FORWARD), (-1.0, Stream.ROAD_BACKWARD)):
            rng = stream(seed, key)
            pos, straight = 0.0, True
            limit = s_max if sign > 0 else -self.s_min
            while pos < limit + 1.0:
                if straight:
                    length, k = rng.uniform(*sc.straight_len), 0.0
                else:
                    length = rng.uniform(*sc.curve_len)
                    k = rng.choice([-1.0, 1.0]) / rng.uniform(*sc.radius)
                lo, hi = (pos, pos + length) if sign > 0 else (-pos - length, -pos)
                self.kappa[(self.s >= lo) & (self.s < hi)] = k
                pos += length
                straight = not straight
        # integrate outwards from s=0 in both directions (values at s do not depend on the extent)
        self.theta = self._integrate(self.kappa, i0)
        self.x = self._integrate(np.cos(self.theta), i0)
        self.y = self._integrate(np.sin(self.theta), i0)
        self._layout()

    @classmethod
    def straight(cls, scenario: Scenario, s_min: float = -300.0, s_max: float = 300.0) -> Road:
        """A straight road along ``x`` with ``scenario``'s cross-section (for hand-made scenes)."""
        road = cls(scenario, 0, s_min, s_max)
        road.kappa[:] = 0.0
        road.theta[:] = 0.0
        road.x = road.s.copy()
        road.y = np.zeros_like(road.s)
        return road

    def _integrate(self, f: F64, i0: int) -> F64:
        out = np.zeros_like(f)
        mid = 0.5 * (f[1:] + f[:-1]) * self.STEP
        out[i0 + 1 :] = np.cumsum(mid[i0:])
        out[:i0] = -np.cumsum(mid[:i0][::-1])[::-1]
        return out

    def _layout(self) -> None:
        sc = self.scenario
        self.median_half = sc.median / 2
        self.lanes_outer = self.median_half + sc.lanes_per_dir * sc.lane_width
        self.bike_outer = self.lanes_outer + sc.bike_lane
        self.parking_outer = self.bike_outer + sc.parking
        self.edge = self.parking_outer + sc.shoulder  # curb / guardrail line
        self.sidewalk_outer = self.edge + sc.sidewalk
        self.crosswalks: F64 = np.zeros(0)
        self._band_edges: F64 | None = None
        self._band_kinds: npt.NDArray[np.int8] = np.zeros(0, dtype=np.int8)

    def lane_center(self, lane: int, side: int) -> float:
        """``d`` of lane ``lane`` (0 = innermost) on ``side`` (-1 right/ego side, +1 left)."""
        return side * (self.median_half + (lane + 0.5) * self.scenario.lane_width)

    def at(self, s: npt.ArrayLike) -> tuple[F64, F64, F64, F64]:
        """``x, y, theta, kappa`` of the centre line at arc length ``s``."""
        sa = np.asarray(s, dtype=np.float64)
        return (
            np.interp(sa, self.s, self.x),
            np.interp(sa, self.s, self.y),
            np.interp(sa, self.s, self.theta),
            np.interp(sa, self.s, self.kappa),
        )

    def to_map(self, s: npt.ArrayLike, d: npt.ArrayLike) -> tuple[F64, F64, F64, F64]:
        """Map ``x, y``, road heading and curvature at Frenet ``(s, d)``."""
        x, y, th, k = self.at(s)
        dd = np.asarray(d, dtype=np.float64)
        return x - dd * np.sin(th), y + dd * np.cos(th), th, k

    def _bands(self) -> tuple[F64, npt.NDArray[np.int8]]:
        """Ground kind as a piecewise-constant function of ``|d|``: interval edges and kinds.

        Kind ``_DASH`` marks a dashed lane line (white or asphalt depending on ``s``)."""
        sc = self.scenario
        base: list[tuple[float, float, int]] = [(0.0, self.edge, Ground.ASPHALT)]
        if sc.sidewalk > 0:
            base.append((self.edge, self.sidewalk_outer, Ground.SIDEWALK))
        if sc.bike_lane > 0:
            base.append((self.lanes_outer + 0.15, self.bike_outer, Ground.BIKE))
        if self.median_half > 0:
            base.append((0.0, self.median_half, Ground.CONCRETE))
            base.append((self.median_half + 0.17, self.median_half + 0.33, Ground.YELLOW))
        else:
            base.append((0.06, 0.18, Ground.YELLOW))  # double yellow centre line
        for k in range(1, sc.lanes_per_dir):
            x = self.median_half + k * sc.lane_width
            base.append((x - 0.075, x + 0.075, _DASH))
        base.append((self.lanes_outer - 0.075, self.lanes_outer + 0.075, Ground.WHITE))  # edge line
        edges = sorted({0.0, *(lo for lo, _, _ in base), *(hi for _, hi, _ in base)})
        kinds = []
        for lo, hi in itertools.pairwise(edges):
            mid = (lo + hi) / 2
            kind = Ground.VERGE
            for a, b, k in base:  # later entries paint over earlier ones
                if a <= mid < b:
                    kind = k
            kinds.append(kind)
        return np.array(edges[1:], dtype=np.float64), np.array([*kinds, Ground.VERGE], dtype=np.int8)

    def ground_material(self, s: F64 | F32, d: F64 | F32) -> npt.NDArray[np.int8]:
        """Ground kind at Frenet points (lane paint, bike lanes, sidewalks, crosswalk zebras)."""
        if self._band_edges is None:
            self._band_edges, self._band_kinds = self._bands()
        a = np.abs(d)
        m = self._band_kinds[np.searchsorted(self._band_edges.astype(a.dtype), a, side="right")]
        dash = np.nonzero(m == _DASH)[0]
        if dash.size:
            m[dash] = np.where(np.mod(s[dash], 12.0) < 4.0, Ground.WHITE, Ground.ASPHALT)
        if self.crosswalks.size and s.size:  # (no point: a lidar seeing no ground, or all of it hidden)
            lo, hi = float(s.min()), float(s.max())
            for cw in self.crosswalks[(self.crosswalks > lo - 2.0) & (self.crosswalks < hi + 2.0)]:
                zebra = np.nonzero(np.abs(s - cw) < 2.0)[0]
                zebra = zebra[(a[zebra] < self.lanes_outer) & (np.mod(d[zebra], 1.2) < 0.6)]
                m[zebra] = Ground.WHITE
        return m


# ---------------------------------------------------------------------------------------------
# Actors
# ---------------------------------------------------------------------------------------------

_CAR_COLOURS = np.array(
    [
        [0.92, 0.92, 0.90],  # white
        [0.06, 0.06, 0.07],  # black
        [0.42, 0.43, 0.45],  # grey
        [0.70, 0.71, 0.73],  # silver
        [0.10, 0.20, 0.55],  # blue
        [0.65, 0.07, 0.07],  # red
        [0.15, 0.30, 0.18],  # green
        [0.55, 0.45, 0.30],  # beige
    ]
)
_CAR_WEIGHTS = np.array([0.22, 0.19, 0.17, 0.15, 0.10, 0.09, 0.04, 0.04])
_TRUCK_COLOURS = np.array(
    [[0.95, 0.95, 0.95], [0.85, 0.75, 0.15], [0.70, 0.15, 0.10], [0.20, 0.30, 0.60], [0.55, 0.58, 0.60]]
)
_TRUCK_WEIGHTS = np.array([0.45, 0.15, 0.15, 0.15, 0.10])
_PANTS = np.array([[0.10, 0.12, 0.25], [0.08, 0.08, 0.08], [0.35, 0.35, 0.37], [0.55, 0.48, 0.35]])


def _sizes(rng: np.random.Generator, label: int, n: int) -> F64:
    """Length, width, height per class with realistic spread."""
    if label == CAR:
        cols = [rng.normal(4.5, 0.35, n).clip(3.6, 5.4), rng.normal(1.85, 0.09, n).clip(1.6, 2.1),
                rng.normal(1.52, 0.12, n).clip(1.3, 1.95)]
    elif label == TRUCK:
        cols = [rng.uniform(6.5, 12.0, n), rng.normal(2.5, 0.06, n).clip(2.3, 2.6), rng.uniform(2.9, 3.9, n)]
    elif label == PEDESTRIAN:
        child = rng.random(n) < 0.06
        h = np.where(child, rng.uniform(1.1, 1.4, n), rng.normal(1.72, 0.09, n).clip(1.5, 1.98))
        cols = [rng.normal(0.5, 0.05, n).clip(0.35, 0.7), rng.normal(0.62, 0.06, n).clip(0.45, 0.8), h]
    else:
        cols = [rng.normal(1.75, 0.07, n).clip(1.5, 1.95), rng.normal(0.62, 0.05, n).clip(0.5, 0.8),
                rng.normal(1.72, 0.07, n).clip(1.5, 1.9)]
    out: F64 = np.stack(cols, axis=1)
    return out


def _colours(rng: np.random.Generator, label: int, n: int) -> F64:
    """Three colour slots per actor ``[n, 3, 3]`` (meaning depends on the class's part template)."""

    def jitter() -> F64:
        out: F64 = rng.normal(0.0, 0.03, (n, 3))
        return out

    slots: list[F64]
    if label == CAR:
        body = _CAR_COLOURS[rng.choice(len(_CAR_COLOURS), n, p=_CAR_WEIGHTS)] + jitter()
        other = rng.uniform(0.1, 0.9, (n, 3))
        body = np.where((rng.random(n) < 0.07)[:, None], other, body)  # occasional unusual paint
        slots = [body, body, body]
    elif label == TRUCK:
        cargo = _TRUCK_COLOURS[rng.choice(len(_TRUCK_COLOURS), n, p=_TRUCK_WEIGHTS)] + jitter()
        cab = _TRUCK_COLOURS[rng.choice(len(_TRUCK_COLOURS), n, p=_TRUCK_WEIGHTS)] + jitter()
        slots = [cab, cargo, cargo]
    else:
        skin_l = rng.uniform(0.25, 0.85, n)[:, None]
        skin = np.array([0.95, 0.75, 0.62]) * skin_l + np.array([0.05, 0.03, 0.02])
        grey = rng.uniform(0.1, 0.7, (n, 1)) * np.ones(3)
        shirt = np.where((rng.random(n) < 0.5)[:, None], rng.uniform(0.05, 0.95, (n, 3)), grey)
        pants = _PANTS[rng.integers(0, len(_PANTS), n)] + jitter()
        second = rng.uniform(0.05, 0.9, (n, 3)) if label == CYCLIST else pants  # bicycle frame / trousers
        slots = [shirt, second, skin]
    out: F64 = np.stack(slots, axis=1).clip(0, 1)
    return out


# Part templates: rows of (x0, x1, y0, y1, z0, z1) as fractions of (l, w, h) around the box centre
# (x, y) and from the ground (z), the colour slot (-1 = fixed dark) and the material.
_TEMPLATES: dict[int, list[tuple[tuple[float, ...], int, int]]] = {
    CAR: [
        ((-0.5, 0.5, -0.5, 0.5, 0.17, 0.6), 0, Material.BODY),
        ((-0.36, 0.2, -0.46, 0.46, 0.6, 1.0), 0, Material.CABIN),
        ((0.2, 0.38, -0.5, 0.5, 0.0, 0.3), -1, Material.TIRE),
        ((-0.38, -0.2, -0.5, 0.5, 0.0, 0.3), -1, Material.TIRE),
    ],
    PEDESTRIAN: [
        ((-0.25, 0.25, -0.3, 0.3, 0.0, 0.48), 1, Material.CLOTH),
        ((-0.45, 0.45, -0.5, 0.5, 0.48, 0.85), 0, Material.CLOTH),
        ((-0.25, 0.25, -0.16, 0.16, 0.87, 1.0), 2, Material.SKIN),
    ],
    CYCLIST: [
        ((-0.5, 0.5, -0.08, 0.08, 0.0, 0.6), 1, Material.FRAME),
        ((-0.3, 0.05, -0.42, 0.42, 0.5, 0.86), 0, Material.CLOTH),
        ((-0.1, 0.08, -0.15, 0.15, 0.87, 1.0), 2, Material.SKIN),
    ],
}


def _truck_parts(size: F64) -> F64:
    """Truck parts depend on absolute cab length, so they are built per truck: ``[n, 4, 6]``."""
    length, h = size[:, 0], size[:, 2]
    one = np.ones_like(length)
    cab, gap = 2.3 / length, 2.55 / length
    rows = [
        (0.5 - cab, 0.5 * one, -0.5 * one, 0.5 * one, 0.13 * one, 0.8 * one),  # cab
        (-0.5 * one, 0.5 - gap, -0.5 * one, 0.5 * one, 0.3 * one, one),  # cargo box
        (0.5 - cab + 0.2 / length, 0.5 - 0.4 / length, -0.5 * one, 0.5 * one, 0.0 * one, 1.0 / h),  # front axle
        (-0.45 * one, -0.45 + 1.6 / length, -0.5 * one, 0.5 * one, 0.0 * one, 1.0 / h),  # rear axles
    ]
    out: F64 = np.stack([np.stack(r, axis=1) for r in rows], axis=1)
    return out


_TRUCK_META = [(0, Material.CAB), (1, Material.CARGO), (-1, Material.TIRE), (-1, Material.TIRE)]

#: Lidar reflectivity scale per material (multiplied by albedo for painted/cloth surfaces).
MATERIAL_REFLECTIVITY = np.array([0.9, 0.5, 0.1, 0.9, 0.9, 0.6, 0.5, 0.6, 0.5, 0.7, 0.6])
#: Materials whose lidar reflectivity follows their paint (albedo), by material.
_PAINTED = np.zeros(MATERIAL_REFLECTIVITY.size, dtype=bool)
_PAINTED[[Material.BODY, Material.CAB, Material.CARGO, Material.CLOTH, Material.FRAME]] = True


# ---------------------------------------------------------------------------------------------
# Lighting
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Lighting:
    """Illumination of a scene (directions in ``base_link``)."""

    sun_dir: tuple[float, float, float]  # unit vector towards the sun
    sun: float  # direct light strength
    ambient: float
    sky_zenith: tuple[float, float, float]
    sky_horizon: tuple[float, float, float]
    tint: tuple[float, float, float]  # white balance of the light


_SKIES = {
    "clear": ((0.22, 0.42, 0.78), (0.70, 0.80, 0.92), (1.0, 0.98, 0.95), 0.75, 0.45),
    "overcast": ((0.55, 0.58, 0.62), (0.78, 0.80, 0.82), (0.95, 0.97, 1.0), 0.25, 0.75),
    "dusk": ((0.18, 0.22, 0.45), (0.95, 0.62, 0.40), (1.0, 0.80, 0.62), 0.55, 0.35),
}


# ---------------------------------------------------------------------------------------------
# Scene
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, eq=False)
class Scene:
    """The world at one instant, in ``base_link``.

    ``objects`` are the ground-truth actors. For rendering, every object is an *envelope* (its GT
    box) made of *parts* (body, cabin, wheels; legs, torso, head...) and the static scenery adds one
    envelope/part per box (buildings, poles, barriers). All boxes only rotate about ``z``.
    """

    t_ns: int
    ego: EgoPose
    track_id: I64  # [N]
    label: I64  # [N] index into LABELS
    center: F64  # [N,3] box centre
    size: F64  # [N,3] length, width, height
    yaw: F64  # [N]
    velocity: F64  # [N,2] over ground, in base_link
    env_center: F64  # [E,3] envelopes: the N objects, then scenery
    env_half: F64  # [E,3]
    env_yaw: F64  # [E]
    env_parts: I64  # [E,2] part index range [start, stop)
    part_center: F64  # [P,3]
    part_half: F64  # [P,3]
    part_yaw: F64  # [P]
    part_colour: F64  # [P,3] albedo, 0..1
    part_refl: F64  # [P] lidar reflectivity 0..1
    part_material: I64  # [P]
    part_owner: I64  # [P] envelope index
    ground_s: F64  # centre-line samples around the ego, in base_link: s, x, y, heading
    ground_x: F64
    ground_y: F64
    ground_th: F64
    ego_d: float
    road: Road
    light: Lighting

    @property
    def n_objects(self) -> int:
        return int(self.track_id.shape[0])

    @classmethod
    def from_boxes(
        cls,
        objects: Sequence[GroundTruthObject],
        *,
        t_ns: int = 0,
        scenery: Sequence[tuple[tuple[float, float, float], tuple[float, float, float], float]] = (),
        road: Road | None = None,
        ego_d: float = -1.75,
        light: Lighting | None = None,
        colour: tuple[float, float, float] = (0.8, 0.1, 0.1),
    ) -> Scene:
        """A hand-made scene (tests, examples): ``objects`` in ``base_link`` as single plain boxes,
        static ``scenery`` boxes ``(center, size, yaw)``, on a straight road (ego at lateral ``ego_d``)."""
        from perception.sim._scenarios import SCENARIOS
        from perception.types import Transform

        road = road or Road.straight(SCENARIOS["urban"])
        n, m = len(objects), len(scenery)
        center = np.array([o.center for o in objects], dtype=np.float64).reshape(n, 3)
        size = np.array([o.size for o in objects], dtype=np.float64).reshape(n, 3)
        yaw = np.array([o.yaw for o in objects], dtype=np.float64).reshape(n)
        sc_center = np.array([c for c, _, _ in scenery], dtype=np.float64).reshape(m, 3)
        sc_size = np.array([s for _, s, _ in scenery], dtype=np.float64).reshape(m, 3)
        sc_yaw = np.array([y for _, _, y in scenery], dtype=np.float64).reshape(m)
        env_center = np.concatenate([center, sc_center])
        env_half = np.concatenate([size, sc_size]) / 2
        env_yaw = np.concatenate([yaw, sc_yaw])
        k = n + m
        material = np.array([Material.CARGO] * n + [Material.BUILDING] * m, dtype=np.int64)
        gs = np.arange(-200.0, 260.0, 2.0)
        return cls(
            t_ns=t_ns,
            ego=EgoPose(t_ns=t_ns, pose=Transform()),
            track_id=np.array([o.track_id for o in objects], dtype=np.int64).reshape(n),
            label=np.array([LABELS.index(o.label) for o in objects], dtype=np.int64).reshape(n),
            center=center, size=size, yaw=yaw,
            velocity=np.array([o.velocity for o in objects], dtype=np.float64).reshape(n, 2),
            env_center=env_center, env_half=env_half, env_yaw=env_yaw,
            env_parts=np.stack([np.arange(k), np.arange(k) + 1], axis=1).astype(np.int64),
            part_center=env_center, part_half=env_half, part_yaw=env_yaw,
            part_colour=np.array([colour] * n + [(0.6, 0.6, 0.6)] * m, dtype=np.float64).reshape(k, 3),
            part_refl=np.full(k, 0.5), part_material=material, part_owner=np.arange(k, dtype=np.int64),
            ground_s=gs, ground_x=gs, ground_y=np.full_like(gs, -ego_d), ground_th=np.zeros_like(gs),
            ego_d=ego_d, road=road,
            light=light or Lighting((0.3, 0.2, 0.93), 0.7, 0.45, _SKIES["clear"][0], _SKIES["clear"][1],
                                    (1.0, 1.0, 1.0)),
        )

    def ground_truth(self) -> GroundTruth:
        objs = tuple(
            GroundTruthObject(
                track_id=int(self.track_id[i]),
                label=LABELS[int(self.label[i])],
                center=(float(self.center[i, 0]), float(self.center[i, 1]), float(self.center[i, 2])),
                size=(float(self.size[i, 0]), float(self.size[i, 1]), float(self.size[i, 2])),
                yaw=float(self.yaw[i]),
                velocity=(float(self.velocity[i, 0]), float(self.velocity[i, 1])),
            )
            for i in range(self.n_objects)
        )
        return GroundTruth(t_ns=self.t_ns, objects=objs)

    def ground_frenet(self, x: F64, y: F64) -> tuple[F64, F64]:
        """Approximate Frenet ``(s, d)`` of ground points given in ``base_link`` (road gently curved)."""
        yc = np.interp(x, self.ground_x, self.ground_y)
        th = np.interp(x, self.ground_x, self.ground_th)
        sc = np.interp(x, self.ground_x, self.ground_s)
        dy = y - yc
        return sc + dy * np.sin(th), dy * np.cos(th)

    def ground_material(self, x: F64, y: F64) -> npt.NDArray[np.int8]:
        s, d = self.ground_frenet(x, y)
        return self.road.ground_material(s, d)


class GroundSampler:
    """Ground kinds at fixed ``base_link`` ground points (a sensor's ground hits never move).

    Per scene the centre line is resampled on a uniform ``x`` grid once; each point then needs only
    precomputed grid indices and weights instead of a search.
    """

    X0, DX, N = -220.0, 0.5, 1000

    def __init__(self, x: F64, y: F64) -> None:
        self.grid = self.X0 + np.arange(self.N) * self.DX
        f = np.clip((np.asarray(x, dtype=np.float64) - self.X0) / self.DX, 0, self.N - 1.001)
        self.i = f.astype(np.int64)
        self.w = (f - self.i).astype(np.float32)
        self.y = np.asarray(y, dtype=np.float32)

    def material(self, scene: Scene, sel: I64 | None = None) -> npt.NDArray[np.int8]:
        """Ground kinds of the points (of the points ``sel`` only, if given: same values, less work)."""
        return scene.road.ground_material(*self.frenet(scene, sel))

    def frenet(self, scene: Scene, sel: I64 | None = None) -> tuple[F32, F32]:
        """``(s, d)`` of the points (or of the points ``sel``) in ``scene`` (float32: millimetres at
        100 km are plenty for paint). Every point's value is independent of the others."""
        yc = np.interp(self.grid, scene.ground_x, scene.ground_y).astype(np.float32)
        th = np.interp(self.grid, scene.ground_x, scene.ground_th)
        sin_t, cos_t = np.sin(th).astype(np.float32), np.cos(th).astype(np.float32)
        sc = np.interp(self.grid, scene.ground_x, scene.ground_s).astype(np.float32)
        i, w, y = (self.i, self.w, self.y) if sel is None else (self.i[sel], self.w[sel], self.y[sel])
        dy = y - (yc[i] * (1 - w) + yc[i + 1] * w)
        return sc[i] + dy * sin_t[i], dy * cos_t[i]


# ---------------------------------------------------------------------------------------------
# World
# ---------------------------------------------------------------------------------------------


_CROSSERS = 99  # pseudo group of crossing pedestrians in track ids


def _track_id(group: int, tile: int, j: int) -> int:
    """Stable track id from where an actor was spawned (independent of the drive's duration)."""
    return (group + 1) * 1_000_000_000 + (tile + 100_000) * 1_000 + j


def _wrap(a: F64) -> F64:
    out: F64 = (a + np.pi) % (2 * np.pi) - np.pi
    return out


@dataclass(slots=True)
class _Group:
    """A lane or strip whose members move along ``s`` (``dir`` +1/-1, 0 for parked)."""

    index: int
    d: float
    direction: int
    follow: bool
    members: I64  # actor indices sorted leader first (descending dir * s0)
    spacing_sum: F64 | None = None  # cumulative minimum spacings (constant: computed once, by _follow)


class World:
    """A deterministic world for ``scenario`` and ``seed``, valid for ``t`` in ``[0, duration_s]``."""

    def __init__(self, scenario: Scenario, seed: int, duration_s: float) -> None:
        self.scenario = sc = scenario
        self.seed = seed
        self.duration_s = duration_s
        ego_rng = stream(seed, Stream.EGO)
        self.ego_amp = float(ego_rng.uniform(0.0, 0.05))
        self.ego_omega = float(2 * np.pi / ego_rng.uniform(15.0, 40.0))
        self.ego_phase = float(ego_rng.uniform(0, 2 * np.pi))
        v_max = max(sc.lane_speed[1], sc.ego_speed) * 1.25
        travel = sc.ego_speed * 1.06 * duration_s
        # spawn range: everything that can come within VIEW_RANGE of the ego during the drive
        self.s_lo = -VIEW_RANGE - 20.0 - v_max * duration_s
        self.s_hi = travel + VIEW_RANGE + 20.0 + v_max * duration_s
        self.road = Road(sc, seed, self.s_lo - 300.0, self.s_hi + 300.0)  # covers the ground paint lookups too
        r = self.road
        self.ego_d = r.lane_center(sc.ego_lane, -1)
        self._light_rng = stream(seed, Stream.LIGHT)
        self._init_light()
        self._spawn()

    # -- ego ---------------------------------------------------------------------------------------

    def ego_s(self, t: F64 | float) -> tuple[Any, Any]:
        """Ego arc length and speed at ``t`` (s)."""
        v, a, w, p = self.scenario.ego_speed, self.ego_amp, self.ego_omega, self.ego_phase
        s = v * t + v * a / w * (np.cos(p) - np.cos(w * t + p))
        return s, v * (1 + a * np.sin(w * t + p))

    def ego_pose(self, t_ns: int) -> EgoPose:
        t = t_ns * 1e-9
        s, v = self.ego_s(t)
        x, y, th, k = self.road.to_map(s, self.ego_d)
        speed = float(v * (1 - float(k) * self.ego_d))
        pose = Transform((float(x), float(y), 0.0), (0.0, 0.0, math.sin(float(th) / 2), math.cos(float(th) / 2)))
        return EgoPose(t_ns=t_ns, pose=pose, linear_velocity=(speed, 0.0, 0.0), yaw_rate=float(k * v))

    # -- spawning ----------------------------------------------------------------------------------

    def _init_light(self) -> None:
        rng = self._light_rng
        self.sky = str(rng.choice(["clear", "clear", "overcast", "dusk"]))
        self.sun_az = float(rng.uniform(-np.pi, np.pi))
        self.sun_el = float(rng.uniform(0.15, 0.5) if self.sky == "dusk" else rng.uniform(0.4, 1.2))
        self.cloud_omega = float(2 * np.pi / rng.uniform(20.0, 60.0))
        self.cloud_phase = float(rng.uniform(0, 2 * np.pi))
        self.exposure = float(rng.uniform(0.85, 1.1))

    def _spawn(self) -> None:
        sc, r = self.scenario, self.road
        cols: dict[str, list[Any]] = {k: [] for k in ("label", "size", "colour", "s0", "d0", "group", "speed",
                                                        "amp", "omega", "phase", "weave", "wphase", "dir",
                                                        "track")}
        groups: list[tuple[float, int, str]] = []  # (d, direction, kind)
        for side in (-1, 1):
            direction = 1 if side < 0 else -1
            for lane in range(sc.lanes_per_dir):
                groups.append((r.lane_center(lane, side), direction, "vehicle"))
            if sc.bike_lane > 0 and sc.cyclists_per_100m > 0:
                groups.append((side * (r.lanes_outer + sc.bike_lane / 2 + 0.1), direction, "bike"))
            if sc.parking > 0 and sc.parked_per_100m > 0:
                groups.append((side * (r.bike_outer + sc.parking / 2), direction, "parked"))
            if sc.sidewalk > 0 and sc.pedestrians_per_100m > 0:
                groups.append((side * (r.edge + sc.sidewalk / 2), 0, "walk"))
        # crosswalks (urban): fixed s positions, parked cars keep clear of them
        if sc.crosswalk_spacing > 0:
            cw_rng = stream(self.seed, Stream.CROSSWALK)
            first = cw_rng.uniform(20.0, sc.crosswalk_spacing)
            k0 = math.floor((self.s_lo - first) / sc.crosswalk_spacing)
            k1 = math.ceil((self.s_hi - first) / sc.crosswalk_spacing)
            r.crosswalks = first + np.arange(k0, k1 + 1) * sc.crosswalk_spacing
            self.crosswalk_ids = np.arange(k0, k1 + 1)
        ego_v_max = sc.ego_speed * (1 + self.ego_amp)
        n_actors = 1  # actor 0 is the ego
        self._group_defs: list[tuple[float, int, str, list[int]]] = []
        for gi, (d, direction, kind) in enumerate(groups):
            members: list[int] = []
            for tile in range(math.floor(self.s_lo / TILE), math.ceil(self.s_hi / TILE)):
                rng = stream(self.seed, Stream.GROUP + gi, tile)
                rows = self._spawn_tile(rng, kind, direction, d, tile * TILE, (tile + 1) * TILE)
                for j, row in enumerate(rows):
                    row["track"] = _track_id(gi, tile, j)
                    s0 = row["s0"]
                    is_ego_lane = kind == "vehicle" and direction == 1 and abs(d - self.ego_d) < 0.1
                    if is_ego_lane and abs(s0) < 15.0:
                        continue  # room for the ego
                    if is_ego_lane and s0 > 0:  # leaders of the ego never hold it up
                        row["speed"] = max(row["speed"], ego_v_max / (1 - row["amp"]) * 1.03)
                    if kind == "parked" and r.crosswalks.size and np.min(np.abs(r.crosswalks - s0)) < 6.0:
                        continue
                    row["group"] = gi
                    row["dir"] = direction if kind != "walk" else row["dir"]
                    for k, col in cols.items():
                        col.append(row[k])
                    members.append(n_actors)
                    n_actors += 1
            self._group_defs.append((d, direction, kind, members))
        # actor arrays; index 0 = ego (label -1)
        self.label = np.array([-1, *cols["label"]], dtype=np.int64)
        self.size = np.array([[4.6, 1.9, 1.5], *cols["size"]], dtype=np.float64).reshape(-1, 3)
        self.colour = np.array([np.zeros((3, 3)), *cols["colour"]], dtype=np.float64).reshape(-1, 3, 3)
        ego_group = next(i for i, g in enumerate(self._group_defs)
                         if g[2] == "vehicle" and g[1] == 1 and abs(g[0] - self.ego_d) < 0.1)
        self.s0 = np.array([0.0, *cols["s0"]])
        self.d0 = np.array([self.ego_d, *cols["d0"]])
        self.group = np.array([ego_group, *cols["group"]], dtype=np.int64)
        self.speed = np.array([sc.ego_speed, *cols["speed"]])
        self.amp = np.array([self.ego_amp, *cols["amp"]])
        self.omega = np.array([self.ego_omega, *cols["omega"]])
        self.phase = np.array([self.ego_phase, *cols["phase"]])
        self.weave = np.array([0.0, *cols["weave"]])
        self.wphase = np.array([0.0, *cols["wphase"]])
        self.dir = np.array([1, *cols["dir"]], dtype=np.int64)
        self.track_id = np.array([0, *cols["track"]], dtype=np.int64)
        self.groups: list[_Group] = []
        for gi, (d, direction, kind, members) in enumerate(self._group_defs):
            idx = np.array(([0] if gi == ego_group else []) + members, dtype=np.int64)
            p0 = direction * self.s0[idx] if direction else self.s0[idx]
            idx = idx[np.argsort(-p0, kind="stable")]
            self.groups.append(_Group(gi, d, direction, kind in ("vehicle", "bike"), idx))
        self._spawn_crossings()
        self._spawn_scenery()
        self._build_parts()

    def _spawn_tile(self, rng: np.random.Generator, kind: str, direction: int, d: float, lo: float,
                    hi: float) -> list[dict[str, Any]]:
        sc = self.scenario
        rows: list[dict[str, Any]] = []
        if kind == "walk":
            n = rng.poisson(sc.pedestrians_per_100m * (hi - lo) / 100.0)
            for _ in range(n):
                standing = rng.random() < 0.12
                rows.append(self._row(rng, PEDESTRIAN, rng.uniform(lo, hi),
                                      d + rng.uniform(-0.4, 0.4) * sc.sidewalk,
                                      0.0 if standing else rng.uniform(0.9, 1.7), 0.0, 0.05,
                                      int(rng.choice([-1, 1]))))
            return rows
        if kind == "parked":
            density, speed_rng = sc.parked_per_100m, (0.0, 0.0)
        elif kind == "bike":
            density, speed_rng = sc.cyclists_per_100m, (3.5, 6.5)
        else:
            density, speed_rng = sc.vehicles_per_100m, sc.lane_speed
        lane_speed = rng.uniform(*speed_rng)
        mean_gap = max(100.0 / density - 5.0, 3.0)
        s = lo + rng.exponential(mean_gap / 2)
        while s < hi:
            if kind == "bike":
                label = CYCLIST
            else:
                label = TRUCK if rng.random() < (sc.truck_fraction * (0.4 if kind == "parked" else 1.0)) else CAR
            row = self._row(rng, label, 0.0, d, lane_speed * (1 + rng.normal(0, 0.04)) if kind != "parked" else 0.0,
                            rng.uniform(0.0, 0.06) if kind != "parked" else 0.0,
                            0.12 if kind != "parked" else 0.0, direction)
            length = row["size"][0]
            row["s0"] = s + length / 2
            if kind == "parked":
                row["d0"] = d + rng.normal(0, 0.1) * np.sign(d)
            rows.append(row)
            s += length + 2.0 + 0.6 * lane_speed + rng.exponential(mean_gap)
        return rows

    @staticmethod
    def _row(rng: np.random.Generator, label: int, s0: float, d0: float, speed: float, amp: float, weave: float,
             direction: int) -> dict[str, Any]:
        return {
            "label": label, "size": _sizes(rng, label, 1)[0], "colour": _colours(rng, label, 1)[0],
            "s0": s0, "d0": d0, "speed": speed, "amp": amp, "omega": 2 * np.pi / rng.uniform(12.0, 40.0),
            "phase": rng.uniform(0, 2 * np.pi), "weave": weave * rng.random(),
            "wphase": rng.uniform(0, 2 * np.pi), "dir": direction, "group": -1,
        }

    # -- motion ------------------------------------------------------------------------------------

    def _free(self, t: F64) -> tuple[F64, F64]:
        """Free progress ``p = dir * (s - s0)`` and speed of every actor at times ``t`` ([T,A])."""
        tt = np.asarray(t, dtype=np.float64)[:, None]
        v, a, w, p = self.speed, self.amp, self.omega, self.phase
        prog = v * tt + v * a / w * (np.cos(p) - np.cos(w * tt + p))
        return prog, v * (1 + a * np.sin(w * tt + p))

    def _lane_s(self, t: F64, g: _Group) -> F64:
        """Arc length ``[T, members]`` of one following group's members (car-following applied)."""
        m = g.members
        tt = t[:, None]
        v, a, w, p = self.speed[m], self.amp[m], self.omega[m], self.phase[m]
        prog = v * tt + v * a / w * (np.cos(p) - np.cos(w * tt + p))
        s: F64 = self.s0[m] + self.dir[m] * prog
        if m.size > 1:
            s = self._follow(g, s)[0]
        return s

    def _follow(self, g: _Group, s: F64) -> tuple[F64, I64]:
        """Car-following in one lane: ``s [T, members]`` (leader first) -> constrained ``s`` and the
        index of the member whose free motion each one ends up following.

        ``s_i = min_j<=i (p_j - D_ji)`` with ``D_ji`` the minimum spacing from ``j`` back to ``i``.
        Spacings are multiples of 2^-10 m so their sums are exact: a vehicle's position never depends
        on how many vehicles were spawned ahead of it (i.e. on the drive's duration)."""
        m = g.members
        c = g.spacing_sum
        if c is None:
            half = self.size[m, 0] / 2
            spacing = np.zeros(m.size)
            spacing[1:] = np.round((half[1:] + half[:-1] + 2.0 + 0.4 * self.speed[m[1:]]) * 1024.0) / 1024.0
            c = g.spacing_sum = np.cumsum(spacing)
        p = g.direction * s
        key = p + c
        run = np.minimum.accumulate(key, axis=1)
        arg = np.maximum.accumulate(np.where(key <= run, np.arange(m.size), 0), axis=1)
        out: F64 = g.direction * (p[np.arange(p.shape[0])[:, None], arg] - (c - c[arg]))  # take_along_axis
        return out, arg

    def _states(self, t: F64) -> tuple[F64, F64, F64, F64]:
        """``s, ds/dt, d, dd/dt`` of every actor at times ``t`` (arrays ``[T, A]``)."""
        prog, vel = self._free(t)
        s = self.s0 + self.dir * prog
        sdot = self.dir * vel
        for g in self.groups:
            if not g.follow or g.members.size < 2:
                continue
            m = g.members
            s[:, m], arg = self._follow(g, s[:, m])
            sdot[:, m] = sdot[:, m][np.arange(sdot.shape[0])[:, None], arg]  # take_along_axis, less overhead
        w = 2 * np.pi / 17.0
        tt = np.asarray(t, dtype=np.float64)[:, None]
        d = self.d0 + self.weave * np.sin(w * tt + self.wphase)
        ddot = self.weave * w * np.cos(w * tt + self.wphase)
        self._apply_crossings(np.asarray(t, dtype=np.float64), s, sdot, d, ddot)
        return s, sdot, d, ddot

    # -- crossing pedestrians ----------------------------------------------------------------------

    def _spawn_crossings(self) -> None:
        sc, r = self.scenario, self.road
        self.cross_idx = np.zeros(0, dtype=np.int64)
        if not r.crosswalks.size or sc.crossings_per_minute <= 0:
            return
        rows: list[dict[str, Any]] = []
        plans: list[tuple[float, float, float, float, float, float, int]] = []
        blocking = [g for g in self.groups if g.follow]
        road_half = r.edge
        # crossers walk ~1.5 m/s: beyond this reach of the ego's path they can never be in view
        reach = VIEW_RANGE + 1.5 * (self.duration_s + 15.0)
        s_end = float(self.ego_s(self.duration_s)[0])
        for cw_id, s_cw in zip(self.crosswalk_ids, r.crosswalks, strict=True):
            if not -reach <= s_cw <= s_end + reach:
                continue
            rng = stream(self.seed, Stream.CROSSWALK, 1, int(cw_id))
            event = 0
            t_start = rng.exponential(60.0 / sc.crossings_per_minute) - 10.0
            while t_start < self.duration_s + 5.0:
                side = int(rng.choice([-1, 1]))
                v_cross = rng.uniform(1.1, 1.6)
                off = rng.uniform(-1.5, 1.5)
                ok_t = self._find_gap(s_cw + off, side, v_cross, t_start, blocking, road_half)
                approach = int(rng.choice([-1, 1]))
                leave = int(rng.choice([-1, 1]))
                row = self._row(rng, PEDESTRIAN, s_cw + off, side * (road_half + 0.6), 1.2, 0.0, 0.0, 0)
                event += 1
                if ok_t is not None:
                    row["group"] = -1
                    row["track"] = _track_id(_CROSSERS, int(cw_id), event)
                    rows.append(row)
                    plans.append((s_cw + off, side * (road_half + 0.6), ok_t, v_cross,
                                  rng.uniform(0.9, 1.5), approach, leave))
                t_start += rng.exponential(60.0 / sc.crossings_per_minute) + 4.0
        if not rows:
            return
        base = self.label.shape[0]
        self.label = np.concatenate([self.label, [row["label"] for row in rows]])
        self.size = np.concatenate([self.size, [row["size"] for row in rows]])
        self.colour = np.concatenate([self.colour, [row["colour"] for row in rows]])
        zeros = np.zeros(len(rows))
        for name in ("s0", "d0", "speed", "amp", "weave", "wphase"):
            setattr(self, name, np.concatenate([getattr(self, name), [row[name] for row in rows]]))
        self.omega = np.concatenate([self.omega, zeros + 1.0])
        self.phase = np.concatenate([self.phase, zeros])
        self.dir = np.concatenate([self.dir, np.zeros(len(rows), dtype=np.int64)])
        self.group = np.concatenate([self.group, np.full(len(rows), -1, dtype=np.int64)])
        self.track_id = np.concatenate([self.track_id, [row["track"] for row in rows]]).astype(np.int64)
        self.cross_idx = np.arange(base, base + len(rows), dtype=np.int64)
        self.cross_plan = np.array(plans, dtype=np.float64)  # s, d_start, t_start, v_cross, v_walk, app, leave

    def _find_gap(self, s_cw: float, side: int, v: float, t0: float, groups: list[_Group],
                  road_half: float) -> float | None:
        """First start time >= ``t0`` (within 25 s) at which crossing meets no vehicle, else None."""
        span = 2 * road_half / v
        times = np.arange(t0 - 1.0, t0 + 25.0 + span + 1.0, 0.1)
        lanes = {g.index: self._lane_s(times, g) for g in groups}
        d_from = side * road_half
        for shift in np.arange(0.0, 25.0, 0.5):
            ts = t0 + shift
            ok = True
            for g in groups:
                # while the pedestrian (walking from d_from towards -d_from) is in this lane's band
                ta = ts + (abs(d_from - g.d) - 2.2) / v - 0.8
                tb = ts + (abs(d_from - g.d) + 2.2) / v + 0.8
                rows = (times >= ta) & (times <= tb)
                near = np.abs(lanes[g.index][rows] - s_cw) < self.size[g.members, 0] / 2 + 1.5
                if near.any():
                    ok = False
                    break
            if ok:
                return float(ts)
        return None

    def _states_no_cross(self, t: F64) -> tuple[F64, F64, F64, F64]:
        saved = self.cross_idx
        self.cross_idx = np.zeros(0, dtype=np.int64)
        try:
            return self._states(t)
        finally:
            self.cross_idx = saved

    def _apply_crossings(self, t: F64, s: F64, sdot: F64, d: F64, ddot: F64) -> None:
        if not self.cross_idx.size:
            return
        idx = self.cross_idx
        s_cw, d_start, t_start, v_c, v_w, app, leave = self.cross_plan.T
        tt = t[:, None]
        width = 2 * np.abs(d_start)
        t_end = t_start + width / v_c
        before, after = tt < t_start, tt > t_end
        crossing = ~before & ~after
        s[:, idx] = np.where(before, s_cw + app * v_w * (tt - t_start),
                             np.where(after, s_cw + leave * v_w * (tt - t_end), s_cw))
        sdot[:, idx] = np.where(before, app * v_w, np.where(after, leave * v_w, 0.0))
        d_dir = -np.sign(d_start)
        d[:, idx] = np.where(before, d_start, np.where(after, -d_start, d_start + d_dir * v_c * (tt - t_start)))
        ddot[:, idx] = np.where(crossing, d_dir * v_c, 0.0)

    # -- scenery -----------------------------------------------------------------------------------

    def _spawn_scenery(self) -> None:
        sc, r = self.scenario, self.road
        rows: list[tuple[float, float, float, float, float, float, float, float, int]] = []
        # (s, d, z0, length, width, height, colour grey/hue index, reflect, material) in road frame
        colours: list[tuple[float, float, float]] = []
        for side in (-1, 1):
            for tile in range(math.floor(self.s_lo / TILE), math.ceil(self.s_hi / TILE)):
                rng = stream(self.seed, Stream.SCENERY + (side + 1), tile)
                lo, hi = tile * TILE, (tile + 1) * TILE
                if sc.buildings:
                    s = lo + rng.uniform(0, 8)
                    while s < hi:
                        length = rng.uniform(10.0, 30.0)
                        depth = rng.uniform(8.0, 16.0)
                        setback = r.sidewalk_outer + rng.uniform(0.5, 4.0)
                        rows.append((s + length / 2, side * (setback + depth / 2), 0.0, length, depth,
                                     rng.uniform(6.0, 24.0), 0, 0, Material.BUILDING))
                        base = np.array([[0.75, 0.68, 0.58], [0.62, 0.35, 0.28], [0.6, 0.6, 0.6],
                                         [0.82, 0.8, 0.74], [0.45, 0.47, 0.5]])[rng.integers(0, 5)]
                        colours.append(tuple((base + rng.normal(0, 0.03, 3)).clip(0, 1)))
                        s += length + rng.choice([0.3, 0.3, 4.0, 10.0])
                    for k in range(3):  # street lights
                        ps = lo + (k + 0.5) * TILE / 3 + rng.uniform(-2, 2)
                        rows.append((ps, side * (r.edge + 0.5), 0.0, 0.22, 0.22, 6.0, 0, 0, Material.POLE))
                        colours.append((0.35, 0.37, 0.38))
                if sc.guardrail:
                    for k in range(5):
                        rows.append((lo + (k + 0.5) * 20.0, side * (r.edge + 0.3), 0.3, 20.0, 0.15, 0.45,
                                     0, 0, Material.BARRIER))
                        colours.append((0.72, 0.74, 0.76))
                    if rng.random() < 0.6:
                        rows.append((lo + rng.uniform(0, TILE), side * (r.edge + 1.5), 0.0, 0.3, 0.3, 8.0, 0, 0,
                                     Material.POLE))
                        colours.append((0.4, 0.42, 0.44))
            if sc.median > 0 and side < 0:
                for tile in range(math.floor(self.s_lo / TILE), math.ceil(self.s_hi / TILE)):
                    for k in range(5):
                        rows.append((tile * TILE + (k + 0.5) * 20.0, 0.0, 0.0, 20.0, 0.5, 0.85, 0, 0,
                                     Material.BARRIER))
                        colours.append((0.68, 0.67, 0.64))
        arr = np.array(rows, dtype=np.float64).reshape(-1, 9)
        x, y, th, _ = r.to_map(arr[:, 0], arr[:, 1])
        self.sc_s = arr[:, 0]
        self.sc_xy = np.stack([x, y], axis=1)
        self.sc_z0 = arr[:, 2]
        self.sc_size = arr[:, 3:6]
        self.sc_yaw = th
        self.sc_material = arr[:, 8].astype(np.int64)
        self.sc_colour = np.array(colours, dtype=np.float64).reshape(-1, 3)

    # -- scene -------------------------------------------------------------------------------------

    def light(self, t: float, ego_yaw: float = 0.0) -> Lighting:
        """Lighting at ``t``; directions in ``base_link`` of an ego with heading ``ego_yaw``."""
        zen, hor, tint, sun, amb = _SKIES[self.sky]
        cloud = 1.0 + 0.12 * math.sin(self.cloud_omega * t + self.cloud_phase)
        return Lighting(
            sun_dir=(math.cos(self.sun_el) * math.cos(self.sun_az - ego_yaw),
                     math.cos(self.sun_el) * math.sin(self.sun_az - ego_yaw), math.sin(self.sun_el)),
            sun=sun * cloud * self.exposure, ambient=amb * self.exposure,
            sky_zenith=zen, sky_horizon=hor, tint=tint,
        )

    def ground_truth(self, t_ns: int) -> GroundTruth:
        """Ground truth at ``t_ns``: what :meth:`scene` would hold, without building its geometry."""
        _, idx, center, size, yaw, vel, _ = self._objects(t_ns)
        objs = tuple(
            GroundTruthObject(
                track_id=int(self.track_id[j]), label=LABELS[int(self.label[j])],
                center=(float(center[i, 0]), float(center[i, 1]), float(center[i, 2])),
                size=(float(size[i, 0]), float(size[i, 1]), float(size[i, 2])), yaw=float(yaw[i]),
                velocity=(float(vel[i, 0]), float(vel[i, 1])),
            )
            for i, j in enumerate(idx)
        )
        return GroundTruth(t_ns=t_ns, objects=objs)

    def _objects(self, t_ns: int) -> tuple[EgoPose, I64, F64, F64, F64, F64, float]:
        """Ego pose and the actors within ``VIEW_RANGE`` (indices, centre, size, yaw, velocity) in base_link."""
        t = t_ns * 1e-9
        r = self.road
        ego = self.ego_pose(t_ns)
        s_all, sdot_all, d_all, ddot_all = self._states(np.array([t]))
        s, sdot, d, ddot = s_all[0], sdot_all[0], d_all[0], ddot_all[0]
        s_e = float(s[0])
        near = (np.abs(s - s_e) < VIEW_RANGE) & (self.label >= 0)
        idx = np.nonzero(near)[0]
        x, y, th, k = r.to_map(s[idx], d[idx])
        # heading: along the direction of travel (+ weave / crossing angle), road direction if standing
        along = sdot[idx] * (1 - k * d[idx])
        moving = np.hypot(along, ddot[idx]) > 0.05
        facing = np.where(self.dir[idx] < 0, np.pi, 0.0)
        facing = np.where(self.group[idx] < 0, -np.pi / 2 * np.sign(d[idx]), facing)  # crossers face the road
        yaw_map = np.where(moving, th + np.arctan2(ddot[idx], along), th + facing)
        ct, st = np.cos(th), np.sin(th)
        vx = along * ct - ddot[idx] * st
        vy = along * st + ddot[idx] * ct
        # to base_link
        e_yaw = ego.pose.yaw()
        ce, se = math.cos(e_yaw), math.sin(e_yaw)
        ex, ey, _ = ego.pose.translation
        dx, dy = x - ex, y - ey
        bx, by = ce * dx + se * dy, -se * dx + ce * dy
        size = self.size[idx]
        center = np.stack([bx, by, size[:, 2] / 2], axis=1)
        yaw = _wrap(yaw_map - e_yaw)
        vel = np.stack([ce * vx + se * vy, -se * vx + ce * vy], axis=1)
        return ego, idx, center, size, yaw, vel, s_e

    def scene(self, t_ns: int) -> Scene:
        """The world at ``t_ns`` in ``base_link`` (objects within ``VIEW_RANGE`` along the road)."""
        t = t_ns * 1e-9
        r = self.road
        ego, idx, center, size, yaw, vel, s_e = self._objects(t_ns)
        e_yaw = ego.pose.yaw()
        ce, se = math.cos(e_yaw), math.sin(e_yaw)
        ex, ey, _ = ego.pose.translation
        # scenery
        sidx = np.nonzero(np.abs(self.sc_s - s_e) < VIEW_RANGE)[0]
        sdx, sdy = self.sc_xy[sidx, 0] - ex, self.sc_xy[sidx, 1] - ey
        ssize = self.sc_size[sidx]
        sc_center = np.stack([ce * sdx + se * sdy, -se * sdx + ce * sdy, self.sc_z0[sidx] + ssize[:, 2] / 2], axis=1)
        sc_yaw = _wrap(self.sc_yaw[sidx] - e_yaw)
        parts = self._parts(idx, center, yaw)
        n_obj = idx.size
        p_center, p_half, p_yaw, p_colour, p_mat, p_owner = parts
        env_parts = np.zeros((n_obj + sidx.size, 2), dtype=np.int64)
        starts = np.searchsorted(p_owner, np.arange(n_obj))
        env_parts[:n_obj, 0] = starts
        env_parts[:n_obj, 1] = np.searchsorted(p_owner, np.arange(n_obj), side="right")
        base = p_owner.size
        env_parts[n_obj:, 0] = base + np.arange(sidx.size)
        env_parts[n_obj:, 1] = base + np.arange(sidx.size) + 1
        part_center = np.concatenate([p_center, sc_center])
        part_half = np.concatenate([p_half, ssize / 2])
        part_yaw = np.concatenate([p_yaw, sc_yaw])
        part_colour = np.concatenate([p_colour, self.sc_colour[sidx]])
        part_mat = np.concatenate([p_mat, self.sc_material[sidx]])
        part_owner = np.concatenate([p_owner, n_obj + np.arange(sidx.size)])
        albedo = part_colour.mean(axis=1)
        painted = _PAINTED[part_mat]
        refl = MATERIAL_REFLECTIVITY[part_mat] * np.where(painted, 0.25 + 0.75 * albedo, 1.0)
        # centre line around the ego for ground shading
        gs = s_e + np.arange(-200.0, 260.0, 2.0)
        gx, gy, gth, _ = r.to_map(gs, 0.0)
        gdx, gdy = gx - ex, gy - ey
        return Scene(
            t_ns=t_ns, ego=ego, track_id=self.track_id[idx], label=self.label[idx], center=center, size=size,
            yaw=yaw, velocity=vel,
            env_center=np.concatenate([center, sc_center]), env_half=np.concatenate([size, ssize]) / 2,
            env_yaw=np.concatenate([yaw, sc_yaw]), env_parts=env_parts,
            part_center=part_center, part_half=part_half, part_yaw=part_yaw, part_colour=part_colour,
            part_refl=refl, part_material=part_mat, part_owner=part_owner,
            ground_s=gs, ground_x=ce * gdx + se * gdy, ground_y=-se * gdx + ce * gdy,
            ground_th=_wrap(gth - e_yaw), ego_d=self.ego_d, road=r, light=self.light(t, e_yaw),
        )

    def _build_parts(self) -> None:
        """Part boxes of every actor in its own frame (z from the ground), flattened by actor."""
        n = self.label.shape[0]
        lo_all, hi_all, mat_all, slot_all, owner_all = [], [], [], [], []
        for label in range(len(LABELS)):
            sel = np.nonzero(self.label == label)[0]
            if not sel.size:
                continue
            size = self.size[sel]
            if label == TRUCK:
                frac, meta = _truck_parts(size), _TRUCK_META
            else:
                frac = np.broadcast_to(np.array([r for r, _, _ in _TEMPLATES[label]]),
                                       (sel.size, len(_TEMPLATES[label]), 6))
                meta = [(c, m) for _, c, m in _TEMPLATES[label]]
            k = frac.shape[1]
            lo_all.append((frac[..., 0::2] * size[:, None, :]).reshape(-1, 3))
            hi_all.append((frac[..., 1::2] * size[:, None, :]).reshape(-1, 3))
            slot_all.append(np.tile(np.array([c for c, _ in meta], dtype=np.int64), sel.size))
            mat_all.append(np.tile(np.array([m for _, m in meta], dtype=np.int64), sel.size))
            owner_all.append(np.repeat(sel, k))
        owner = np.concatenate(owner_all) if owner_all else np.zeros(0, dtype=np.int64)
        order = np.argsort(owner, kind="stable")
        lo = np.concatenate(lo_all)[order] if lo_all else np.zeros((0, 3))
        hi = np.concatenate(hi_all)[order] if hi_all else np.zeros((0, 3))
        self.pt_local = (lo + hi) / 2
        self.pt_half = (hi - lo) / 2
        self.pt_material = np.concatenate(mat_all)[order] if mat_all else np.zeros(0, dtype=np.int64)
        slot = np.concatenate(slot_all)[order] if slot_all else np.zeros(0, dtype=np.int64)
        owner = owner[order]
        colour = self.colour[owner, np.maximum(slot, 0)]
        self.pt_colour = np.where((slot < 0)[:, None], 0.05, colour)
        self.pt_start = np.searchsorted(owner, np.arange(n))
        self.pt_count = np.searchsorted(owner, np.arange(n), side="right") - self.pt_start

    def _parts(self, idx: I64, center: F64, yaw: F64) -> tuple[F64, F64, F64, F64, I64, I64]:
        """Part boxes of the selected actors, posed, ordered by owner (object index in the scene)."""
        from perception.sim._raycast import expand_ranges

        group, offset = expand_ranges(self.pt_count[idx])
        p = self.pt_start[idx][group] + offset
        local = self.pt_local[p]
        c, s = np.cos(yaw)[group], np.sin(yaw)[group]
        pc = np.empty_like(local)
        pc[:, 0] = center[group, 0] + c * local[:, 0] - s * local[:, 1]
        pc[:, 1] = center[group, 1] + s * local[:, 0] + c * local[:, 1]
        pc[:, 2] = local[:, 2]
        return pc, self.pt_half[p], yaw[group], self.pt_colour[p], self.pt_material[p], group
