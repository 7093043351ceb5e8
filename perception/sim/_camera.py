"""Pinhole camera: per-pixel ray casting of the scene boxes over a textured road and a sky gradient.

Every pixel's ray (fixed for a mount) is intersected with the ground plane once at start-up; per
frame only the boxes are cast, each against the pixels of its projected bounding rectangle (the box
clipped to the near plane), so cost follows screen coverage. Shading: per-material albedo and
texture rules (lights, windows, clothes...), Lambert + ambient light, distance haze, sensor noise.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from perception._imageio import encode_jpeg
from perception.sim._random import Stream, name_key, stream
from perception.sim._raycast import Rays, cast_pairs, expand_ranges, hit_geometry, matmul, take
from perception.sim._rig import SimCameraParams, SimSensor
from perception.sim._world import Ground, GroundSampler, Material, Scene
from perception.types import LABELS, GroundTruth, SensorSpec

__all__ = ["BoxLabel", "CameraFrame", "CameraModel", "project_ground_truth"]

F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]

NEAR = 0.1  # m
FAR = 250.0  # boxes beyond this are not drawn; ground beyond is haze
HAZE = 450.0  # m, distance at which haze reaches 1 - 1/e

_GROUND_ALBEDO = np.array(
    [
        [0.30, 0.30, 0.31],  # asphalt
        [0.88, 0.88, 0.86],  # white paint
        [0.85, 0.70, 0.20],  # yellow paint
        [0.45, 0.22, 0.20],  # bike lane
        [0.62, 0.61, 0.58],  # sidewalk
        [0.33, 0.42, 0.22],  # verge
        [0.55, 0.55, 0.53],  # concrete
    ],
    dtype=np.float32,
)
_GLASS = np.array([0.07, 0.09, 0.12], dtype=np.float32)
_HEADLIGHT = np.array([0.97, 0.95, 0.85], dtype=np.float32)
_TAILLIGHT = np.array([0.75, 0.04, 0.04], dtype=np.float32)
_EDGES = np.array([[0, 1], [2, 3], [4, 5], [6, 7], [0, 2], [1, 3], [4, 6], [5, 7], [0, 4], [1, 5], [2, 6], [3, 7]])
_SIGNS = np.array([[sx, sy, sz] for sx in (-1, 1) for sy in (-1, 1) for sz in (-1, 1)], dtype=np.float64)


#: Box faces as (local axis, sign) and their corners (indices into _SIGNS) in cyclic order.
_FACES = [(0, -1), (0, 1), (1, -1), (1, 1), (2, -1), (2, 1)]


def _face_corners(axis: int, sign: int) -> list[int]:
    b, c = [a for a in range(3) if a != axis]
    out = []
    for sb, sc in ((-1, -1), (-1, 1), (1, 1), (1, -1)):
        s = [0, 0, 0]
        s[axis], s[b], s[c] = sign, sb, sc
        out.append(int((s[0] > 0) * 4 + (s[1] > 0) * 2 + (s[2] > 0)))
    return out


_FACE_CORNERS = np.array([_face_corners(a, s) for a, s in _FACES])


def _clip_near_all(quads: F64) -> tuple[F64, npt.NDArray[np.bool_]]:
    """Sutherland-Hodgman clip of quads ``[M,4,3]`` (optical frame) to ``z >= NEAR``, all at once:
    candidate vertices ``[M,8,3]`` (each corner, then its edge's crossing of the plane) and which of
    them the clipped polygon keeps, in order."""
    a, b = quads, np.roll(quads, -1, axis=1)
    ina, inb = a[..., 2] >= NEAR, b[..., 2] >= NEAR
    with np.errstate(divide="ignore", invalid="ignore"):
        cross = a + ((NEAR - a[..., 2]) / (b[..., 2] - a[..., 2]))[..., None] * (b - a)
    vertices = np.stack([a, cross], axis=2).reshape(-1, 8, 3)
    keep = np.stack([ina, ina != inb], axis=2).reshape(-1, 8)
    return vertices, keep


def box_corners(center: F64, half: F64, yaw: F64) -> F64:
    """Corners ``[N,8,3]`` of z-rotated boxes (corner ``k`` has signs ``_SIGNS[k]``)."""
    c, s = np.cos(yaw)[:, None], np.sin(yaw)[:, None]
    lx, ly, lz = (_SIGNS[None, :, i] * half[:, None, i] for i in range(3))
    out: F64 = np.stack(
        [center[:, None, 0] + c * lx - s * ly, center[:, None, 1] + s * lx + c * ly, center[:, None, 2] + lz], axis=-1
    )
    return out


def _clipped_points(corners_cam: F64) -> F64:
    """Corners in front of the near plane plus the box edges' crossings of it (others NaN): ``[N,20,3]``."""
    z = corners_cam[..., 2]
    a, b = corners_cam[:, _EDGES[:, 0]], corners_cam[:, _EDGES[:, 1]]
    za, zb = a[..., 2], b[..., 2]
    cross = (za - NEAR) * (zb - NEAR) < 0
    with np.errstate(divide="ignore", invalid="ignore"):
        f = np.where(cross, (NEAR - za) / np.where(cross, zb - za, 1.0), 0.0)
    edge_pts = np.where(cross[..., None], a + f[..., None] * (b - a), np.nan)
    out: F64 = np.concatenate([np.where((z >= NEAR)[..., None], corners_cam, np.nan), edge_pts], axis=1)
    return out


def _project(pts: F64, k: F64) -> tuple[F64, F64]:
    with np.errstate(invalid="ignore", divide="ignore"):
        u = k[0, 0] * pts[..., 0] / pts[..., 2] + k[0, 2]
        v = k[1, 1] * pts[..., 1] / pts[..., 2] + k[1, 2]
    return u, v


def project_boxes(corners_cam: F64, k: F64) -> F64:
    """Image rectangles ``[N,4]`` (x1, y1, x2, y2, not clipped to the image) of boxes given by their
    corners in the optical frame, clipped against the near plane; NaN rows: wholly behind it."""
    u, v = _project(_clipped_points(corners_cam), k)
    rect = np.full((u.shape[0], 4), np.nan)
    valid = ~np.all(np.isnan(u), axis=1)
    if valid.any():
        uv, vv = u[valid], v[valid]
        rect[valid] = np.stack([np.nanmin(uv, 1), np.nanmin(vv, 1), np.nanmax(uv, 1), np.nanmax(vv, 1)], axis=1)
    return rect


def projected_area(corners_cam: F64, k: F64) -> F64:
    """Area (pixels^2) of each box's projected silhouette: the convex hull of its clipped corners."""
    u, v = _project(_clipped_points(corners_cam), k)
    area = np.zeros(u.shape[0])
    for i in range(u.shape[0]):
        ok = ~np.isnan(u[i])
        area[i] = _hull_area(u[i, ok], v[i, ok])
    return area


def _cross(o: tuple[float, float], a: tuple[float, float], b: tuple[float, float]) -> float:
    return (a[0] - o[0]) * (b[1] - o[1]) - (a[1] - o[1]) * (b[0] - o[0])


def _hull_area(x: F64, y: F64) -> float:
    """Area of the convex hull of a few points (monotone chain + shoelace)."""
    if x.size < 3:
        return 0.0
    pts = sorted(set(zip(x.tolist(), y.tolist(), strict=True)))
    if len(pts) < 3:
        return 0.0

    def half(seq: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
        h: list[tuple[float, float]] = []
        for p in seq:
            while len(h) >= 2 and _cross(h[-2], h[-1], p) <= 0:
                h.pop()
            h.append(p)
        return h

    hull = half(pts)[:-1] + half(pts[::-1])[:-1]
    hx, hy = np.array([p[0] for p in hull]), np.array([p[1] for p in hull])
    return float(0.5 * abs(np.dot(hx, np.roll(hy, -1)) - np.dot(hy, np.roll(hx, -1))))


@dataclass(frozen=True, slots=True)
class BoxLabel:
    """A 2D box label of a ground-truth object in an image (pixels, x2/y2 exclusive)."""

    label: str
    x1: float
    y1: float
    x2: float
    y2: float
    visible_fraction: float
    track_id: int = -1

    def __iter__(self) -> Iterator[object]:  # unpacks as (label, x1, y1, x2, y2, visible_fraction)
        return iter((self.label, self.x1, self.y1, self.x2, self.y2, self.visible_fraction))


@dataclass(frozen=True, slots=True, eq=False)
class CameraFrame:
    """A rendered image with its per-pixel object index (``-1``: no object) into the scene's objects."""

    image: npt.NDArray[np.uint8]  # [H,W,3] RGB
    instances: npt.NDArray[np.int32]  # [H,W]
    scene: Scene

    def boxes(self, min_pixels: int = 20) -> list[BoxLabel]:
        """Tight 2D boxes of the objects as actually drawn (occlusion by anything, scenery included)."""
        inst = self.instances.ravel()
        h, w = self.instances.shape
        sel = inst >= 0
        ids = inst[sel]
        if not ids.size:
            return []
        pix = np.nonzero(sel)[0]
        ys, xs = pix // w, pix % w
        n = self.scene.n_objects
        count = np.bincount(ids, minlength=n)
        x1 = np.full(n, w, dtype=np.int64)
        y1 = np.full(n, h, dtype=np.int64)
        x2 = np.full(n, -1, dtype=np.int64)
        y2 = np.full(n, -1, dtype=np.int64)
        np.minimum.at(x1, ids, xs)
        np.minimum.at(y1, ids, ys)
        np.maximum.at(x2, ids, xs)
        np.maximum.at(y2, ids, ys)
        out = []
        for i in np.nonzero(count >= min_pixels)[0]:
            out.append(BoxLabel(LABELS[int(self.scene.label[i])], float(x1[i]), float(y1[i]), float(x2[i] + 1),
                                float(y2[i] + 1), 1.0, int(self.scene.track_id[i])))
        return out


class CameraModel:
    def __init__(self, cfg: SimSensor, seed: int = 0) -> None:
        assert isinstance(cfg.params, SimCameraParams)
        self.cfg = cfg
        self.p = p = cfg.params
        self.cal = p.calibration()
        self.out_w, self.out_h = p.width, p.height
        self.w, self.h = max(round(p.width * p.render_scale), 1), max(round(p.height * p.render_scale), 1)
        sx, sy = self.w / p.width, self.h / p.height
        self.k = np.diag([sx, sy, 1.0]) @ self.cal.matrix()  # intrinsics at the rendering resolution
        ext = cfg.extrinsic
        self.rot = ext.rotation_matrix()  # base_link <- optical
        self.origin = np.asarray(ext.translation, dtype=np.float64)
        u, v = np.meshgrid(np.arange(self.w) + 0.5, np.arange(self.h) + 0.5)
        d = np.stack([(u - self.k[0, 2]) / self.k[0, 0], (v - self.k[1, 2]) / self.k[1, 1], np.ones_like(u)], -1)
        d = d.reshape(-1, 3) / np.linalg.norm(d.reshape(-1, 3), axis=1, keepdims=True)
        base = matmul(d, self.rot.T)
        self.dirs: Rays = tuple(np.ascontiguousarray(base[:, i], dtype=np.float32) for i in range(3))  # type: ignore[assignment]
        with np.errstate(divide="ignore"):
            tg = np.where(base[:, 2] < -1e-6, -self.origin[2] / base[:, 2], np.inf)
        self.ground_idx = np.nonzero(tg < FAR * 2)[0]
        gp = self.origin + base[self.ground_idx] * tg[self.ground_idx, None]
        self.ground = GroundSampler(gp[:, 0], gp[:, 1])
        self.ground_t = tg.astype(np.float32)
        self.ground_haze = (1 - np.exp(-tg[self.ground_idx] / HAZE)).astype(np.float32)
        self.ground_near = tg[self.ground_idx] < 40.0  # texture only where it resolves
        self.sky_f = (np.clip(np.arcsin(np.clip(base[:, 2], -1, 1)) / 0.6, 0, 1) ** 0.6).astype(np.float32)
        # fixed-per-sensor noise patterns, picked and shifted per frame
        rng = stream(seed, Stream.SENSOR, name_key(cfg.name), -1)
        noise = rng.normal(0.0, p.noise_sigma, self.h * self.w).astype(np.float32)
        self.noise = np.concatenate([noise, noise])  # any window of h*w is a shifted pattern
        yy, xx = np.meshgrid(np.linspace(-1, 1, self.h), np.linspace(-1, 1, self.w), indexing="ij")
        self.vignette = (1 - 0.18 * (xx**2 + yy**2) / 2).astype(np.float32).ravel()

    # -- geometry ------------------------------------------------------------------------------------

    def to_optical(self, points_base: F64) -> F64:
        out: F64 = matmul(points_base - self.origin, self.rot)
        return out

    def _candidates(self, scene: Scene, corners: F64, stop: int) -> tuple[I64, I64]:
        """(pixel, envelope) pairs: each envelope before ``stop`` with the pixels of its projected rectangle."""
        if stop <= 0:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        c, h = scene.env_center[:stop], scene.env_half[:stop]
        dist = np.hypot(c[:, 0] - self.origin[0], c[:, 1] - self.origin[1])
        rect = project_boxes(corners[:stop], self.k)
        ok = (dist - np.linalg.norm(h, axis=1) < FAR) & ~np.isnan(rect[:, 0])
        rect = np.where(ok[:, None], rect, 0.0)
        x0 = np.clip(np.floor(rect[:, 0]), 0, self.w).astype(np.int64)
        y0 = np.clip(np.floor(rect[:, 1]), 0, self.h).astype(np.int64)
        x1 = np.clip(np.ceil(rect[:, 2]) + 1, 0, self.w).astype(np.int64)
        y1 = np.clip(np.ceil(rect[:, 3]) + 1, 0, self.h).astype(np.int64)
        wid = np.where(ok, np.maximum(x1 - x0, 0), 0)
        hei = np.where(ok, np.maximum(y1 - y0, 0), 0)
        env = np.nonzero(wid * hei)[0]
        group, offset = expand_ranges(wid[env] * hei[env])
        e = env[group]
        pix = (y0[e] + offset // wid[e]) * self.w + x0[e] + offset % wid[e]
        return pix, e

    def _raster_scenery(self, scene: Scene, corners: F64, best_t: F32, best_part: I64,
                        best_face: npt.NDArray[np.int8]) -> None:
        """Static scenery by polygon rasterisation (Pillow) of front faces, far to near, then exact
        per-pixel depth from each face's plane. Scenery boxes are large (facades), so this is much
        cheaper than slab-testing their screen rectangles; it is only used for scenery, whose boxes
        do not interpenetrate, and road users are then ray-cast against the exact depths."""
        from PIL import Image, ImageDraw

        n0 = scene.n_objects
        n_sc = scene.env_center.shape[0] - n0
        if n_sc <= 0:
            return
        c, h, yaw = scene.env_center[n0:], scene.env_half[n0:], scene.env_yaw[n0:]
        cy, sy = np.cos(yaw), np.sin(yaw)
        # 6 faces per box: (axis, sign) -> base_link normal and plane offset
        normals = np.zeros((n_sc, 6, 3))
        for f, (axis, sign) in enumerate(_FACES):
            if axis == 0:
                normals[:, f, 0], normals[:, f, 1] = sign * cy, sign * sy
            elif axis == 1:
                normals[:, f, 0], normals[:, f, 1] = -sign * sy, sign * cy
            else:
                normals[:, f, 2] = sign
        face_c = c[:, None, :] + normals * np.take(h, [a for a, _ in _FACES], axis=1)[:, :, None]
        facing = np.einsum("nfk,nfk->nf", normals, face_c - self.origin) < -1e-6
        dist = np.hypot(c[:, 0] - self.origin[0], c[:, 1] - self.origin[1]) - np.linalg.norm(h, axis=1)
        near_pt = np.maximum(dist, 0.0)
        facing &= (near_pt < FAR)[:, None]
        cam = corners[n0:]  # optical frame [S,8,3]
        poly = cam[:, _FACE_CORNERS]  # [S,6,4,3]
        ids = Image.new("I", (self.w, self.h), 0)
        draw = ImageDraw.Draw(ids)
        is_building = scene.part_material[scene.env_parts[n0:, 0]] == Material.BUILDING
        order = np.lexsort((-near_pt, ~is_building))  # buildings first, then far to near
        fx, fy, cx0, cy0 = self.k[0, 0], self.k[1, 1], self.k[0, 2] - 0.5, self.k[1, 2] - 0.5
        # project every face's corners at once; only faces crossing the near plane are clipped one by one
        with np.errstate(divide="ignore", invalid="ignore"):
            z = np.maximum(poly[..., 2], NEAR)
            uv = np.stack([fx * poly[..., 0] / z + cx0, fy * poly[..., 1] / z + cy0], axis=-1).clip(-1e4, 1e4)
        crosses = (poly[..., 2] < NEAR).any(axis=-1)
        lo, hi = uv.min(axis=2), uv.max(axis=2)
        off_image = (hi[..., 0] < -1) | (lo[..., 0] > self.w) | (hi[..., 1] < -1) | (lo[..., 1] > self.h)
        drawn = facing & (crosses | ~off_image)
        # faces crossing the near plane, clipped all at once (as _clip_near does one by one)
        clip = drawn & crosses
        row = np.full(clip.shape, -1)
        row[clip] = np.arange(int(clip.sum()))
        clipped, keep = _clip_near_all(poly[clip])
        with np.errstate(divide="ignore", invalid="ignore"):
            clipped_uv = np.stack([fx * clipped[..., 0] / clipped[..., 2] + cx0,
                                   fy * clipped[..., 1] / clipped[..., 2] + cy0], -1).clip(-1e4, 1e4)
        for e in order:
            for f in np.nonzero(drawn[e])[0]:
                m = row[e, f]
                if m >= 0:
                    pts = clipped_uv[m][keep[m]]
                    if pts.shape[0] < 3:
                        continue
                else:
                    pts = uv[e, f]
                draw.polygon([(float(a), float(b)) for a, b in pts], fill=int(e * 6 + f + 1))
        buf = np.asarray(ids, dtype=np.int32).ravel()
        pix = np.nonzero(buf)[0]
        if not pix.size:
            return
        face = buf[pix] - 1
        # per-face plane (flattened [S*6]) gathered per pixel: t = (n . (p_face - o)) / (n . d)
        flat_n = normals.reshape(-1, 3).astype(np.float32)
        num = np.einsum("ij,ij->i", normals.reshape(-1, 3), face_c.reshape(-1, 3) - self.origin).astype(np.float32)
        dx, dy, dz = take(self.dirs, pix)
        with np.errstate(divide="ignore", invalid="ignore"):
            t = num[face] / (flat_n[:, 0][face] * dx + flat_n[:, 1][face] * dy + flat_n[:, 2][face] * dz)
        ok = (t > 0) & (t < best_t[pix])
        best_t[pix[ok]] = t[ok]
        best_part[pix[ok]] = scene.env_parts[n0:, 0][face[ok] // 6]
        best_face[pix[ok]] = face[ok] % 6

    # -- rendering -----------------------------------------------------------------------------------

    def render(self, scene: Scene, rng: np.random.Generator | None = None) -> CameraFrame:
        """Render ``scene``; ``rng`` adds sensor noise (none if ``None``)."""
        image, hit, best_part = self._render(scene, rng)
        n = self.w * self.h
        owner = np.full(n, -1, dtype=np.int32)
        if hit.size:
            own = scene.part_owner[best_part[hit]]
            owner[hit] = np.where(own < scene.n_objects, own, -1)
        instances = owner.reshape(self.h, self.w)
        if (self.w, self.h) != (self.out_w, self.out_h):
            rows = ((np.arange(self.out_h) + 0.5) * self.h / self.out_h).astype(np.int64)
            cols = ((np.arange(self.out_w) + 0.5) * self.w / self.out_w).astype(np.int64)
            instances = instances[rows][:, cols]
        return CameraFrame(image=image, instances=instances, scene=scene)

    def _render(self, scene: Scene, rng: np.random.Generator | None) -> tuple[npt.NDArray[np.uint8], I64, I64]:
        """The image (at the output resolution), the pixels (rendering resolution) that see a part,
        and every pixel's part (``-1``: none).

        Colour work is done on channel planes (``[3, H*W]``): numpy is much faster on long
        contiguous rows than on ``[N,3]`` arrays.
        """
        n = self.w * self.h
        best_t = np.full(n, np.inf, dtype=np.float32)
        best_part = np.full(n, -1, dtype=np.int64)
        best_face = np.full(n, -1, dtype=np.int8)  # index into _FACES
        corners = self.to_optical(box_corners(scene.env_center, scene.env_half, scene.env_yaw))
        self._raster_scenery(scene, corners, best_t, best_part, best_face)
        cast_pairs(self.origin, self.dirs, scene, *self._candidates(scene, corners, scene.n_objects), best_t,
                   best_part)
        light = scene.light
        zen, hor = np.array(light.sky_zenith, np.float32), np.array(light.sky_horizon, np.float32)
        img = np.empty((3, n), dtype=np.float32)
        for c in range(3):  # sky everywhere first
            np.multiply(self.sky_f, zen[c] - hor[c], out=img[c])
            img[c] += hor[c]
        # ground
        g = self.ground_idx
        free = best_part[g] < 0
        gi = g[free]
        gs, gd = self.ground.frenet(scene, np.nonzero(free)[0])
        mat = scene.road.ground_material(gs, gd)
        haze = self.ground_haze[free]
        lit = self._ground_texture(gs, gd, mat, free)
        lit *= np.float32(light.ambient + light.sun * max(light.sun_dir[2], 0.0)) * (1 - haze)
        for c in range(3):
            img[c, gi] = _GROUND_ALBEDO[:, c][mat] * lit + hor[c] * haze
        # objects
        hit = np.nonzero(best_part >= 0)[0]
        if hit.size:
            shaded = self._shade_parts(scene, hit, best_t[hit], best_part[hit], best_face[hit], hor)
            for c in range(3):  # plane by plane: faster than img[:, hit]
                img[c, hit] = shaded[c]
        planes = []
        for c in range(3):
            plane = img[c]
            plane *= self.vignette * np.float32(light.tint[c] * 255.0)
            if rng is not None and self.p.noise_sigma > 0:
                off = int(rng.integers(0, n))
                plane += self.noise[off : off + n]
            np.clip(plane, 0, 255, out=plane)
            planes.append(plane.astype(np.uint8))
        image = np.stack(planes, axis=-1).reshape(self.h, self.w, 3)
        if (self.w, self.h) != (self.out_w, self.out_h):
            from PIL import Image

            image = np.asarray(Image.fromarray(image).resize((self.out_w, self.out_h), Image.Resampling.BILINEAR))
        return image, hit, best_part

    def capture(self, scene: Scene, rng: np.random.Generator) -> bytes:
        """One JPEG image of ``scene`` (the image of :meth:`render`, without its instance map)."""
        return encode_jpeg(self._render(scene, rng)[0], quality=self.p.jpeg_quality)

    def _ground_texture(self, s: F32, d: F32, mat: npt.NDArray[np.int8], free: npt.NDArray[np.bool_]) -> F32:
        """Grain of the road surface: a hash of 0.25 m ground cells (moves with the world, not the image)."""
        cell = np.floor(np.mod(s, np.float32(4096.0)) * np.float32(8.0)) * np.float32(0.1031)
        cell += np.floor(d * np.float32(8.0)) * np.float32(0.7713)
        h = np.sin(cell) * np.float32(43758.5453)
        noise = (h - np.floor(h)) * np.float32(0.1) + np.float32(0.95)
        out = np.where(self.ground_near[free], noise, np.float32(1.0))
        paint = (mat == Ground.WHITE) | (mat == Ground.YELLOW)
        res: F32 = np.where(paint, np.float32(1.0), out).astype(np.float32)
        return res

    def _shade_parts(self, scene: Scene, hit: I64, t: F32, part: I64, face: npt.NDArray[np.int8],
                     haze_col: F32) -> F32:
        """Colours ``[3, K]`` of the pixels ``hit`` that see ``part`` at distance ``t``.

        ``face`` (index into ``_FACES``) is known for rasterised scenery; for road users it is
        recomputed here with their local hit coordinates, which the texture rules need anyway.
        Lighting is per (part, face), so pixels only gather it.
        """
        mat = scene.part_material[part]
        code = np.zeros(hit.size, dtype=np.int8)  # 0 own colour, 1 head-, 2 taillight, 3 glass, 4 window, 5 tyre
        lamp_shade = None
        obj = np.nonzero(scene.part_owner[part] < scene.n_objects)[0]
        if obj.size:
            u, v, w, axis, _ = hit_geometry(self.origin, take(self.dirs, hit[obj]), t[obj], part[obj], scene)
            coord = np.where(axis == 0, u, np.where(axis == 1, v, w))
            face[obj] = axis * 2 + (coord > 0)
            m = mat[obj]
            front, side, top = axis == 0, axis == 1, axis == 2
            lamp = (m == Material.BODY) & front & (np.abs(v) > 0.55) & (w > 0.15)
            glass = (m == Material.CABIN) & ~top & ~(side & (np.abs(u) > 0.85)) & ~(front & (np.abs(v) > 0.9))
            glass |= (m == Material.CAB) & ((front & (u > 0) & (w > 0.15)) | (side & (u > 0.2) & (w > 0.2)))
            c = np.where(lamp, np.where(u > 0, 1, 2), 0)
            c = np.where(glass, 3, c)
            code[obj] = np.where(m == Material.TIRE, 5, c)
            bumper = (m == Material.BODY) & (w < -0.55)
            lamp_shade = (obj, lamp, bumper)
        bld = np.nonzero((mat == Material.BUILDING) & (face < 4))[0]  # facades, not roofs
        if bld.size:
            pb = part[bld]
            tb = t[bld]
            dx, dy, dz = take(self.dirs, hit[bld])
            px = np.float32(self.origin[0]) + dx * tb - scene.part_center[:, 0].astype(np.float32)[pb]
            py = np.float32(self.origin[1]) + dy * tb - scene.part_center[:, 1].astype(np.float32)[pb]
            yaw = scene.part_yaw.astype(np.float32)[pb]
            cy, sy = np.cos(yaw), np.sin(yaw)
            along = np.where(face[bld] < 2, cy * py - sy * px, cy * px + sy * py)
            height = np.float32(self.origin[2]) + dz * tb
            hm = np.mod(height, np.float32(3.3))
            win = (np.mod(along, np.float32(3.2)) < 1.7) & (hm > 1.1) & (hm < 2.6) & (height > 3.0)
            code[bld[win]] = 4
        # Lambert + ambient per (part, face)
        light = scene.light
        sun = np.array(light.sun_dir)
        cy_p, sy_p = np.cos(scene.part_yaw), np.sin(scene.part_yaw)
        nd = np.stack([cy_p * sun[0] + sy_p * sun[1], cy_p * sun[1] - sy_p * sun[0], np.full_like(cy_p, sun[2])], 1)
        ndotl = np.repeat(nd, 2, axis=1) * np.array([-1.0, 1.0, -1.0, 1.0, -1.0, 1.0])  # [P,6]
        amb = light.ambient * np.array([0.75, 0.75, 0.75, 0.75, 0.5, 1.0])
        table = (amb + light.sun * np.maximum(ndotl, 0.0)).astype(np.float32).ravel()
        shade = table[part * 6 + face]
        if lamp_shade is not None:
            o, lamp, bumper = lamp_shade
            so = shade[o]
            so = np.where(bumper, so * np.float32(0.45), so)
            so = np.where(lamp, np.where(code[o] == 1, np.float32(1.0), np.float32(1.2)), so)
            shade[o] = so
        haze = 1 - np.exp(-t / np.float32(HAZE))
        shade *= 1 - haze
        reflection = haze_col * np.float32(0.25)
        palette = np.stack([np.zeros(3, np.float32), _HEADLIGHT, _TAILLIGHT, _GLASS + reflection,
                            _GLASS * np.float32(1.3) + reflection, np.full(3, 0.05, np.float32)])
        # one colour table: the parts' own colours, then the palette
        table_c = np.concatenate([scene.part_colour.astype(np.float32), palette])
        index = np.where(code == 0, part, scene.part_colour.shape[0] + code)
        out: F32 = np.empty((3, hit.size), dtype=np.float32)
        for ch in range(3):
            np.multiply(table_c[:, ch][index], shade, out=out[ch])
            out[ch] += haze_col[ch] * haze
        return out


def project_ground_truth(gt: GroundTruth, camera: SensorSpec, *, min_visible: float = 0.0) -> list[BoxLabel]:
    """2D boxes of ground-truth objects in a camera image.

    Each box is the image rectangle of the object's 3D box (clipped to the near plane and the image);
    ``visible_fraction`` is the share of the box's projected silhouette that is inside the image and
    not hidden behind a nearer ground-truth box (scenery is not part of ground truth, so it does not
    occlude here; :meth:`CameraFrame.boxes` gives labels from the actual rendering). Objects whose
    fraction is ``<= min_visible`` (or that are not in front of the camera) are left out.
    """
    cal = camera.calibration
    if cal is None:
        raise ValueError(f"sensor {camera.name!r} has no camera calibration")
    if not gt.objects:
        return []
    center = np.array([o.center for o in gt.objects], dtype=np.float64)
    half = np.array([o.size for o in gt.objects], dtype=np.float64) / 2
    yaw = np.array([o.yaw for o in gt.objects], dtype=np.float64)
    rot = camera.extrinsic.rotation_matrix()
    origin = np.asarray(camera.extrinsic.translation, dtype=np.float64)
    k = cal.matrix()
    corners = matmul(box_corners(center, half, yaw) - origin, rot)
    rect = project_boxes(corners, k)
    area = projected_area(corners, k)
    # occlusion among GT boxes: ray-cast the envelopes at image resolution
    u, v = np.meshgrid(np.arange(cal.width) + 0.5, np.arange(cal.height) + 0.5)
    d = np.stack([(u - k[0, 2]) / k[0, 0], (v - k[1, 2]) / k[1, 1], np.ones_like(u)], -1).reshape(-1, 3)
    d = matmul(d / np.linalg.norm(d, axis=1, keepdims=True), rot.T)
    rays: Rays = (d[:, 0].astype(np.float32), d[:, 1].astype(np.float32), d[:, 2].astype(np.float32))
    best_t = np.full(d.shape[0], np.inf, dtype=np.float32)
    owner = np.full(d.shape[0], -1, dtype=np.int64)
    from perception.sim._raycast import slab

    for i in np.nonzero(~np.isnan(rect[:, 0]))[0]:
        x0, y0 = max(int(np.floor(rect[i, 0])), 0), max(int(np.floor(rect[i, 1])), 0)
        x1, y1 = min(int(np.ceil(rect[i, 2])) + 1, cal.width), min(int(np.ceil(rect[i, 3])) + 1, cal.height)
        if x1 <= x0 or y1 <= y0:
            continue
        idx = ((np.arange(y0, y1) * cal.width)[:, None] + np.arange(x0, x1)[None, :]).ravel()
        t = slab(origin, take(rays, idx), center[i], half[i], float(yaw[i]))
        better = t < best_t[idx]
        best_t[idx[better]] = t[better]
        owner[idx[better]] = i
    visible = np.bincount(owner[owner >= 0], minlength=len(gt.objects))
    out: list[BoxLabel] = []
    for i, obj in enumerate(gt.objects):
        if np.isnan(rect[i, 0]) or not area[i] > 0:
            continue
        frac = float(min(visible[i] / area[i], 1.0))
        x1c, y1c = max(rect[i, 0], 0.0), max(rect[i, 1], 0.0)
        x2c, y2c = min(rect[i, 2], float(cal.width)), min(rect[i, 3], float(cal.height))
        if x2c <= x1c or y2c <= y1c or frac <= min_visible:
            continue
        out.append(BoxLabel(obj.label, float(x1c), float(y1c), float(x2c), float(y2c), frac, obj.track_id))
    return out
