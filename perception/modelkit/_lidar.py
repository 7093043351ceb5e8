"""Reference lidar detector: classical geometry, no learned weights, Triton-independent.

Pipeline (each stage a public function, unit-tested on synthetic clouds)::

    sanitize_points      drop NaN/inf rows, crop to [min_range, max_range] horizontally
    estimate_ground      grid lower envelope + local averaging -> ground height under every point
    (split)              keep points between ground_clearance and max_height above the ground
    voxel_downsample     only when more than ``voxel_above`` object points remain
    cluster_bev          connected components of a bird's-eye-view occupancy grid
    fit_box_bev          L-shape fit (closeness criterion) per cluster -> oriented BEV rectangle
    classify / complete  size/shape rules -> label + score; hidden sides of cars/trucks completed

Frames and units: the sensor frame of the lidar (metres; yaw about +z, counter-clockwise from +x).
Boxes are ``x, y, z, l, w, h, yaw`` with ``z`` the box centre, ``l`` along ``yaw``; the bottom of a
box is the estimated ground under it (points near the ground are removed before clustering, so the
lowest returns of an object would otherwise be lost). ``yaw`` is in ``(-pi/2, pi/2]``: a single sweep
cannot tell front from back.

Ground estimation is designed for sloped and uneven roads: every ``ground_cell`` square gets the lowest
return in it; cells whose lowest return is within ``ground_candidate_tol`` of the lowest in a
``ground_envelope`` window are ground samples; the ground height of a cell is the mean of the ground
samples around it (normalised box filter, so a linear slope is estimated without bias), falling back
to a wider window where there is no nearby ground (far range, under large objects). Low objects
(legs, wheels, kerbs) are never taken as ground on their own because the averaging window always
contains true ground next to them.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
from scipy import ndimage
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components
from scipy.spatial import cKDTree

from perception.types import LABELS

__all__ = [
    "LidarDetections",
    "LidarParams",
    "SizePrior",
    "cluster_adaptive",
    "cluster_bev",
    "detect_lidar",
    "estimate_ground",
    "fit_box_bev",
    "merge_fragments",
    "sanitize_points",
    "voxel_downsample",
]

F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]
I32 = npt.NDArray[np.int32]
I64 = npt.NDArray[np.int64]

CAR, TRUCK, PEDESTRIAN, CYCLIST = (LABELS.index(n) for n in ("car", "truck", "pedestrian", "cyclist"))


@dataclass(frozen=True, slots=True)
class SizePrior:
    """Typical size of a class (m) and how far the height may deviate (1 sigma)."""

    length: float
    width: float
    height: float
    height_sigma: float
    max_length: float  # observed length beyond this rules the class out
    max_width: float
    min_height: float
    max_height: float
    weight: float = 1.0  # prior belief, breaks ties between classes of similar size


def _default_priors() -> dict[int, SizePrior]:
    return {
        CAR: SizePrior(4.5, 1.85, 1.55, 0.25, 6.2, 2.5, 1.0, 2.3),
        TRUCK: SizePrior(8.5, 2.5, 3.2, 0.6, 13.0, 3.2, 2.1, 4.5, 0.9),
        PEDESTRIAN: SizePrior(0.6, 0.6, 1.75, 0.2, 1.3, 1.3, 1.0, 2.2, 0.9),
        CYCLIST: SizePrior(1.8, 0.6, 1.7, 0.2, 2.4, 1.2, 1.2, 2.2, 0.8),
    }


@dataclass(frozen=True, slots=True)
class LidarParams:
    """Tunables of :func:`detect_lidar` (all metres unless said otherwise)."""

    min_range: float = 1.0  # horizontal; drops returns from the ego vehicle
    max_range: float = 80.0
    ground_sector_deg: float = 1.0  # polar grid of the ground scan: azimuth sectors...
    ground_bin: float = 1.0  # ...and range bins
    ground_start_range: float = 12.0  # the road height is first estimated within this range
    ground_tol: float = 0.12  # a bin's lowest return this close to the predicted road is road
    ground_slope_change: float = 0.05  # extra tolerance per metre since the last road bin (flat bins)
    ground_flat_spread: float = 0.3  # a bin with less height spread than this is "flat"
    ground_max_slope: float = 0.15  # road grade bound (rise/run)
    ground_drop: float = 0.5  # a bin this far below the predicted road is an outlier, not road
    ground_refine_cell: float = 0.0  # Cartesian second pass, e.g. 0.5 (see _refine_ground); 0 = polar scan only
    ground_refine_sigma: float = 1.5  # its smoothing (cells)
    ground_refine_min_change: float = 0.1  # the second pass overrides the scan only where they differ more
    ground_window: float = 2.0  # road cells are within ground_tol of the lowest returns this close (detrended)
    ground_clearance: float = 0.2  # returns lower than this above the ground are ground
    max_height: float = 4.5  # returns higher than this above the ground are ignored (canopy, signs)
    voxel_size: float = 0.1
    voxel_above: int = 60_000  # downsample object points only beyond this count
    cluster_cell: float = 0.3  # structure removal grid (poles, long low structures), see cluster_bev
    cluster_eps: float = 0.45  # clustering: BEV points closer than this always join (cluster_adaptive)...
    cluster_eps_gain: float = 0.03  # ...and closer than this times the range (sparse far rings)...
    cluster_eps_max: float = 1.0  # ...up to this
    structure_height: float = 4.3  # a cluster with returns this high above the ground in its footprint is
    structure_share: float = 0.15  # a building or tree (in this share of its cells) and not a road user
    pole_height: float = 2.6  # thin structures taller than this are removed before clustering
    merge_gap: float = 2.0  # occlusion fragments (see merge_fragments): radial gap behind one another,
    merge_side_gap: float = 1.2  # gap side by side,
    merge_max_height: float = 2.3  # height of side-by-side pieces,
    merge_length: float = 6.2  # size of the merged box,
    merge_width: float = 2.5
    merge_size: float = 7.0  # and BEV diagonal of a candidate pair
    min_points: int = 3  # far cars may show only a few returns; their scores stay low
    min_object_height: float = 0.4  # clusters lower than this above the ground are not objects
    max_object_diagonal: float = 16.0  # clusters with a longer BEV bounding-box diagonal are structures
    yaw_steps: int = 90  # L-shape search resolution over 90 degrees
    max_fit_points: int = 250
    min_score: float = 0.1
    density_share: float = 0.1  # share of the expected returns that gives evidence 0.63 (see _density)
    crowd_min_points: int = 20  # clusters with no object in them and this many returns are searched for people
    crowd_radius: float = 0.35  # a person's returns lie this close to the column's axis (BEV)
    crowd_depth: float = 0.12  # a person's returns spread at most this much in range (1 sigma); foliage more
    crowd_score: float = 0.8  # people found in a group score lower than a person standing alone
    min_surface_share: float = 0.3  # vehicles: at least this share of returns on their sides (_surface_share)
    row_max_length: float = 11.0  # car-high clusters up to this long are split into a row of cars
    beam_spacing: float = 0.0225  # tan of the vertical angle between beams (1.3 deg: 32 beams over 40)
    priors: dict[int, SizePrior] = field(default_factory=_default_priors)


@dataclass(frozen=True, slots=True)
class LidarDetections:
    """Output of :func:`detect_lidar`, shaped as the ``lidar_detector`` contract."""

    boxes: F32  # [M,7] x, y, z, l, w, h, yaw
    labels: I32  # [M]
    scores: F32  # [M]

    @staticmethod
    def empty() -> LidarDetections:
        return LidarDetections(np.zeros((0, 7), np.float32), np.zeros((0,), np.int32), np.zeros((0,), np.float32))

    def __len__(self) -> int:
        return int(self.labels.shape[0])


def _noop(_stage: str) -> None:
    return None


# ---------------------------------------------------------------------------------------------
# Stages
# ---------------------------------------------------------------------------------------------


def sanitize_points(points: npt.NDArray[np.floating[Any]], params: LidarParams | None = None) -> F32:
    """Finite ``[N,>=3]`` rows inside the horizontal range window, as float32."""
    p = params or LidarParams()
    pts = np.asarray(points, dtype=np.float32)
    if pts.ndim != 2 or pts.shape[1] < 3:
        raise ValueError(f"points must be [N,>=3], got shape {list(pts.shape)}")
    if pts.shape[0] == 0:
        return pts
    x, y = pts[:, 0], pts[:, 1]
    with np.errstate(all="ignore"):
        r2 = x * x + y * y  # NaN/inf (or overflow) fail the range test below
        keep = (r2 >= p.min_range**2) & (r2 <= p.max_range**2) & np.isfinite(pts[:, 2])
    out: F32 = pts[keep]
    return out


def _cells(xy: npt.NDArray[np.floating[Any]], cell: float) -> tuple[I64, I64, tuple[int, int]]:
    """Integer grid coordinates of ``xy`` (relative to their bounding box) and the grid shape."""
    origin = xy.min(axis=0)
    ij = np.floor((xy - origin) / cell).astype(np.int64)
    shape = (int(ij[:, 0].max()) + 1, int(ij[:, 1].max()) + 1)
    return ij[:, 0], ij[:, 1], shape


def estimate_ground(xyz: npt.NDArray[np.floating[Any]], params: LidarParams | None = None) -> F32:
    """Ground height (z, sensor frame) under every point of ``xyz`` ``[N,>=3]`` (finite rows).

    See the module docstring for the method. Returns ``[N]`` float32.
    """
    p = params or LidarParams()
    if xyz.shape[0] == 0:
        return np.zeros((0,), np.float32)
    x = xyz[:, 0].astype(np.float64)
    y = xyz[:, 1].astype(np.float64)
    z = xyz[:, 2].astype(np.float64)
    n_sec = max(1, round(360.0 / p.ground_sector_deg))
    n_bin = max(1, math.ceil(p.max_range / p.ground_bin))
    sec = ((np.arctan2(y, x) + math.pi) * (n_sec / (2 * math.pi))).astype(np.int64) % n_sec
    rbin = np.minimum((np.hypot(x, y) / p.ground_bin).astype(np.int64), n_bin - 1)
    flat = sec * n_bin + rbin
    zmin = np.full(n_sec * n_bin, np.inf)
    zmax = np.full(n_sec * n_bin, -np.inf)
    np.minimum.at(zmin, flat, z)
    np.maximum.at(zmax, flat, z)
    zmin2, spread2 = zmin.reshape(n_sec, n_bin), (zmax - zmin).reshape(n_sec, n_bin)

    # Start height: the median lowest return of the flat bins near the sensor (mostly road).
    n_near = max(1, int(p.ground_start_range / p.ground_bin))
    near = zmin2[:, :n_near][spread2[:, :n_near] < p.ground_flat_spread]
    near = near[np.isfinite(near)]
    g0 = float(np.median(near)) if near.size else float(np.percentile(z, 10))

    g_prev = np.full(n_sec, g0)
    r_prev = np.zeros(n_sec)
    slope = np.zeros(n_sec)
    seen = np.zeros(n_sec, dtype=bool)  # a sector's first road bin may sit on any allowed grade
    ground2 = np.empty((n_sec, n_bin))
    for j in range(n_bin):
        rc = (j + 0.5) * p.ground_bin
        dr = rc - r_prev
        pred = g_prev + slope * dr
        zj = zmin2[:, j]
        rise: F64 = zj - pred
        # A flat bin may rise with the road; one with vertical structure must start at the road.
        change = np.where(seen, p.ground_slope_change, p.ground_max_slope)
        allow = np.where(spread2[:, j] < p.ground_flat_spread, p.ground_tol + change * dr, p.ground_tol)
        is_ground = np.isfinite(zj) & (rise <= allow) & (rise >= -(p.ground_drop + change * dr))
        new_slope = np.clip((zj - g_prev) / np.maximum(dr, p.ground_bin), -p.ground_max_slope, p.ground_max_slope)
        slope = np.where(is_ground, np.where(seen, 0.3 * slope + 0.7 * new_slope, new_slope), slope)
        ground2[:, j] = np.where(is_ground, zj, pred)
        g_prev = np.where(is_ground, zj, g_prev)
        r_prev = np.where(is_ground, rc, r_prev)
        seen |= is_ground
    ground2 = ndimage.median_filter(ground2, size=(3, 1), mode="wrap")
    polar = ground2.reshape(-1)[flat]
    if p.ground_refine_cell <= 0:
        out: F32 = polar.astype(np.float32)
        return out
    return _refine_ground(x, y, z, polar, p)


def _refine_ground(x: F64, y: F64, z: F64, polar: F64, p: LidarParams) -> F32:
    """Second pass: the lower envelope on a Cartesian grid, checked from every side, then interpolated.

    The polar scan follows each ray outwards; behind and under cars (a parking lot: row after row) its
    running estimate can climb onto a bumper or a bonnet, or sink after a gap. Here the lowest return
    of every ``ground_refine_cell`` square is compared with the lowest returns within
    ``ground_window`` of it in *every* direction, after removing the large-scale trend of the polar
    estimate (so a sloped road is not mistaken for an object): a cell is road if it is no more than
    ``ground_tol`` above that local envelope. A bumper or a car body never is, because the road beside
    the car is lower; a kerb is a step of a cell or two. The road cells' heights are then averaged with
    a normalised Gaussian (every side contributes, so holes under and behind cars are filled from the
    road around them). Cells with no road nearby keep the polar estimate.
    """
    cell = p.ground_refine_cell
    ox, oy = float(x.min()), float(y.min())
    ix = ((x - ox) / cell).astype(np.int64)
    iy = ((y - oy) / cell).astype(np.int64)
    shape = (int(ix.max()) + 1, int(iy.max()) + 1)
    flat = ix * shape[1] + iy
    size = shape[0] * shape[1]
    zmin = np.full(size, np.inf)
    np.minimum.at(zmin, flat, z)
    occupied = np.isfinite(zmin)
    pol = np.zeros(size)
    np.minimum.at(pol, flat, 0.0)
    pol_sum = np.bincount(flat, polar, minlength=size)
    cnt = np.bincount(flat, minlength=size).astype(np.float64)
    pol = np.where(occupied, pol_sum / np.maximum(cnt, 1.0), 0.0)
    # Large-scale trend of the polar estimate (slopes, road camber), insensitive to one car.
    sigma_trend = 4.0 / cell
    w = ndimage.gaussian_filter(occupied.reshape(shape).astype(np.float64), sigma_trend, truncate=2.0)
    trend = ndimage.gaussian_filter(pol.reshape(shape), sigma_trend, truncate=2.0) / np.maximum(w, 1e-9)
    resid = np.where(occupied, zmin - trend.reshape(-1), 1e6).reshape(shape)  # empty cells: never lowest
    k = 2 * max(1, round(p.ground_window / cell)) + 1
    envelope = ndimage.minimum_filter(resid, size=k, mode="constant", cval=1e6)
    road = (occupied.reshape(shape) & (resid - envelope <= p.ground_tol)).reshape(-1)
    road &= np.abs(zmin - pol) <= p.ground_drop  # and near what the polar scan said (no deep outliers)
    if road.sum() < 10:
        return polar.astype(np.float32)
    weight = road.astype(np.float64).reshape(shape)
    total = np.where(road, zmin, 0.0).reshape(shape)
    out = polar.copy()
    for sigma in (p.ground_refine_sigma * 4, p.ground_refine_sigma):  # coarse first, fine overrides
        ws = ndimage.gaussian_filter(weight, sigma, mode="constant", truncate=2.5)
        ts = ndimage.gaussian_filter(total, sigma, mode="constant", truncate=2.5)
        ok = (ws > 0.05).reshape(-1)
        surface = (ts / np.maximum(ws, 1e-12)).reshape(-1)
        take = ok[flat]
        out[take] = surface[flat[take]]
    # Where both agree the polar scan is kept (it is exact on a clean road); the envelope wins where the
    # scan climbed onto an object or sank after a gap.
    keep_polar = np.abs(out - polar) <= p.ground_refine_min_change
    out[keep_polar] = polar[keep_polar]
    return out.astype(np.float32)


def voxel_downsample(points: F32, voxel: float) -> F32:
    """One point (the first) per ``voxel``-sized cube; keeps all columns, order by voxel."""
    if points.shape[0] == 0 or voxel <= 0:
        return points
    ijk = np.floor((points[:, :3] - points[:, :3].min(axis=0)) / voxel).astype(np.int64)
    dims = ijk.max(axis=0) + 1
    key = (ijk[:, 0] * dims[1] + ijk[:, 1]) * dims[2] + ijk[:, 2]
    _, first = np.unique(key, return_index=True)
    out: F32 = points[first]
    return out


def cluster_bev(
    xy: npt.NDArray[np.floating[Any]],
    cell: float,
    height: npt.NDArray[np.floating[Any]] | None = None,
    pole_height: float = 2.6,
    pole_cells: int = 4,
    low_height: float = 1.0,
    structure_length: float = 8.0,
) -> tuple[I64, int]:
    """Euclidean-ish clustering: 8-connected components of the occupied ``cell`` grid in bird's-eye view.

    Returns ``(labels [N], count)``; points closer than ``cell`` always share a cluster, points farther
    apart than ``2*sqrt(2)*cell`` never do unless chained. O(N) and a few ms for 100k points.

    With ``height`` (above ground) given, two kinds of structure are removed first (label -1), so that
    they do not glue the objects next to them into one cluster:

    * thin tall ones: groups of at most ``pole_cells`` cells reaching above ``pole_height`` (poles,
      posts, trunks);
    * long low ones: connected cells never higher than ``low_height`` spanning more than
      ``structure_length`` (guardrails, concrete barriers, kerbs, hedges).

    Vehicles and people are neither thin and tall nor long and low.
    """
    if xy.shape[0] == 0:
        return np.zeros((0,), np.int64), 0
    ci, cj, shape = _cells(xy, cell)
    occ = np.zeros(shape, dtype=bool)
    occ[ci, cj] = True
    eight = np.ones((3, 3), dtype=bool)
    if height is not None:
        top = np.zeros(shape)
        np.maximum.at(top, (ci, cj), np.asarray(height, dtype=np.float64))
        tall = top > pole_height
        tall_lab, n_tall = ndimage.label(tall, structure=eight)
        if n_tall:
            sizes = np.bincount(tall_lab.ravel(), minlength=n_tall + 1)
            pole = (sizes <= pole_cells)[tall_lab] & tall
            occ &= ~ndimage.binary_dilation(pole, structure=eight)
        low = occ & (top <= low_height)
        low_lab, n_low = ndimage.label(low, structure=eight)
        if n_low:
            spans = ndimage.find_objects(low_lab)
            long_ids = [
                k + 1
                for k, sl in enumerate(spans)
                if sl is not None
                and math.hypot(sl[0].stop - sl[0].start, sl[1].stop - sl[1].start) * cell > structure_length
            ]
            if long_ids:
                occ &= ~np.isin(low_lab, long_ids)
    lab, count = ndimage.label(occ, structure=eight)
    labels: I64 = lab[ci, cj].astype(np.int64) - 1
    return labels, int(count)


def cluster_adaptive(
    xy: npt.NDArray[np.floating[Any]],
    eps: float = 0.45,
    eps_gain: float = 0.03,
    eps_max: float = 1.0,
    cell: float = 0.15,
) -> tuple[I64, int]:
    """Connected components of BEV points linked closer than ``clip(eps_gain * range, eps, eps_max)``.

    A fixed linking distance either glues near objects together or breaks far ones apart: a real
    32-beam lidar's rings are ~0.5 m apart on a car at 20 m and a car's faces often show gaps (dark
    paint, glass), so the distance grows with the range (of the nearer point). Points are first
    reduced to one per ``cell`` square (their mean), so dense walls cost no more than their area.
    Returns ``(labels [N], count)``.
    """
    n = xy.shape[0]
    if n == 0:
        return np.zeros((0,), np.int64), 0
    pts = np.asarray(xy, dtype=np.float64)
    q = np.floor((pts - pts.min(axis=0)) / cell).astype(np.int64)
    key = q[:, 0] * (int(q[:, 1].max()) + 1) + q[:, 1]
    _, inv = np.unique(key, return_inverse=True)
    inv = inv.reshape(-1)
    m = int(inv.max()) + 1
    counts = np.bincount(inv, minlength=m)
    centres = np.column_stack([np.bincount(inv, pts[:, k], m) / counts for k in (0, 1)])
    rng = np.hypot(centres[:, 0], centres[:, 1])
    pairs = [cKDTree(centres).query_pairs(eps, output_type="ndarray").reshape(-1, 2)]
    far = np.flatnonzero(rng * eps_gain > eps)  # only far cells may link farther than eps
    if far.size > 1 and eps_max > eps:
        fp = cKDTree(centres[far]).query_pairs(eps_max, output_type="ndarray").reshape(-1, 2)
        fp = far[fp]
        d = np.hypot(*(centres[fp[:, 0]] - centres[fp[:, 1]]).T)
        limit = np.clip(eps_gain * np.minimum(rng[fp[:, 0]], rng[fp[:, 1]]), eps, eps_max)
        pairs.append(fp[d <= limit])
    links = np.concatenate(pairs)
    graph = coo_matrix((np.ones(links.shape[0]), (links[:, 0], links[:, 1])), shape=(m, m))
    count, comp = connected_components(graph, directed=False)
    labels: I64 = comp.astype(np.int64)[inv]
    return labels, int(count)


def merge_fragments(
    xy: npt.NDArray[np.floating[Any]],
    height: npt.NDArray[np.floating[Any]],
    labels: I64,
    count: int,
    params: LidarParams | None = None,
) -> tuple[I64, int]:
    """Merge clusters that are one vehicle split by occlusion.

    A vehicle breaks into pieces when it hides part of itself (bumper and cabin, one behind the other
    along the line of sight) or when something in front of it casts a shadow across its side (two
    pieces side by side). Candidate pairs are

    * *behind*: azimuth intervals overlapping by at least half the narrower one, radial gap at most
      ``merge_gap``;
    * *beside*: bounding boxes at most ``merge_side_gap`` apart, similar heights, both vehicle-high;

    and a pair is merged only if an L-shape box around both is still vehicle-sized (at most
    ``merge_length`` x ``merge_width``; at least 2.5 m long for *beside* pairs, so two pedestrians never
    become a car). Pairs are merged greedily, closest first, and every union must still fit.
    """
    p = params or LidarParams()
    valid = labels >= 0
    if count < 2 or not valid.any():
        return labels, count
    idx_valid = np.flatnonzero(valid)
    lab = labels[valid]
    x, y = xy[valid, 0].astype(np.float64), xy[valid, 1].astype(np.float64)
    hgt = np.asarray(height, dtype=np.float64)[valid]
    present = np.bincount(lab, minlength=count) > 0
    mx, my = np.bincount(lab, x, count), np.bincount(lab, y, count)
    az_c = np.arctan2(my, mx)
    daz = np.angle(np.exp(1j * (np.arctan2(y, x) - az_c[lab])))  # relative to the cluster's direction
    r = np.hypot(x, y)
    names = ("az_lo", "az_hi", "r_lo", "r_hi", "x_lo", "x_hi", "y_lo", "y_hi", "top")
    values = (daz, daz, r, r, x, x, y, y, hgt)
    st: dict[str, F64] = {}
    for name, v in zip(names, values, strict=True):
        low = name.endswith("_lo")
        arr = np.full(count, np.inf if low else -np.inf)
        (np.minimum if low else np.maximum).at(arr, lab, v)
        st[name] = arr
    pad = 0.004  # ~ a quarter degree: a one-column cluster still has some width
    lo, hi = st["az_lo"] - pad, st["az_hi"] + pad
    d_ba = np.angle(np.exp(1j * (az_c[None, :] - az_c[:, None])))  # b's direction seen from a's
    overlap = np.minimum(hi[:, None], hi[None, :] + d_ba) - np.maximum(lo[:, None], lo[None, :] + d_ba)
    narrow = np.minimum((hi - lo)[:, None], (hi - lo)[None, :])
    r_gap = np.maximum(st["r_lo"][None, :] - st["r_hi"][:, None], st["r_lo"][:, None] - st["r_hi"][None, :])
    behind = (overlap >= 0.5 * narrow) & (r_gap <= p.merge_gap)
    # Self-occlusion hides the middle of a vehicle behind its *low* front (bumper, bonnet): the nearer
    # piece must be lower than the farther one. A person in front of a car is not.
    top = st["top"]
    a_nearer = st["r_lo"][:, None] < st["r_lo"][None, :]
    behind &= np.where(a_nearer, top[:, None] < top[None, :] - 0.2, top[None, :] < top[:, None] - 0.2)
    gx = np.maximum(st["x_lo"][None, :] - st["x_hi"][:, None], st["x_lo"][:, None] - st["x_hi"][None, :])
    gy = np.maximum(st["y_lo"][None, :] - st["y_hi"][:, None], st["y_lo"][:, None] - st["y_hi"][None, :])
    beside = (np.hypot(np.maximum(gx, 0), np.maximum(gy, 0)) <= p.merge_side_gap) & (
        np.abs(top[:, None] - top[None, :]) <= 0.5
    )
    beside &= (top[:, None] <= p.merge_max_height) & (top[None, :] <= p.merge_max_height)
    ext_x = np.maximum(st["x_hi"][:, None], st["x_hi"][None, :]) - np.minimum(st["x_lo"][:, None], st["x_lo"][None, :])
    ext_y = np.maximum(st["y_hi"][:, None], st["y_hi"][None, :]) - np.minimum(st["y_lo"][:, None], st["y_lo"][None, :])
    cand = (behind | beside) & (np.hypot(ext_x, ext_y) <= p.merge_size) & present[:, None] & present[None, :]
    cand = np.triu(cand, k=1)
    if not cand.any():
        return labels, count
    order = np.argsort(lab, kind="stable")
    bounds = np.searchsorted(lab[order], np.arange(count + 1))
    pts2 = np.column_stack([x, y])

    def sample(k: int) -> F64:
        m = order[bounds[k] : bounds[k + 1]]
        out: F64 = pts2[m[:: max(1, m.shape[0] // 150)]]
        return out

    # Greedy agglomeration, closest pairs first; every union must still be vehicle-sized.
    ia, ib = np.nonzero(cand)
    closeness = np.where(behind[ia, ib], r_gap[ia, ib], np.hypot(np.maximum(gx, 0), np.maximum(gy, 0))[ia, ib])
    root = np.arange(count)
    groups: dict[int, list[int]] = {}

    def find(k: int) -> int:
        while root[k] != k:
            root[k] = root[root[k]]
            k = int(root[k])
        return k

    for j in np.argsort(closeness, kind="stable").tolist():
        ra, rb = find(int(ia[j])), find(int(ib[j]))
        if ra == rb:
            continue
        union = groups.get(ra, [ra]) + groups.get(rb, [rb])
        lo_u, hi_u, _ = fit_box_bev(np.concatenate([sample(k) for k in union]), steps=30)
        length, width = sorted((hi_u - lo_u).tolist(), reverse=True)
        if length > p.merge_length or width > p.merge_width:
            continue
        if not behind[ia[j], ib[j]] and length < 2.5:
            continue
        root[rb] = ra
        groups[ra] = union
        groups.pop(rb, None)
    if not groups:
        return labels, count
    final = np.array([find(k) for k in range(count)])
    _, mapping = np.unique(final, return_inverse=True)
    out = labels.copy()
    out[idx_valid] = mapping[lab]
    return out, int(mapping.max()) + 1


def _closeness(proj: F64, d0: float) -> F64:
    """Zhang et al. (2017) closeness criterion for every candidate direction (columns of ``proj``)."""
    c1, c2 = proj[0], proj[1]  # [m, A] each
    d1a, d1b = c1.max(axis=0) - c1, c1 - c1.min(axis=0)
    d2a, d2b = c2.max(axis=0) - c2, c2 - c2.min(axis=0)
    d1 = np.where(np.linalg.norm(d1a, axis=0) < np.linalg.norm(d1b, axis=0), d1a, d1b)
    d2 = np.where(np.linalg.norm(d2a, axis=0) < np.linalg.norm(d2b, axis=0), d2a, d2b)
    d = np.maximum(np.minimum(d1, d2), d0)
    score: F64 = (1.0 / d).sum(axis=0)
    return score


def fit_box_bev(xy: npt.NDArray[np.floating[Any]], steps: int = 90, d0: float = 0.05) -> tuple[F64, F64, float]:
    """Oriented rectangle around BEV points by L-shape fitting.

    Returns ``(lo [2], hi [2], theta)``: the extents of the points along ``e1 = (cos t, sin t)`` and
    ``e2 = (-sin t, cos t)`` for the best ``theta`` in ``[0, pi/2)``, searched at ``90 / steps`` degree
    resolution (coarse-to-fine: every 6th angle first, then the neighbourhood of the best one).
    """
    pts = np.asarray(xy, dtype=np.float64)
    step = math.pi / 2 / steps
    t = 0.0
    if pts.shape[0] >= 3:
        centred = pts - pts.mean(axis=0)

        def best_of(theta: F64) -> float:
            cos, sin = np.cos(theta), np.sin(theta)
            proj = np.stack(
                [centred[:, :1] * cos + centred[:, 1:2] * sin, -centred[:, :1] * sin + centred[:, 1:2] * cos]
            )
            return float(theta[int(np.argmax(_closeness(proj, d0)))])

        stride = 6 if steps >= 24 else 1
        coarse = best_of(np.arange(0, steps, stride) * step)
        t = best_of(coarse + np.arange(-stride + 1, stride) * step) if stride > 1 else coarse
        t %= math.pi / 2
    e = np.array([[math.cos(t), math.sin(t)], [-math.sin(t), math.cos(t)]])
    c = pts @ e.T
    return c.min(axis=0), c.max(axis=0), t


def _wrap_half(yaw: float) -> float:
    """Wrap to ``(-pi/2, pi/2]`` (box yaw is defined modulo pi)."""
    y = math.fmod(yaw + math.pi / 2, math.pi)
    if y <= 0:
        y += math.pi
    return y - math.pi / 2


def _grow(lo: float, hi: float, size: float) -> tuple[float, float]:
    """Extend ``[lo, hi]`` (a projection; the sensor projects to 0) to ``size`` on the hidden side."""
    missing = size - (hi - lo)
    if missing <= 0:
        return lo, hi
    if lo >= 0:  # sensor before lo: the far side hi is hidden
        return lo, hi + missing
    if hi <= 0:
        return lo - missing, hi
    return lo - missing / 2, hi + missing / 2


@dataclass(frozen=True, slots=True)
class _Cluster:
    lo: F64
    hi: F64
    theta: float
    top: float
    ground: float
    n: int
    upper_ratio: float = 1.0  # extent of the top 30 % of the object along its long side / full extent
    omega: float = 0.0  # solid angle per return of the sweep (sr), see _return_solid_angle; 0 = unknown
    surface: float = 1.0  # share of the body's returns on the sides of the fitted rectangle (_surface_share)

    @property
    def range(self) -> float:
        return float(np.hypot(*(0.5 * (self.lo + self.hi))))


def _class_score(c: _Cluster, prior: SizePrior, params: LidarParams) -> tuple[float, int]:
    """Score of ``c`` matching ``prior`` and which axis (0 = e1, 1 = e2) carries the length."""
    ext = c.hi - c.lo
    height = c.top - c.ground
    # The top return is up to one beam spacing below the true top: far objects look shorter.
    gap = params.beam_spacing * c.range
    if not prior.min_height - gap <= height <= prior.max_height + 0.1:
        return 0.0, 0
    sigma = math.hypot(prior.height_sigma, gap / 2)
    h_fit = math.exp(-0.5 * ((height - (prior.height - gap / 2)) / sigma) ** 2)
    centre = 0.5 * (c.lo + c.hi)
    ray = centre / max(float(np.hypot(*centre)), 1e-6)  # in (e1, e2) coordinates
    best, best_axis = 0.0, 0
    for axis in (0, 1):
        dims = ((axis, prior.length, prior.max_length), (1 - axis, prior.width, prior.max_width))
        if any(ext[k] > limit for k, _, limit in dims):
            continue
        penalty = 0.0
        for k, size, _ in dims:
            # Occlusion hides, it never adds; and it hides along the line of sight, behind the
            # visible face: a short extent across the ray counts against the class, along it hardly.
            penalty += 2.0 * max(0.0, ext[k] - size) / size
            penalty += 1.5 * (1.0 - abs(float(ray[k]))) * max(0.0, size - ext[k]) / size
        s = prior.weight * h_fit * math.exp(-penalty)
        if s > best:
            best, best_axis = s, axis
    return best, best_axis


def _classify(c: _Cluster, params: LidarParams) -> tuple[int, float, int]:
    """``(label, score, length_axis)``; label -1 = not an object of interest."""
    ext = c.hi - c.lo
    height = c.top - c.ground
    if c.n < params.min_points or height < params.min_object_height or ext.max() > 14.0:
        return -1, 0.0, 0
    if ext.max() < 0.45 and height > 2.3:  # pole, trunk, post
        return -1, 0.0, 0
    if c.omega > 0 and ext.max() < min(0.2, math.sqrt(c.omega) * c.range):
        return -1, 0.0, 0  # one column of returns (a fragment, an edge): even a far person spans two
    scores = {
        label: _class_score(c, prior, params)
        for label, prior in params.priors.items()
        if label not in (CAR, TRUCK) or c.surface >= params.min_surface_share
    }
    if ext.max() <= 2.4 and CAR in scores and CYCLIST in scores:
        # A car seen end-on and a cyclist seen side-on have the same footprint; a car's cabin spans
        # most of its rear, a rider only a third of the bicycle.
        if c.upper_ratio < 0.6:
            scores[CAR] = (scores[CAR][0] * 0.3, scores[CAR][1])
        elif c.upper_ratio > 0.75:
            scores[CYCLIST] = (scores[CYCLIST][0] * 0.3, scores[CYCLIST][1])
    best = (-1, 0.0, 0)
    for label, (s, axis) in scores.items():
        if s > best[1]:
            best = (label, s, axis)
    label, s, axis = best
    if label < 0:
        return best
    return label, float(s * _density(c.n, c.range, params.priors[label], c.omega, params)), axis


def _density(n: int, rng: float, prior: SizePrior, omega: float, params: LidarParams) -> float:
    """Evidence in [0, 1) from the number of returns, relative to what this lidar gives at this range.

    A surface of area ``A`` at range ``r`` facing the sensor gets about ``A / (omega r^2)`` returns
    (``omega``: solid angle per return, measured on the sweep itself, so a 32-beam and a 64-beam lidar
    are judged alike); an object of the prior's size shows about half of its side and end. A cluster
    with ``density_share`` of that has evidence 0.63; sparse vegetation and facade fragments far less.
    """
    if omega <= 0:  # unknown lidar: the simulator's 32-beam rule of thumb
        return 1.0 - math.exp(-n * max(1.0, rng / 15.0) ** 2 / 15.0)
    area = 0.5 * prior.height * (prior.length + prior.width)
    expected = area / (omega * max(rng, 1.0) ** 2)
    return 1.0 - math.exp(-n / max(params.density_share * expected, float(params.min_points)))


def _box(lo: F64, hi: F64, theta: float, axis: int, bottom: float, top: float, grow: SizePrior | None) -> list[float]:
    """``x, y, z, l, w, h, yaw`` of the rectangle ``[lo, hi]`` in the (e1, e2) frame of ``theta``.

    ``axis`` says which of e1/e2 is the length; ``grow`` completes hidden sides to that prior's size.
    """
    lo_l, hi_l = float(lo[axis]), float(hi[axis])
    lo_w, hi_w = float(lo[1 - axis]), float(hi[1 - axis])
    if grow is not None:
        lo_l, hi_l = _grow(lo_l, hi_l, grow.length * 0.95)
        lo_w, hi_w = _grow(lo_w, hi_w, grow.width * 0.95)
    yaw = theta + (math.pi / 2 if axis == 1 else 0.0)
    e_l = np.array([math.cos(yaw), math.sin(yaw)])
    e_w = np.array([-math.sin(yaw), math.cos(yaw)])
    if axis == 1:  # e2 = (-sin t, cos t) is e_l; e1 = (cos t, sin t) = -e_w
        lo_w, hi_w = -hi_w, -lo_w
    centre = e_l * (lo_l + hi_l) / 2 + e_w * (lo_w + hi_w) / 2
    height = top - bottom
    return [float(centre[0]), float(centre[1]), bottom + height / 2, hi_l - lo_l, hi_w - lo_w, height, _wrap_half(yaw)]


def _cluster_boxes(members: F64 | F32, p: LidarParams, omega: float = 0.0) -> list[tuple[list[float], int, float]]:
    """Boxes for one cluster of ``[m, 4]`` (x, y, z, ground) object points: none, one, or a row of cars."""
    fit_xy = members[:: max(1, members.shape[0] // p.max_fit_points), :2]
    lo, hi, theta = fit_box_bev(fit_xy, p.yaw_steps)
    ext = hi - lo
    long_axis = int(ext[1] > ext[0])
    e_long = np.array([math.cos(theta), math.sin(theta)] if long_axis == 0 else [-math.sin(theta), math.cos(theta)])
    proj = members[:, :2].astype(np.float64) @ e_long
    hag = members[:, 2] - members[:, 3]
    top_hag = float(hag.max())
    upper = proj[hag > 0.7 * top_hag]
    upper_ratio = float(upper.max() - upper.min()) / max(float(ext[long_axis]), 1e-3) if upper.size else 0.0
    ground = float(np.median(members[:, 3]))
    top = float(members[:, 2].max())
    surface = _surface_share(members, hag, lo, hi, theta, top_hag)
    cluster = _Cluster(lo, hi, theta, top, ground, members.shape[0], upper_ratio, omega, surface)
    car = p.priors.get(CAR)
    length, width = float(ext[long_axis]), float(ext[1 - long_axis])
    row = car is not None and car.max_length < length <= p.row_max_length and width <= car.max_width
    if car is not None and row and surface >= p.min_surface_share:
        height = top - ground
        if car.min_height - p.beam_spacing * cluster.range <= height <= car.max_height:
            # Car-high but too long for one car: a row of cars parked (nearly) bumper to bumper.
            n_cars = max(2, round(length / car.length))
            edges = np.linspace(float(lo[long_axis]), float(hi[long_axis]), n_cars + 1)
            out = []
            for a, b in itertools.pairwise(edges):
                seg_lo, seg_hi = lo.copy(), hi.copy()
                seg_lo[long_axis], seg_hi[long_axis] = a, b
                score = car.weight * 0.6 * _density(members.shape[0] // n_cars, cluster.range, car, omega, p)
                if score >= p.min_score:  # (as a lone car's: a row's too sparse segments are not cars either)
                    out.append((_box(seg_lo, seg_hi, theta, long_axis, ground, top, car), CAR, score))
            return out
    label, score, axis = _classify(cluster, p)
    if label < 0 or score < p.min_score:
        return []
    grow = p.priors[label] if label in (CAR, TRUCK) else None
    return [(_box(lo, hi, theta, axis, ground, top, grow), label, score)]


def _surface_share(members: F64 | F32, hag: F64 | F32, lo: F64, hi: F64, theta: float, top: float) -> float:
    """Share of a cluster's body returns (below 80 % of its top) on the sides of its fitted BEV rectangle
    that face the sensor: a vehicle is a shell and the lidar sees its near sides, foliage is a volume of
    returns (beams go between leaves and hit deep inside a hedge or a bush). Within ``max(0.15 m,
    1.5 % of the range)`` of a facing side; 1.0 for fewer than 10 body returns (too few to tell)."""
    body = hag < 0.8 * top
    if body.sum() < 10:
        return 1.0
    e = np.array([[math.cos(theta), math.sin(theta)], [-math.sin(theta), math.cos(theta)]])
    c = members[body, :2].astype(np.float64) @ e.T  # the sensor projects to (0, 0)
    dist = np.full(c.shape[0], np.inf)
    for k in (0, 1):
        if lo[k] > 0:  # the side at lo[k] faces the sensor
            dist = np.minimum(dist, c[:, k] - lo[k])
        elif hi[k] < 0:
            dist = np.minimum(dist, hi[k] - c[:, k])
    if not np.isfinite(dist).any():  # the sensor is inside the rectangle's extent on both axes
        return 1.0
    tol = max(0.15, 0.015 * float(np.hypot(*(0.5 * (lo + hi)))))
    return float(np.mean(dist <= tol))


def _under_structure(xy_all: F32, hag_all: F32, xy: F32, p: LidarParams) -> npt.NDArray[np.bool_]:
    """Which of ``xy`` lie in a 0.5 m BEV cell where some return is ``structure_height`` above ground."""
    high = hag_all >= p.structure_height
    if not high.any() or xy.shape[0] == 0:
        return np.zeros(xy.shape[0], dtype=bool)
    cell = 0.5
    origin = np.minimum(xy_all.min(axis=0), xy.min(axis=0))
    hij = np.floor((xy_all[high] - origin) / cell).astype(np.int64)
    ij = np.floor((xy - origin) / cell).astype(np.int64)
    shape = (int(max(hij[:, 0].max(), ij[:, 0].max())) + 1, int(max(hij[:, 1].max(), ij[:, 1].max())) + 1)
    grid = np.zeros(shape, dtype=bool)
    grid[hij[:, 0], hij[:, 1]] = True
    out: npt.NDArray[np.bool_] = grid[ij[:, 0], ij[:, 1]]
    return out


def _people(members: F64 | F32, p: LidarParams, omega: float) -> list[tuple[list[float], int, float]]:
    """Pedestrians inside one cluster that is no object as a whole (a group standing together, people
    beside a shelter or a parked car): person-sized columns found at torso height.

    Returns at torso height (0.9-2.0 m above the ground) are counted on a 0.1 m grid, smoothed over a
    person's width, and every local maximum at least 0.5 m from a stronger one is a candidate. A
    candidate is a pedestrian when the returns within ``crowd_radius`` of it reach a person's height
    and stop there (a wall or a trunk goes on; a shelter's roof or a canopy half a metre higher may be
    there), and its returns lie at nearly one range (a person is a shell facing the sensor; foliage
    is a volume of returns). A low fence or a hedge-top gives candidates too short to score.
    """
    ped = p.priors[PEDESTRIAN]
    xy = members[:, :2].astype(np.float64)
    hag = (members[:, 2] - members[:, 3]).astype(np.float64)
    torso = (hag >= 0.9) & (hag <= 2.0)
    if torso.sum() < p.min_points:
        return []
    cell = 0.1
    origin = xy.min(axis=0) - 1.0
    ij = np.floor((xy[torso] - origin) / cell).astype(np.int64)
    shape = (int(ij[:, 0].max()) + 11, int(ij[:, 1].max()) + 11)
    grid = np.zeros(shape)
    np.add.at(grid, (ij[:, 0], ij[:, 1]), 1.0)
    smooth = ndimage.gaussian_filter(grid, 1.5)
    peaks = (smooth == ndimage.maximum_filter(smooth, size=5)) & (smooth > 0.05)
    out: list[tuple[list[float], int, float]] = []
    for i, j in zip(*np.nonzero(peaks), strict=True):
        centre = origin + (np.array([i, j]) + 0.5) * cell
        d = np.hypot(xy[:, 0] - centre[0], xy[:, 1] - centre[1])
        near = d <= p.crowd_radius
        n = int(near.sum())
        if n < p.min_points:
            continue
        high = hag > ped.max_height
        # Something right above head height that goes on from it (a wall, a trunk) is no person; a
        # shelter's roof or a canopy a little higher is allowed.
        if int((near & high & (hag < ped.max_height + 0.5)).sum()) > max(1, n // 20):
            continue
        top = float(hag[near & ~high].max())
        rng = float(np.hypot(*centre))
        gap = p.beam_spacing * rng
        if top < ped.min_height - gap:
            continue
        # A person is a shell facing the sensor (its returns at nearly one range), foliage a volume.
        if float(np.std(np.hypot(xy[near, 0], xy[near, 1]))) > p.crowd_depth:
            continue
        c = xy[near].mean(axis=0)
        ground = float(np.median(members[near, 3]))
        sigma = math.hypot(ped.height_sigma, gap / 2)
        h_fit = math.exp(-0.5 * ((top - (ped.height - gap / 2)) / sigma) ** 2)
        score = p.crowd_score * ped.weight * h_fit * _density(n, rng, ped, omega, p)
        if score >= p.min_score:
            box = [float(c[0]), float(c[1]), ground + top / 2, ped.length, ped.width, top, 0.0]
            out.append((box, PEDESTRIAN, score))
    return out


def _return_solid_angle(pts: F32) -> float:
    """Solid angle per return (sr) of a spinning lidar's sweep: its elevation span times 2 pi over its
    return count. 32 beams over 40 deg at 0.33 deg steps: 1.3e-4; 64 beams over 27 deg: 2.5e-5."""
    if pts.shape[0] < 100:
        return 0.0
    elev = np.arctan2(pts[:, 2], np.hypot(pts[:, 0], pts[:, 1]))
    lo, hi = np.percentile(elev, [0.5, 99.5])
    return float(max(hi - lo, 1e-3) * 2 * math.pi / pts.shape[0])


def detect_lidar(
    points: npt.NDArray[np.floating[Any]],
    params: LidarParams | None = None,
    checkpoint: Callable[[str], None] = _noop,
) -> LidarDetections:
    """Run the whole pipeline on ``[N,>=3]`` sensor-frame points (extra columns are ignored).

    ``checkpoint(stage)`` is called after each stage (the Triton glue uses it for timing and
    cancellation; it may raise to abort).
    """
    p = params or LidarParams()
    pts = sanitize_points(points, p)
    checkpoint("sanitize")
    if pts.shape[0] == 0:
        return LidarDetections.empty()
    omega = _return_solid_angle(pts)
    ground = estimate_ground(pts, p)
    hag = pts[:, 2] - ground
    keep = (hag > p.ground_clearance) & (hag < p.max_height)
    obj = np.concatenate([pts[keep, :3], ground[keep, None]], axis=1)  # x, y, z, ground
    checkpoint("ground")
    if obj.shape[0] > p.voxel_above:
        obj = voxel_downsample(obj, p.voxel_size)
        checkpoint("downsample")
    if obj.shape[0] < p.min_points:
        return LidarDetections.empty()
    structure, _ = cluster_bev(obj[:, :2], p.cluster_cell, obj[:, 2] - obj[:, 3], p.pole_height)
    labels = np.full(obj.shape[0], -1, np.int64)
    kept = np.flatnonzero(structure >= 0)  # poles and long low structures are gone
    labels[kept], count = cluster_adaptive(obj[kept, :2], p.cluster_eps, p.cluster_eps_gain, p.cluster_eps_max)
    labels, count = merge_fragments(obj[:, :2], obj[:, 2] - obj[:, 3], labels, count, p)
    checkpoint("cluster")
    tall = _under_structure(pts[:, :2], hag, obj[:, :2], p)

    # Cheap per-cluster bounds first: most clusters (facades, vegetation, kerbs) never need a box fit.
    order = np.argsort(labels, kind="stable")
    bounds = np.searchsorted(labels[order], np.arange(count + 1))
    starts = bounds[:-1]
    counts = np.diff(bounds)
    worth = counts >= p.min_points
    tall_share = np.zeros(count)
    if worth.any() and (counts > 0).all():
        s = obj[order[bounds[0] :]]  # label -1 (removed structures) sorts first
        seg = starts - bounds[0]
        ext = [np.maximum.reduceat(s[:, k], seg) - np.minimum.reduceat(s[:, k], seg) for k in (0, 1)]
        height = np.maximum.reduceat(s[:, 2], seg) - np.minimum.reduceat(s[:, 3], seg)
        worth &= (np.hypot(*ext) <= p.max_object_diagonal) & (height >= p.min_object_height)
        # Buildings and trees: returns far above any road user over a good part of the footprint.
        tall_share = np.add.reduceat(tall[order[bounds[0] :]].astype(np.float64), seg) / np.maximum(counts, 1)
        worth &= tall_share <= p.structure_share
    boxes: list[list[float]] = []
    out_labels: list[int] = []
    scores: list[float] = []
    crowd = np.zeros(count, dtype=bool)  # clusters in which to look for people standing together
    if count and (counts > 0).all():
        crowd = (counts >= p.crowd_min_points) & (tall_share <= p.structure_share)
    for k in np.flatnonzero(worth | crowd):
        members = obj[order[bounds[k] : bounds[k + 1]]]
        found = _cluster_boxes(members, p, omega) if worth[k] else []
        if not found and crowd[k] and PEDESTRIAN in p.priors:
            found = _people(members, p, omega)
        for box, label, score in found:
            boxes.append(box)
            out_labels.append(label)
            scores.append(score)
    checkpoint("boxes")
    if not boxes:
        return LidarDetections.empty()
    return LidarDetections(
        np.asarray(boxes, np.float32), np.asarray(out_labels, np.int32), np.asarray(scores, np.float32)
    )
