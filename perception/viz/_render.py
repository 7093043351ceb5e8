"""PNG views of a replayed frame (matplotlib, Agg, no pyplot state: safe in threads and servers).

* Bird's-eye view (``base_link``, x forward = up, y left = left): lidar points, radar returns with
  their (ego-compensated radial) velocity as one second of travel, ground-truth boxes (white, dashed)
  and fused boxes (coloured by the sensor kinds that saw them, with heading, velocity arrow and track
  id), with a legend.
* Each camera image at its own resolution with the fused boxes projected onto it as 3D wireframes
  (edges cut at the camera's near plane) and the camera model's own 2D detections (white, dashed).

Every view comes with the affine map from its data coordinates (BEV: ``base_link`` metres; camera:
image pixels) to PNG pixels, so callers (and tests) can find any object in the picture.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from perception.errors import InputError
from perception.fusion import bev_corners, box_corners, invert_transform, project_points, transform_points
from perception.kinds import FusionRole, fusion_role
from perception.types import Detection3D, ImageSample, PointCloudSample, SensorSpec
from perception.viz._encode import LabelledBoxes
from perception.viz._load import FrameView
from perception.viz._palette import (
    CAMERA_DETECTION_COLOR,
    COMBINATIONS,
    GROUND_TRUTH_COLOR,
    LIDAR_COLOR,
    RADAR_COLOR,
    RGB,
    combination,
    combination_color,
    source_kinds,
)

__all__ = ["RenderedView", "render_bev", "render_camera", "render_frame"]

log = logging.getLogger(__name__)

F64 = npt.NDArray[np.float64]

DPI = 100
BOX_LINE_PX = 2.0  # fused box line width in pixels
NEAR_M = 0.1
LABEL_MIN_PX = 24.0  # fused boxes smaller than this (image height) are drawn without a label
_BACKGROUND = "#111318"
#: Box edges as corner index pairs, for the corner order of :func:`perception.fusion.box_corners`.
_EDGES = np.array(
    [[0, 1], [1, 2], [2, 3], [3, 0], [4, 5], [5, 6], [6, 7], [7, 4], [0, 4], [1, 5], [2, 6], [3, 7]], dtype=np.intp
)


@dataclass(frozen=True, slots=True)
class RenderedView:
    """A written PNG. ``affine`` ``[2,3]`` maps data coordinates (BEV: ``base_link`` x, y in metres;
    camera: image u, v in pixels) to PNG pixel coordinates (column, row)."""

    name: str
    path: Path
    affine: F64

    def to_pixel(self, xy: npt.ArrayLike) -> F64:
        p = np.asarray(xy, dtype=np.float64).reshape(-1, 2)
        out: F64 = p @ self.affine[:, :2].T + self.affine[:, 2]
        return out


def _pt(px: float) -> float:
    """Pixels -> points (matplotlib line widths) at the views' DPI."""
    return px * 72.0 / DPI


def _figure(width_px: int, height_px: int, facecolor: str) -> Any:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width_px / DPI, height_px / DPI), dpi=DPI, facecolor=facecolor)
    FigureCanvasAgg(fig)
    return fig


def _affine(ax: Any, height_px: int, data_from: F64) -> F64:
    """Affine data -> PNG pixel; ``data_from`` ``[3,2]`` are the axes coordinates of data points
    ``(0,0), (1,0), (0,1)`` (the BEV plots ``(y, x)``). Valid once limits and aspect are final (the
    aspect is applied here, so no draw is needed before saving)."""
    ax.apply_aspect()
    disp = ax.transData.transform(data_from)
    pix = np.column_stack([disp[:, 0], height_px - disp[:, 1]])
    origin = pix[0]
    return np.column_stack([pix[1] - origin, pix[2] - origin, origin])


def _save(fig: Any, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=DPI, facecolor=fig.get_facecolor())


def _boxes(dets: Sequence[Detection3D]) -> F64:
    return np.array([[*d.center, *d.size, d.yaw] for d in dets], dtype=np.float64).reshape(-1, 7)


def _color(d: Detection3D, kinds: Mapping[str, str]) -> tuple[str, RGB]:
    present = source_kinds(d.sources, kinds)
    return combination(present), combination_color(present)


def _legend(ax: Any, entries: Sequence[tuple[str, Any]], *, loc: str, fontsize: float) -> None:
    if not entries:
        return
    handles, labels = zip(*((h, lab) for lab, h in entries), strict=True)
    leg = ax.legend(
        handles,
        labels,
        loc=loc,
        fontsize=fontsize,
        framealpha=0.6,
        facecolor="#222222",
        edgecolor="#555555",
        labelcolor="white",
    )
    leg.set_zorder(10)


