"""Ray casting of a level spinning lidar, one azimuth column at a time.

A spinning lidar's rays come in columns: every beam of a column shares its azimuth. When the sensor
is level (its axis vertical) and the boxes only rotate about ``z``, a column's rays all lie in one
vertical half-plane, so the slab test splits in two:

* the horizontal (x, y) slabs depend only on the column: per (column, box) one 2D slab test gives
  the horizontal distances ``[rn, rf]`` where the column's vertical plane crosses the footprint;
* the vertical slab is then one multiply per beam: beam ``b`` (elevation ``e``, ``tan e = tau``)
  is at height ``oz + r * tau`` at horizontal distance ``r``, so it is inside the box's height
  for ``r`` in ``[(zlo - oz) / tau, (zhi - oz) / tau]`` (ordered), and the hit is at
  ``t = max(rn, r_z_in) / cos e`` if that interval meets ``[rn, rf]``.

The beams that can hit a (column, box) pair are a contiguous band, found from the pair's interval
with one ``searchsorted`` on ``tan e``, so only rays that really hit the box are expanded. This is
the same geometry as :func:`perception.sim._raycast.slab` (ray ``t`` is horizontal distance over
``cos e``), up to float rounding, at a small fraction of its cost: the 2D part is done once per
column instead of once per ray. The nearest hit per ray wins (``np.minimum.at`` on a key that packs
the float32 distance above the hit's identity), which makes occlusion exact.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from perception.sim._world import Scene

__all__ = ["ColumnCaster", "ColumnHits"]

F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]

_EPS = 1e-3  # m, hits closer than this along the ray are ignored (as in _raycast.slab)
_LOW = np.int64(0xFFFFFFFF)
_BIG_INV = np.float32(1e30)  # 1 / tan(0): finite, so that 0 * it is 0 rather than NaN


@dataclass(frozen=True, slots=True)
class ColumnHits:
    """Nearest hits of every ray: ``t`` (``inf`` for none, float32), and for the rays ``hit`` that
    hit a box its part index ``part`` and ``|cos|`` of the incidence angle ``cos``."""

    t: F32  # [R]
    hit: I64  # [H] ray indices, ascending
    part: I64  # [H]
    cos: F32  # [H]


class ColumnCaster:
    """Nearest box hits of a level lidar's rays, laid out column-major (``ray = column * beams + beam``).

    ``origin`` is the sensor position in ``base_link``; column ``c`` looks along azimuth
    ``az0 + c * az_step`` in ``base_link``; ``elev`` (radians, ascending) are the beams.
    """

    def __init__(self, origin: F64, az0: float, az_step: float, n_cols: int, elev: F64, max_range: float) -> None:
        self.origin = np.asarray(origin, dtype=np.float64)
        self.az0, self.az_step, self.n_cols = float(az0), float(az_step), int(n_cols)
        elev = np.asarray(elev, dtype=np.float64)
        self.beams = int(elev.size)
        self.max_range = float(max_range)
        phi = self.az0 + np.arange(self.n_cols) * self.az_step
        self.cos_phi, self.sin_phi = np.cos(phi), np.sin(phi)
        self.tan = np.tan(elev)  # ascending
        with np.errstate(divide="ignore"):
            inv_tan = np.where(self.tan != 0.0, 1.0 / np.where(self.tan != 0.0, self.tan, 1.0), _BIG_INV)
        self.inv_tan = inv_tan.astype(np.float32)
        self.inv_cos = (1.0 / np.cos(elev)).astype(np.float32)
        self.cos_el = np.cos(elev).astype(np.float32)
        self.abs_sin = np.abs(np.sin(elev)).astype(np.float32)
        with np.errstate(divide="ignore"):  # ray distance per unit of horizontal distance, per unit of height
            self._t_table = np.concatenate([1.0 / np.cos(elev), 1.0 / np.sin(elev)]).astype(np.float32)

    @property
    def n_rays(self) -> int:
        return self.n_cols * self.beams

    def _column_spans(self, center: F64, half: F64, yaw: F64) -> tuple[I64, I64, F64, F64]:
        """First column and column count of each box's footprint, and the sensor in each box's frame."""
        cy, sy = np.cos(yaw), np.sin(yaw)
        rx, ry = self.origin[0] - center[:, 0], self.origin[1] - center[:, 1]
        lx, ly = cy * rx + sy * ry, cy * ry - sy * rx  # sensor position in the box frame
        dist = np.hypot(lx - np.clip(lx, -half[:, 0], half[:, 0]), ly - np.clip(ly, -half[:, 1], half[:, 1]))
        # azimuths of the 4 footprint corners, relative to the centre's (spans are < pi when outside)
        sx = np.array([-1.0, -1.0, 1.0, 1.0])
        sy4 = np.array([-1.0, 1.0, -1.0, 1.0])
        kx, ky = sx[None, :] * half[:, 0, None], sy4[None, :] * half[:, 1, None]
        qx = center[:, 0, None] + cy[:, None] * kx - sy[:, None] * ky - self.origin[0]
        qy = center[:, 1, None] + sy[:, None] * kx + cy[:, None] * ky - self.origin[1]
        az_c = np.arctan2(-ry, -rx)
        daz = (np.arctan2(qy, qx) - az_c[:, None] + np.pi) % (2 * np.pi) - np.pi
        j0 = np.floor((az_c + daz.min(axis=1) - self.az0) / self.az_step).astype(np.int64)
        j1 = np.ceil((az_c + daz.max(axis=1) - self.az0) / self.az_step).astype(np.int64)
        inside = dist < 1e-6
        n_col = np.where(inside, self.n_cols, np.minimum(j1 - j0 + 1, self.n_cols))
        n_col = np.where(dist <= self.max_range, n_col, 0)
        return np.where(inside, 0, j0), n_col, lx, ly

    def cast(self, scene: Scene, ground_t: F32) -> ColumnHits:
        """Nearest hits against every part box of ``scene`` (parts lie within their envelopes, so the
        envelopes need no test of their own), over ``ground_t`` (the rays' ground distances)."""
        center, half, yaw = scene.part_center, scene.part_half, scene.part_yaw
        best = (ground_t.view(np.int32).astype(np.int64) << 32) if ground_t.size else np.zeros(0, np.int64)
        pair_part, pair_cos = self._cast_parts(center, half, yaw, best)
        low = best & _LOW
        hit = np.nonzero(low)[0]
        t = (best >> 32).astype(np.int32).view(np.float32)
        if not hit.size:
            return ColumnHits(t, hit, np.zeros(0, np.int64), np.zeros(0, np.float32))
        code = low[hit] - 1
        pair, zface = code >> 1, (code & 1).astype(bool)
        beam = hit % self.beams
        cos = np.where(zface, self.abs_sin[beam], self.cos_el[beam] * pair_cos[pair])
        return ColumnHits(t, hit, pair_part[pair], cos)

    def _cast_parts(self, center: F64, half: F64, yaw: F64, best: I64) -> tuple[I64, F32]:
        """Lower ``best`` (per ray: float32 distance bits << 32 | 1 + 2 * pair + z face) with every
        part hit; returns each (column, part) pair's part and the cosine of its side face."""
        j0, n_col, lx, ly = self._column_spans(center, half, yaw)
        # (column, part) pairs, by column (rays in order: kinder to the caches)
        part = np.repeat(np.arange(n_col.size), n_col)
        first = np.cumsum(n_col) - n_col
        col = (np.repeat(j0 - first, n_col) + np.arange(part.size)) % self.n_cols
        order = np.argsort(col, kind="stable")
        part, col = part[order], col[order]
        cy, sy = np.cos(yaw)[part], np.sin(yaw)[part]
        cp, sp = self.cos_phi[col], self.sin_phi[col]
        dx, dy = cp * cy + sp * sy, sp * cy - cp * sy  # the column's direction in the part frame
        hx, hy, px, py = half[part, 0], half[part, 1], lx[part], ly[part]
        with np.errstate(divide="ignore", invalid="ignore"):
            inv = 1.0 / dx
            t1, t2 = (-hx - px) * inv, (hx - px) * inv
            nx, fx = np.minimum(t1, t2), np.maximum(t1, t2)
            inv = 1.0 / dy
            t1, t2 = (-hy - py) * inv, (hy - py) * inv
            ny, fy = np.minimum(t1, t2), np.maximum(t1, t2)
        rn, rf = np.maximum(nx, ny), np.minimum(fx, fy)
        ok = np.nonzero((rn <= rf) & (rf > _EPS) & (rn <= self.max_range))[0]
        part, col, rn, rf = part[ok], col[ok], rn[ok], rf[ok]
        # the pair's entry face (x or y) and the cosine of the column with its normal (times cos e later)
        pair_cos = np.where(nx[ok] >= ny[ok], np.abs(dx[ok]), np.abs(dy[ok])).astype(np.float32)
        # Per pair, three bands of beams (tan e) by the face they enter (height relative to the sensor
        # is r * tan e at horizontal distance r): the bottom (zlo > 0), tan e in [zlo/rf, zlo/rn); the
        # side (at rn > 0), tan e in [zlo/rn, zhi/rn]; the top (zhi < 0), tan e in (zhi/rn, zhi/rf].
        # The distance along the ray is rn / cos e through a side, z / sin e through the top or bottom.
        zlo = (center[:, 2] - half[:, 2] - self.origin[2])[part]
        zhi = (center[:, 2] + half[:, 2] - self.origin[2])[part]
        side = rn > _EPS
        with np.errstate(divide="ignore", invalid="ignore"):
            inv_rn = np.where(side, 1.0 / np.where(side, rn, 1.0), np.inf)  # rn <= 0: bands reach +-inf
            zlo_rn, zhi_rn = zlo * inv_rn, zhi * inv_rn
        zlo_rn = np.where(side | (zlo > 0), zlo_rn, -np.inf)
        zhi_rn = np.where(side | (zhi > 0), zhi_rn, np.inf)
        ss = self.tan.searchsorted
        bottom = (ss(np.where(zlo > 0, zlo / rf, np.inf)), ss(zlo_rn))
        sides = (ss(np.where(side, zlo_rn, np.inf)), ss(np.where(side, zhi_rn, -np.inf), side="right"))
        top = (ss(zhi_rn, side="right"), ss(np.where(zhi < 0, zhi / rf, -np.inf), side="right"))
        n = rn.size
        b_lo = np.concatenate([bottom[0], sides[0], top[0]])
        n_beam = np.maximum(np.concatenate([bottom[1], sides[1], top[1]]) - b_lo, 0)
        # along the ray: a = rn (side), zlo (bottom), zhi (top); table: 1 / cos e (side), 1 / sin e
        a = np.concatenate([zlo, rn, zhi]).astype(np.float32)
        zface = np.repeat(np.array([1, 0, 1], dtype=np.int64), n)
        pair = np.tile(np.arange(n, dtype=np.int64), 3)
        band = np.nonzero(n_beam)[0]
        band = band[np.argsort(pair[band], kind="stable")]  # back in column order
        b_lo, n_beam, a, zface, pair = b_lo[band], n_beam[band], a[band], zface[band], pair[band]
        total = int(n_beam.sum())
        if not total:
            return part, pair_cos
        # expand the bands to (ray, part) candidates: per-band values by np.repeat, per-beam from a table
        first = np.cumsum(n_beam) - n_beam
        run = np.arange(total, dtype=np.int64)
        table = np.repeat(b_lo + zface * self.beams - first, n_beam) + run
        t = np.repeat(a, n_beam)
        t *= self._t_table[table]
        # key: float32 distance bits (positive floats order like their bits), then 1 + 2 * pair + z face
        key = t.view(np.int32).astype(np.int64)
        key <<= 32
        key |= np.repeat(1 + 2 * pair + zface, n_beam)
        ray = np.repeat(col[pair] * self.beams + b_lo - first, n_beam)
        ray += run
        np.minimum.at(best, ray, key)
        return part, pair_cos
