"""open3d-cpu next to the lidar model's numpy/scipy code, side by side in one run, on real and simulated sweeps.

For each job the lidar detector does (or could do), the same input goes through both implementations
and the bench records wall time (median per frame) and a quality measure against the annotated boxes:

* ``voxel``: voxel downsampling at 0.1 m (``perception.modelkit.voxel_downsample`` vs
  ``PointCloud.voxel_down_sample``): time and points kept (quality: the same grid, both keep one point
  per voxel; ours keeps a real return, open3d the voxel mean).
* ``neighbours``: radius-0.5 m neighbour counts of 2,000 query points (``scipy.spatial.cKDTree`` vs
  ``open3d.core.nns.NearestNeighborSearch`` fixed-radius, batched); quality: identical counts.
* ``clustering``: object points (after our ground removal) clustered by ``cluster_adaptive`` (BEV,
  range-adaptive link) vs ``PointCloud.cluster_dbscan`` (3D, eps 0.5 m, min 2 points). Quality per
  annotated car with >= 10 object points: *complete* if one cluster holds >= 80 % of its points and
  that cluster is *pure* (>= 70 % of its points inside the box grown by 0.3 m).
* ``ground``: ``estimate_ground`` (the model's defaults: the polar scan) vs one RANSAC plane
  (``segment_plane``, 0.15 m, 200 iterations). Quality: share of annotated cars (>= 10 returns) whose
  estimated ground under them is within 0.25 m of the box bottom (sensor frame).
* ``oriented_box``: BEV yaw of annotated cars' own returns (>= 30, above the ground): our L-shape fit
  (``fit_box_bev``) vs ``get_minimal_oriented_bounding_box`` and ``get_oriented_bounding_box`` (PCA).
  Quality: median yaw error modulo 90 degrees (a rectangle's axes).
* ``outliers``: ``remove_statistical_outlier`` (20 neighbours, 2 sigma) on the object points, vs the
  same statistic with ``cKDTree``. Quality: share of the points on annotated objects it removes vs
  of the others (our detector needs no outlier stage: sparse returns are what far objects are made of).

Datasets: the nuScenes scene (``$PERCEPTION_REAL_DATA/nuscenes-scene-0916``, 32 beams), the KITTI
object frames (``kitti-object``, 64 beams; read from ``velodyne``/``label_2``/``calib`` here) and the
bundled simulated drive. Real data that is absent is skipped and said so in the result.

Times are wall and process CPU (all threads) per call, medians; the host is shared, so compare
ratios within one run.

Usage: ``.venv/bin/python bench/bench_open3d.py [--frames 12] [--output bench/results/open3d.json]``
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import platform
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from scipy.spatial import cKDTree

try:
    import open3d as o3d
except ImportError as exc:  # not a dependency of the project (see pyproject.toml)
    raise SystemExit("bench_open3d needs open3d-cpu: pip install -e '.[open3d]'") from exc

from perception.drives import DriveReader
from perception.importers import import_nuscenes
from perception.modelkit import (
    LidarParams,
    cluster_adaptive,
    cluster_bev,
    estimate_ground,
    fit_box_bev,
    sanitize_points,
    voxel_downsample,
)
from perception.types import PointCloudSample, SensorKind

log = logging.getLogger("bench_open3d")

REPO = Path(__file__).resolve().parents[1]
F64 = npt.NDArray[np.float64]
F32 = npt.NDArray[np.float32]
#: One annotated box in the lidar's frame: centre x, y, z, length, width, height, yaw, and its label.
Box = tuple[float, float, float, float, float, float, float, str]
Frame = tuple[F32, list[Box]]

KITTI_LABELS = {"Car": "car", "Van": "car", "Truck": "truck", "Pedestrian": "pedestrian", "Cyclist": "cyclist"}


def real_data_root() -> Path:
    env = os.environ.get("PERCEPTION_REAL_DATA")
    return Path(env) if env else REPO.parent / "shared" / "real_data"


def drive_frames(path: Path, every: int, limit: int) -> Iterator[Frame]:
    """Lidar sweeps of a drive with the ground truth nearest in time, boxes moved into the lidar frame."""
    with DriveReader(path) as reader:
        name = next(n for n, s in reader.rig.items() if s.kind == SensorKind.LIDAR)
        ext = reader.rig[name].extrinsic
        rot, trans = ext.rotation_matrix(), np.array(ext.translation)
        yaw_ext = math.atan2(rot[1, 0], rot[0, 0])
        gts = reader.ground_truth()
        times = np.array([g.t_ns for g in gts])
        n = 0
        for k, sample in enumerate(reader.samples(sensors=[name])):
            if k % every or n >= limit or not isinstance(sample, PointCloudSample):
                continue
            gi = int(np.argmin(np.abs(times - sample.t_ns)))
            if abs(int(times[gi]) - sample.t_ns) > 60_000_000:
                continue
            boxes: list[Box] = []
            for o in gts[gi].objects:
                c = rot.T @ (np.array(o.center) - trans)
                boxes.append((*c.tolist(), *o.size, o.yaw - yaw_ext, o.label))
            n += 1
            yield np.asarray(sample.points, np.float32), boxes


def kitti_frames(root: Path) -> Iterator[Frame]:
    """KITTI object frames: ``velodyne/*.bin`` with ``label_2`` boxes moved from the rectified camera frame."""
    for path in sorted((root / "velodyne").glob("*.bin")):
        calib: dict[str, F64] = {}
        for line in (root / "calib" / f"{path.stem}.txt").read_text().splitlines():
            if ":" in line:
                key, values = line.split(":", 1)
                calib[key] = np.array([float(v) for v in values.split()])
        r0, tr = np.eye(4), np.eye(4)
        r0[:3, :3] = calib["R0_rect"].reshape(3, 3)
        tr[:3] = calib["Tr_velo_to_cam"].reshape(3, 4)
        cam_to_velo = np.linalg.inv(r0 @ tr)
        boxes: list[Box] = []
        for line in (root / "label_2" / f"{path.stem}.txt").read_text().splitlines():
            v = line.split()
            if v[0] not in KITTI_LABELS:
                continue
            h, w, length, x, y, z, ry = map(float, v[8:15])
            c = cam_to_velo @ np.array([x, y - h / 2, z, 1.0])  # KITTI: location is the bottom centre
            boxes.append((float(c[0]), float(c[1]), float(c[2]), length, w, h, -ry - math.pi / 2, KITTI_LABELS[v[0]]))
        yield np.fromfile(path, np.float32).reshape(-1, 4), boxes


def inside(xyz: npt.NDArray[np.floating[Any]], box: Box, pad: float = 0.0) -> npt.NDArray[np.bool_]:
    x, y, z, length, width, height, yaw, _ = box
    e, f = np.array([math.cos(yaw), math.sin(yaw)]), np.array([-math.sin(yaw), math.cos(yaw)])
    rel = xyz[:, :2] - (x, y)
    out: npt.NDArray[np.bool_] = (
        (np.abs(rel @ e) <= length / 2 + pad)
        & (np.abs(rel @ f) <= width / 2 + pad)
        & (np.abs(xyz[:, 2] - z) <= height / 2 + pad)
    )
    return out


class Timer:
    """Wall and process CPU time (all threads: open3d uses OpenMP) per call, by key."""

    def __init__(self) -> None:
        self.wall: dict[str, list[float]] = {}
        self.cpu: dict[str, list[float]] = {}

    def __call__(self, key: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        c0, t0 = time.process_time(), time.perf_counter()
        out = fn(*args, **kwargs)
        self.wall.setdefault(key, []).append((time.perf_counter() - t0) * 1e3)
        self.cpu.setdefault(key, []).append((time.process_time() - c0) * 1e3)
        return out


def cloud(xyz: npt.NDArray[np.floating[Any]]) -> Any:
    pc = o3d.geometry.PointCloud()
    pc.points = o3d.utility.Vector3dVector(np.asarray(xyz[:, :3], np.float64))
    return pc


def _yaw_err(a: float, b: float) -> float:
    d = (a - b) % (math.pi / 2)
    return math.degrees(min(d, math.pi / 2 - d))


def _o3d_neighbour_counts(pts: F32, queries: F32, radius: float) -> Any:
    core: Any = o3d.core  # its stubs do not take numpy arrays, the library does
    nns = core.nns.NearestNeighborSearch(core.Tensor(pts))
    nns.fixed_radius_index(radius)
    _, _, splits = nns.fixed_radius_search(core.Tensor(queries), radius)
    return np.diff(splits.numpy())


def _scipy_outliers(xyz: F32, k: int, ratio: float) -> Any:
    """Indices kept by open3d's statistical rule (mean distance to k neighbours within mean + ratio sigma)."""
    dist, _ = cKDTree(xyz).query(xyz, k=k + 1)
    mean = dist[:, 1:].mean(axis=1)
    return np.flatnonzero(mean <= mean.mean() + ratio * mean.std())


def _clusters_ours(obj: F32, kept: npt.NDArray[np.intp], p: LidarParams) -> npt.NDArray[np.int64]:
    labels = np.full(obj.shape[0], -1, np.int64)
    labels[kept] = cluster_adaptive(obj[kept, :2], p.cluster_eps, p.cluster_eps_gain, p.cluster_eps_max)[0]
    return labels


def _clusters_o3d(obj: F32, kept: npt.NDArray[np.intp]) -> npt.NDArray[np.int64]:
    labels = np.full(obj.shape[0], -1, np.int64)
    labels[kept] = np.asarray(cloud(obj[kept]).cluster_dbscan(eps=0.5, min_points=2))
    return labels


def _bev_yaw(obb: Any) -> float:
    """BEV yaw of an open3d oriented box: its longest near-horizontal axis."""
    r = np.asarray(obb.R)
    horiz = [i for i in range(3) if abs(r[2, i]) < 0.7]
    i = max(horiz, key=lambda j: float(obb.extent[j])) if horiz else 0
    return math.atan2(r[1, i], r[0, i])


def measure(frames: list[Frame]) -> dict[str, Any]:
    p = LidarParams()
    timed = Timer()
    q: dict[str, list[float]] = {}

    def add(key: str, value: float) -> None:
        q.setdefault(key, []).append(value)

    rng = np.random.default_rng(0)
    for raw, boxes in frames:
        pts = sanitize_points(raw, p)
        xyz = np.ascontiguousarray(pts[:, :3])
        pc = cloud(pts)
        add("voxel.numpy_points", float(timed("voxel.numpy", voxel_downsample, pts, 0.1).shape[0]))
        add("voxel.open3d_points", float(len(timed("voxel.open3d", pc.voxel_down_sample, 0.1).points)))
        queries = xyz[rng.choice(xyz.shape[0], min(2000, xyz.shape[0]), replace=False)]
        counts_np = timed(
            "neighbours.scipy", lambda a, b: cKDTree(a).query_ball_point(b, 0.5, return_length=True), xyz, queries
        )
        counts_o3d = timed("neighbours.open3d", _o3d_neighbour_counts, xyz, queries, 0.5)
        add("neighbours.same_counts", float(np.mean(np.asarray(counts_np) == counts_o3d)))
        ground = timed("ground.ours", estimate_ground, pts, p)
        a, b, c, d = timed("ground.ransac_plane", pc.segment_plane, 0.15, 3, 200)[0]
        plane_z = -(a * pts[:, 0] + b * pts[:, 1] + d) / (c if abs(c) > 1e-6 else 1e-6)
        cars = [bx for bx in boxes if bx[7] == "car"]
        for bx in cars:
            m = inside(pts, bx)
            if m.sum() >= 10:
                bottom = bx[2] - bx[5] / 2
                add("ground.ours_ok", float(abs(float(np.median(ground[m])) - bottom) <= 0.25))
                add("ground.ransac_ok", float(abs(float(np.median(plane_z[m])) - bottom) <= 0.25))
        # the object points, as the detector has them
        hag = pts[:, 2] - ground
        keep = (hag > p.ground_clearance) & (hag < p.max_height)
        obj = pts[keep]
        kept = np.flatnonzero(cluster_bev(obj[:, :2], p.cluster_cell, hag[keep], p.pole_height)[0] >= 0)
        labels = {
            "ours": timed("clustering.ours", _clusters_ours, obj, kept, p),
            "open3d_dbscan": timed("clustering.open3d_dbscan", _clusters_o3d, obj, kept),
        }
        for bx in cars:
            m = inside(obj, bx, 0.1)
            if m.sum() < 10:
                continue
            grown = inside(obj, bx, 0.3)
            for name, lab in labels.items():
                ids, cnt = np.unique(lab[m], return_counts=True)
                k = int(ids[np.argmax(cnt)])
                ok = k >= 0 and cnt.max() >= 0.8 * m.sum() and grown[lab == k].mean() >= 0.7
                add(f"clustering.{name}_complete_and_pure", float(ok))
            if m.sum() < 30:
                continue
            car = obj[m]
            add(
                "oriented_box.l_shape_yaw_err_deg",
                _yaw_err(timed("oriented_box.l_shape", fit_box_bev, car[:, :2], p.yaw_steps)[2], bx[6]),
            )
            car_pc = cloud(car)
            for name, fn in (
                ("open3d_minimal", car_pc.get_minimal_oriented_bounding_box),
                ("open3d_pca", car_pc.get_oriented_bounding_box),
            ):
                try:
                    add(
                        f"oriented_box.{name}_yaw_err_deg", _yaw_err(_bev_yaw(timed(f"oriented_box.{name}", fn)), bx[6])
                    )
                except RuntimeError:  # degenerate (coplanar) sets
                    add(f"oriented_box.{name}_failures", 1.0)
        on_obj = np.zeros(obj.shape[0], bool)
        for bx in boxes:
            on_obj |= inside(obj, bx, 0.2)
        _, idx = timed("outliers.open3d", cloud(obj).remove_statistical_outlier, 20, 2.0)
        kept_sc = timed("outliers.scipy", _scipy_outliers, np.ascontiguousarray(obj[:, :3]), 20, 2.0)
        removed = np.ones(obj.shape[0], bool)
        removed[np.asarray(idx, np.int64)] = False
        if on_obj.any():
            add("outliers.open3d_removed_on_objects", float(removed[on_obj].mean()))
        if (~on_obj).any():
            add("outliers.open3d_removed_elsewhere", float(removed[~on_obj].mean()))
        add("outliers.same_kept_as_scipy", float(np.array_equal(np.sort(np.asarray(idx)), kept_sc)))
    return {
        "frames": len(frames),
        "median_ms": {k: round(float(np.median(v)), 3) for k, v in sorted(timed.wall.items())},
        "median_cpu_ms": {k: round(float(np.median(v)), 3) for k, v in sorted(timed.cpu.items())},
        "quality": {k: {"value": round(float(np.mean(v)), 4), "n": len(v)} for k, v in sorted(q.items())},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--frames", type=int, default=12, help="sweeps per drive (default 12)")
    ap.add_argument("--output", default=str(REPO / "bench" / "results" / "open3d.json"))
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    o3d.utility.set_verbosity_level(o3d.utility.VerbosityLevel.Error)
    root = real_data_root()
    result: dict[str, Any] = {
        "open3d": o3d.__version__,
        "numpy": np.__version__,
        "host": {
            "cpus": os.cpu_count(),
            "load_avg_1m": round(os.getloadavg()[0], 2),
            "python": platform.python_version(),
        },
        "datasets": {},
    }
    with tempfile.TemporaryDirectory() as tmp:
        nusc = root / "nuscenes-scene-0916"
        if nusc.is_dir():
            drive = Path(tmp) / "nuscenes.mcap"
            import_nuscenes(nusc, "scene-0916", drive, channels=["LIDAR_TOP"])
            result["datasets"]["nuscenes-scene-0916"] = measure(list(drive_frames(drive, 3, args.frames)))
        else:
            result["datasets"]["nuscenes-scene-0916"] = {"skipped": f"{nusc} not found"}
        kitti = root / "kitti-object" / "training"
        if kitti.is_dir():
            result["datasets"]["kitti-object"] = measure(list(kitti_frames(kitti)))
        else:
            result["datasets"]["kitti-object"] = {"skipped": f"{kitti} not found"}
        sim = REPO / "replay_data" / "urban_seed7_10s.mcap"
        result["datasets"]["sim-urban-seed7"] = measure(list(drive_frames(sim, 8, args.frames)))
    Path(args.output).write_text(json.dumps(result, indent=1) + "\n")
    log.info("wrote %s", args.output)
    log.info("%s", json.dumps(result["datasets"], indent=1))


if __name__ == "__main__":
    main()