def _combo_handles(names: Sequence[str], width: float) -> list[tuple[str, Any]]:
    from matplotlib.lines import Line2D

    present = set(names)
    ordered = [name for name in COMBINATIONS if name in present] + sorted(present - set(COMBINATIONS))
    return [
        (f"fused: {name}", Line2D([], [], color=combination_color(name.split("+")), linewidth=width))
        for name in ordered
    ]


# --------------------------------------------------------------------------------------------------
# bird's-eye view
# --------------------------------------------------------------------------------------------------


def _points_in_base(sample: PointCloudSample, spec: SensorSpec) -> F64:
    return transform_points(spec.extrinsic.matrix(), sample.points[:, :3])


def render_bev(frame: FrameView, path: Path, *, range_m: float = 60.0, size_px: int = 900) -> RenderedView:
    """The bird's-eye view of ``frame`` within ``range_m`` of the ego, as a ``size_px`` square PNG."""
    from matplotlib.collections import LineCollection, PolyCollection
    from matplotlib.lines import Line2D
    from matplotlib.patches import Circle, Polygon

    fig = _figure(size_px, size_px, _BACKGROUND)
    ax = fig.add_axes((0.07, 0.05, 0.91, 0.91), facecolor=_BACKGROUND)
    ax.set_xlim(range_m, -range_m)  # plotted: (y, x); y (left) grows to the left
    ax.set_ylim(-range_m, range_m)
    ax.set_aspect("equal")
    ax.tick_params(colors="#aaaaaa", labelsize=8)
    for side in ax.spines.values():
        side.set_color("#555555")
    ax.set_xlabel("y (m, left)", color="#aaaaaa", fontsize=9)
    ax.set_ylabel("x (m, forward)", color="#aaaaaa", fontsize=9)
    for r in range(20, int(math.hypot(range_m, range_m)) + 1, 20):
        ax.add_patch(Circle((0, 0), r, fill=False, color="#333844", linewidth=0.6, zorder=0))
    ax.add_patch(
        Polygon(
            [[0.95, -1.0], [0.95, 2.4], [-0.95, 2.4], [-0.95, -1.0]],
            closed=True,
            facecolor="#dddddd",
            edgecolor="none",
            zorder=6,
        )
    )  # the ego, 4.4 m x 1.9 m

    legend: list[tuple[str, Any]] = []
    kinds = frame.kinds
    for name, sample in frame.samples.items():
        spec = frame.specs[name]
        if not isinstance(sample, PointCloudSample):
            continue
        pts = _points_in_base(sample, spec)
        keep = (np.abs(pts[:, 0]) <= range_m) & (np.abs(pts[:, 1]) <= range_m)
        doppler = fusion_role(spec.kind) is FusionRole.DOPPLER_POINTS and "radial_velocity" in sample.fields
        if not doppler:  # lidar-like: points only
            ax.scatter(
                pts[keep, 1], pts[keep, 0], s=0.4, color=LIDAR_COLOR, alpha=0.7, linewidths=0, rasterized=True, zorder=1
            )
            if not any(lab.startswith("lidar") for lab, _ in legend):
                legend.append(("lidar points", Line2D([], [], marker=".", linestyle="", color=LIDAR_COLOR)))
        else:
            origin = np.asarray(spec.extrinsic.translation, dtype=np.float64)
            ray = pts - origin
            unit = ray / np.maximum(np.linalg.norm(ray, axis=1, keepdims=True), 1e-9)
            radial = sample.points[:, sample.fields.index("radial_velocity")].astype(np.float64)
            vel = unit * radial[:, None]  # the radial velocity over ground as 1 s of travel
            ax.scatter(pts[keep, 1], pts[keep, 0], s=9, color=RADAR_COLOR, linewidths=0, zorder=3)
            ax.quiver(
                pts[keep, 1],
                pts[keep, 0],
                vel[keep, 1],
                vel[keep, 0],
                angles="xy",
                scale_units="xy",
                scale=1.0,
                color=RADAR_COLOR,
                width=0.0025,
                zorder=3,
            )
            if not any(lab.startswith("radar") for lab, _ in legend):
                legend.append(
                    (
                        "radar returns (radial velocity, 1 s)",
                        Line2D([], [], marker="o", linestyle="", color=RADAR_COLOR, markersize=4),
                    )
                )

    gt = frame.ground_truth.objects if frame.ground_truth is not None else ()
    if gt:
        rects = bev_corners([o.center[:2] for o in gt], [o.size[:2] for o in gt], [o.yaw for o in gt])
        ax.add_collection(
            PolyCollection(
                list(rects[:, :, ::-1]),
                closed=True,
                facecolors="none",
                edgecolors=[GROUND_TRUTH_COLOR],
                linestyles=[(0, (3, 2))],
                linewidths=_pt(1.2),
                zorder=4,
            )
        )
        legend.append(("ground truth", Line2D([], [], color=GROUND_TRUTH_COLOR, linestyle="--")))

    dets = frame.detections
    combos = [_color(d, kinds) for d in dets]
    if dets:
        colors = [rgb for _, rgb in combos]
        boxes = _boxes(dets)
        rects = bev_corners(boxes[:, :2], boxes[:, 3:5], boxes[:, 6])
        ax.add_collection(
            PolyCollection(
                list(rects[:, :, ::-1]),
                closed=True,
                facecolors="none",
                edgecolors=colors,
                linewidths=_pt(BOX_LINE_PX),
                zorder=5,
            )
        )
        front = 0.5 * (rects[:, 0] + rects[:, 3])  # heading: centre -> front edge
        heading = np.stack([boxes[:, [1, 0]], front[:, ::-1]], axis=1)
        ax.add_collection(LineCollection(list(heading), colors=colors, linewidths=_pt(1.5), zorder=5))
        vel = np.array([d.velocity for d in dets], dtype=np.float64)
        moving = np.isfinite(vel).all(axis=1) & (np.hypot(vel[:, 0], vel[:, 1]) > 0.3)
        if moving.any():  # one second of travel
            ax.quiver(
                boxes[moving, 1],
                boxes[moving, 0],
                vel[moving, 1],
                vel[moving, 0],
                angles="xy",
                scale_units="xy",
                scale=1.0,
                color=[c for c, m in zip(colors, moving, strict=True) if m],
                width=0.003,
                zorder=5,
            )
        for d, (_, rgb) in zip(dets, combos, strict=True):
            if abs(d.center[0]) < range_m and abs(d.center[1]) < range_m:
                ax.text(d.center[1] - 1.2, d.center[0] + 1.2, f"#{d.id}", color=rgb, fontsize=6, zorder=7, clip_on=True)
    legend += _combo_handles([name for name, _ in combos], _pt(BOX_LINE_PX))
    _legend(ax, legend, loc="upper right", fontsize=7)
    ax.text(
        0.01,
        0.99,
        f"frame {frame.frame_id}  t = {frame.t_ns / 1e9:.3f} s  {frame.status}  "
        f"{len(frame.detections)} fused, {len(gt)} true",
        transform=ax.transAxes,
        va="top",
        ha="left",
        color="white",
        fontsize=9,
        zorder=10,
    )
    affine = _affine(ax, size_px, np.array([[0.0, 0.0], [0.0, 1.0], [1.0, 0.0]]))
    _save(fig, path)
    return RenderedView("bev", path, affine)


# --------------------------------------------------------------------------------------------------
# cameras
# --------------------------------------------------------------------------------------------------


def _wireframes(boxes: F64, cam_from_base: F64, k: F64) -> tuple[F64, npt.NDArray[np.intp]]:
    """Image segments ``[M,2,2]`` of the edges of boxes ``[N,7]`` (``base_link``) in front of the camera,
    each edge cut where it crosses the near plane, and the box index of each segment."""
    corners = transform_points(cam_from_base, box_corners(boxes))  # [N,8,3] optical frame
    p0 = corners[:, _EDGES[:, 0], :].reshape(-1, 3)
    p1 = corners[:, _EDGES[:, 1], :].reshape(-1, 3)
    owner = np.repeat(np.arange(len(boxes)), len(_EDGES))
    z0, z1 = p0[:, 2], p1[:, 2]
    keep = (z0 >= NEAR_M) | (z1 >= NEAR_M)
    p0, p1, z0, z1, owner = p0[keep], p1[keep], z0[keep], z1[keep], owner[keep]
    t = np.divide(NEAR_M - z0, z1 - z0, out=np.zeros_like(z0), where=z1 != z0)
    cut = p0 + t[:, None] * (p1 - p0)
    a = np.where((z0 < NEAR_M)[:, None], cut, p0)
    b = np.where((z1 < NEAR_M)[:, None], cut, p1)
    seg: F64 = np.stack([project_points(k, a), project_points(k, b)], axis=1)
    return seg, owner


def render_camera(frame: FrameView, sensor: str, path: Path) -> RenderedView:
    """Camera ``sensor``'s image of ``frame`` with the fused boxes and its own 2D detections."""
    from matplotlib.collections import LineCollection, PolyCollection
    from matplotlib.lines import Line2D

    spec = frame.specs[sensor]
    sample = frame.samples[sensor]
    if not isinstance(sample, ImageSample) or spec.calibration is None:
        raise ValueError(f"{sensor} is not a calibrated camera sample")
    image = sample.decode()
    h, w = image.shape[:2]
    fig = _figure(w, h, "black")
    ax = fig.add_axes((0.0, 0.0, 1.0, 1.0))
    ax.imshow(image, extent=(0.0, float(w), float(h), 0.0), interpolation="nearest", zorder=0)
    ax.set_xlim(0.0, float(w))
    ax.set_ylim(float(h), 0.0)
    ax.set_axis_off()
    k = spec.calibration.matrix()
    cam_from_base = invert_transform(spec.extrinsic.matrix())

    legend: list[tuple[str, Any]] = []
    own: LabelledBoxes | None = frame.camera_detections.get(sensor)
    if own is not None and len(own.labels):
        x1, y1, x2, y2 = own.boxes.T
        outlines = np.stack([np.column_stack(c) for c in ((x1, y1), (x2, y1), (x2, y2), (x1, y2))], axis=1)
        ax.add_collection(
            PolyCollection(
                list(outlines),
                closed=True,
                facecolors="none",
                edgecolors=[CAMERA_DETECTION_COLOR],
                linestyles=[(0, (4, 3))],
                linewidths=_pt(1.0),
                zorder=2,
            )
        )
        for (bx, _, _, by), label, score in zip(own.boxes.tolist(), own.labels, own.scores.tolist(), strict=True):
            ax.text(
                bx,
                by + 2,
                f"{label} {score:.2f}",
                color=CAMERA_DETECTION_COLOR,
                fontsize=6,
                va="top",
                zorder=2,
                clip_on=True,
            )
        legend.append((f"{sensor} 2D detections", Line2D([], [], color=CAMERA_DETECTION_COLOR, linestyle="--")))

    combos: list[str] = []
    if frame.detections:
        colored = [_color(d, frame.kinds) for d in frame.detections]
        segs, owner = _wireframes(_boxes(frame.detections), cam_from_base, k)
        ax.add_collection(
            LineCollection(list(segs), colors=[colored[i][1] for i in owner], linewidths=_pt(BOX_LINE_PX), zorder=3)
        )
        for i in np.unique(owner):
            d, (name, rgb) = frame.detections[i], colored[i]
            pts = segs[owner == i].reshape(-1, 2)
            lo, hi = pts.min(axis=0), pts.max(axis=0)
            if hi[0] < 0 or hi[1] < 0 or lo[0] > w or lo[1] > h:
                continue  # beside the image
            combos.append(name)
            u, v = float(pts[:, 0].min()), float(pts[:, 1].min())
            if 0 <= u < w and 0 <= v < h and float(pts[:, 1].max()) - v >= LABEL_MIN_PX:  # no labels on tiny boxes
                ax.text(
                    u,
                    v - 2,
                    f"{d.label} #{d.id} {d.score:.2f}",
                    color=rgb,
                    fontsize=6,
                    va="bottom",
                    zorder=4,
                    clip_on=True,
                )
    legend += _combo_handles(combos, _pt(BOX_LINE_PX))
    _legend(ax, legend, loc="lower left", fontsize=6)
    ax.text(
        4,
        4,
        f"{sensor}  frame {frame.frame_id}  t = {sample.t_ns / 1e9:.3f} s",
        color="white",
        fontsize=8,
        va="top",
        ha="left",
        zorder=10,
        bbox={"facecolor": "black", "alpha": 0.5, "edgecolor": "none"},
    )
    affine = _affine(ax, h, np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0]]))
    _save(fig, path)
    return RenderedView(sensor, path, affine)


def render_frame(
    frame: FrameView, out_dir: str | Path, *, range_m: float = 60.0, stem: str | None = None
) -> list[RenderedView]:
    """Write ``<stem>_bev.png`` and ``<stem>_<camera>.png`` for every camera with an image in the frame
    (``stem`` defaults to ``frame_<id>``) into ``out_dir``; returns the views, BEV first. A camera whose image
    does not decode (the runtime records its frame all the same: the camera's status says so) is left out,
    logged; the other views are drawn."""
    out = Path(out_dir)
    base = stem or f"frame_{frame.frame_id:06d}"
    views = [render_bev(frame, out / f"{base}_bev.png", range_m=range_m)]
    for name, spec in frame.specs.items():
        if spec.calibration is not None and isinstance(frame.samples.get(name), ImageSample):
            try:
                views.append(render_camera(frame, name, out / f"{base}_{name}.png"))
            except InputError as exc:
                log.warning("frame %d: camera %s not drawn: %s", frame.frame_id, name, exc)
    return views
