"""Quality and latency on real recorded drives, per dataset and per sensor mode, in one run.

Reads the real data from ``$PERCEPTION_REAL_DATA`` (default: ``../shared/real_data`` beside the
repository; see that folder's README; it is never committed). Each dataset is imported with
``perception import`` into a temporary directory, then replayed once in lockstep with every sensor
(``perception eval``'s path, :func:`perception.replay.evaluate_modes`) and scored in every mode:
fused, lidar_only, radar_only, camera_only and the three "one kind missing" modes. The bundled
simulated drive is scored in the same run, so a change tuned on real data is seen on the simulator too.
Lidar sweep accumulation is measured per dataset over a few windows (:data:`ACCUMULATE_MS`), each a
replay of its own.

Recorded per dataset and mode: mAP (and NDS where the protocol defines it), AP per class with the
number of ground-truth boxes behind it, ATE and AVE; per dataset the frame latency p50/p99 of the
lockstep replay (one frame in flight, every sensor awaited) and its largest stages.

Targets (issue #16, on the nuScenes scene): fused car AP >= 0.40; fused mAP >= 1.10 x the best
single-sensor mode; camera-only and radar-only AP > 0 for every class with ground truth that the
sensor can see; AVE with radar (fused) < AVE without (no_radar). Each is reported as met or not, with
the measured value; the script exits 0 either way (a benchmark reports, it does not gate).

Issue 32: the camera-guided study (every ``fusion.camera_guided`` setting re-fused on each dataset and
the scene's halves; AP per range bin, recall per range and annotated points, and the camera-guided
objects' precision per range, under the nuScenes protocol on every dataset), and every setting chosen on
scene-0916 (:data:`CHOICES`) against its alternative on the scene, its halves, KITTI and the simulated
drive, with a paired bootstrap over frames deciding what is "beyond noise".

    PERCEPTION_REAL_DATA=/work/shared/real_data .venv/bin/python bench/bench_real.py \
        [--datasets nuscenes,kitti,sim] [--out bench/results/real.json]

(about 8-9 minutes on the shared 2-core host.)

Writes ``bench/results/real.json`` and the table between the ``real:`` markers in ``bench/README.md``.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import logging
import math
import os
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import anyio
import numpy as np

from perception.benchmark import environment
from perception.config import CameraGuidedConfig, FusionConfig, RuntimeConfig, load_config
from perception.drives import GT_TOLERANCE_NS, DriveReader
from perception.evaluation import FrameMatches
from perception.fusion import CAMERA_GUIDED_SOURCE, FusionParams
from perception.metrics import LatencyStats, RunReport
from perception.replay import MODES, each_frame, evaluate_modes, score_modes
from perception.types import LABELS, Detection3D, FrameResult, GroundTruth

log = logging.getLogger("bench_real")

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results" / "real.json"
README = ROOT / "bench" / "README.md"
BUNDLED = ROOT / "replay_data" / "urban_seed7_10s.mcap"
SINGLE = ("lidar_only", "radar_only", "camera_only")
# Classes each kind of sensor can be asked to see (radar sees what moves or reflects; the reference
# camera model knows the COCO road users).
VISIBLE = {
    "camera_only": ("car", "truck", "pedestrian", "cyclist"),
    "radar_only": ("car", "truck"),
}


def real_data_root() -> Path:
    env = os.environ.get("PERCEPTION_REAL_DATA")
    return Path(env) if env else ROOT.parent / "shared" / "real_data"


def _import_nuscenes(root: Path, out: Path) -> Path:
    from perception.importers import import_nuscenes

    scene_dir = root / "nuscenes-scene-0916"
    drive = out / "nuscenes-scene-0916.mcap"
    import_nuscenes(scene_dir, "scene-0916", drive, version="v1.0-mini")
    return drive


def _import_kitti(root: Path, out: Path) -> Path:
    from perception import importers

    kitti = getattr(importers, "import_kitti", None)
    if kitti is None:
        raise RuntimeError("no KITTI importer in this version")
    drive = out / "kitti-object.mcap"
    kitti(root / "kitti-object", drive)
    return drive


IMPORTERS: Mapping[str, tuple[str, Callable[[Path, Path], Path]]] = {
    "nuscenes": ("nuscenes-scene-0916", _import_nuscenes),
    "kitti": ("kitti-object", _import_kitti),
}


def _mode_row(summary: Mapping[str, Any]) -> dict[str, Any]:
    n = summary.get("num_ground_truth", {})
    return {
        "protocol": summary.get("protocol", "native"),
        "mAP": summary.get("mAP"),
        "NDS": summary.get("NDS", summary.get("nds")),
        "ATE": summary.get("ate"),
        "AVE": summary.get("ave"),
        "per_class": {
            c: {"AP": ap, "n": n.get(c, 0), "detections": summary.get("num_detections", {}).get(c, 0)}
            for c, ap in summary.get("per_class_ap", {}).items()
        },
        "frames": summary.get("frames"),
        # diagnosis (nuScenes protocol only): recall at 2 m, at every score, per range and annotated points,
        # and AP per centre-distance threshold (the class AP is their mean)
        "recall_breakdown": summary.get("recall_breakdown"),
        "ap_by_threshold": summary.get("ap_by_threshold"),
    }


def radar_visibility(drive: Path) -> dict[str, Any]:
    """Per label: ground-truth boxes within 50 m and the share with >= 1 / >= 2 annotated radar points
    (nuScenes ``num_radar_pts``): what a radar-only detector can be asked to find."""
    counts: dict[str, list[int]] = {}
    with DriveReader(drive, strict=False, quiet=True) as reader:
        for gt in reader.ground_truth():
            for o in gt.objects:
                if o.num_radar_pts is not None and math.hypot(o.center[0], o.center[1]) < 50.0:
                    counts.setdefault(o.label, []).append(o.num_radar_pts)
    return {
        label: {
            "n": len(v),
            "share_ge_1": sum(x >= 1 for x in v) / len(v),
            "share_ge_2": sum(x >= 2 for x in v) / len(v),
            "mean": sum(v) / len(v),
        }
        for label, v in sorted(counts.items())
    }


def _latency(report: RunReport) -> dict[str, Any]:
    lat = report.latency
    total = lat.total or LatencyStats()
    stages = {k: v.p50 for k, v in lat.stages.items()}
    sensors: dict[str, Any] = {}
    for sensor, st in lat.sensors.items():
        sensors[sensor] = {k: v.p50 for k, v in st.items()}
    return {"p50_ms": total.p50, "p99_ms": total.p99, "stages_p50_ms": stages, "sensors_p50_ms": sensors}


def score(drive: Path, name: str = "", repo: Path | None = None) -> dict[str, Any]:
    """One dataset: the replay scored in every mode, the diagnoses, the camera-guided study and (with
    ``repo``, a folder for the bench's copies of models) every choice made on the scene (:data:`CHOICES`)."""
    config = load_config(ROOT / "launch" / "replay.yaml")
    t0 = time.perf_counter()
    results: list[FrameResult] = []
    modes, outcome = anyio.run(
        lambda: evaluate_modes(drive, config, progress=False, sinks=[each_frame(results.append)]), backend="asyncio"
    )
    out = {
        "modes": {m: _mode_row(s) for m, s in modes.items()},
        "latency_lockstep": _latency(outcome.report),
        "sensors": modes["fused"].get("sensors", []),
        "seconds": round(time.perf_counter() - t0, 1),
    }
    if modes["fused"].get("protocol") == "nuscenes":
        out["localisation_oracle"] = localisation_oracle(drive, results, config)
        out["guided_oracle"] = guided_oracle(drive, results, config)
    guided: dict[tuple[str, str], tuple[dict[str, Any], FrameMatches]] = {}
    out["camera_guided"] = camera_guided_study(drive, results, config, guided)
    out["camera_guided"]["breakdown"] = guided_breakdown(drive, results, config)
    if repo is not None:
        t1 = time.perf_counter()
        out["choices"] = choices_study(name, drive, results, config, guided, repo)
        out["choices_seconds"] = round(time.perf_counter() - t1, 1)
    visibility = radar_visibility(drive)
    if any(v["n"] for v in visibility.values()):
        out["radar_visibility"] = visibility
    return out


def localisation_oracle(
    drive: Path, results: list[FrameResult], config: RuntimeConfig, radii: tuple[float, ...] = (2.0, 4.0)
) -> dict[str, Any]:
    """How much of the car AP is localisation: every lidar car box within ``radius`` (BEV) of an annotated
    car, nearest first and one box per car, gets that car's centre; the same outputs are re-fused and
    scored. A diagnosis with the answers in hand, not a mode."""
    car = LABELS.index("car")
    out: dict[str, Any] = {}
    with DriveReader(drive, strict=False, quiet=True) as reader:
        lidars = {s.name: s.extrinsic.matrix() for s in reader.rig.values() if s.kind == "lidar"}
        for radius in radii:
            moved, boxes, changed = 0, 0, []
            for r in results:
                sensors = dict(r.sensors)
                for name, ext in lidars.items():
                    sr = sensors.get(name)
                    gt = reader.ground_truth_at(sr.sample_t_ns, GT_TOLERANCE_NS) if sr and sr.sample_t_ns else None
                    if sr is None or not sr.outputs or gt is None:
                        continue
                    b = np.array(sr.outputs["BOXES"], np.float64).reshape(-1, 7)
                    labels, scores = np.asarray(sr.outputs["LABELS"]), np.asarray(sr.outputs["SCORES"])
                    cars = np.array([o.center for o in gt.objects if o.label == "car"]).reshape(-1, 3)
                    centre = b[:, :3] @ ext[:3, :3].T + ext[:3, 3]  # base_link
                    taken: set[int] = set()
                    for i in np.argsort(-scores):
                        if labels[i] != car:
                            continue
                        boxes += 1
                        d = np.hypot(*(cars[:, :2] - centre[i, :2]).T) if len(cars) else np.array([np.inf])
                        j = int(np.argmin(d))
                        if d[j] > radius or j in taken:
                            continue
                        taken.add(j)
                        moved += 1
                        b[i, :2] = (ext[:3, :3].T @ (cars[j] - ext[:3, 3]))[:2]  # back into the lidar frame
                    sensors[name] = dataclasses.replace(sr, outputs={**sr.outputs, "BOXES": b.astype(np.float32)})
                changed.append(dataclasses.replace(r, sensors=sensors))
            fused = score_modes(changed, config, reader, modes={"fused": MODES["fused"]})["fused"]
            out[f"{radius:g}"] = {
                "boxes_moved": moved,
                "lidar_car_boxes": boxes,
                "fused_car_AP": fused["per_class_ap"].get("car"),
                "fused_car_ap_by_threshold": (fused.get("ap_by_threshold") or {}).get("car"),
            }
    return out


#: Values of each ``fusion.camera_guided`` parameter compared (each a re-fusion of the same model outputs).
GUIDED_GRID: Mapping[str, tuple[float, ...]] = {
    "face_offset": (0.0, 0.5, 1.0),
    "score_factor": (0.6, 0.8, 1.0),
    "min_score": (0.1, 0.2, 0.3),
    "cluster_gap": (0.5, 1.0, 2.0),
    "depth_ratio": (1.5, 2.0, 3.0),
    "box_shrink": (0.1, 0.25, 0.4),
    "ground_height": (0.15, 0.3, 0.5),
    "absorb_iou": (0.2, 0.4, 0.6, 1.0),
}
#: ``fusion.camera_guided`` settings compared on the same model outputs (each a re-fusion): off, the
#: default, and each parameter at every other value of :data:`GUIDED_GRID`. A parameter is kept only if it
#: loses on none of the scene, its halves, KITTI and the simulated drive beyond noise.
GUIDED_VARIANTS: Mapping[str, Mapping[str, Any]] = {
    "off": {"enabled": False},
    "default": {"enabled": True},
    **{
        f"{key}={value:g}": {"enabled": True, key: value}
        for key, values in GUIDED_GRID.items()
        for value in values
        if value != getattr(CameraGuidedConfig(), key)
    },
}
#: Datasets whose lockstep frame is also measured with fusion in it, camera-guided step off and on.
LOCKSTEP_FUSION = ("nuscenes", "sim")
#: Resamples of the paired bootstrap behind every "beyond noise" verdict (perception.evaluation.paired_bootstrap).
BOOTSTRAP_RESAMPLES = 500


class _KeyframeSubset:
    """A drive reader whose ground truth is some of its keyframes (a half of a scene, scored on its own)."""

    def __init__(self, reader: DriveReader, keep: list[GroundTruth]) -> None:
        self._reader, self._keep = reader, keep

    def ground_truth(self) -> list[GroundTruth]:
        return self._keep

    def __getattr__(self, name: str) -> Any:
        return getattr(self._reader, name)


def _with_guided(config: RuntimeConfig, settings: Mapping[str, Any]) -> RuntimeConfig:
    base = dataclasses.asdict(config.fusion.camera_guided) | {"enabled": False}
    guided = CameraGuidedConfig(**(base | dict(settings)))
    return dataclasses.replace(config, fusion=dataclasses.replace(config.fusion, camera_guided=guided))


def _parts(reader: DriveReader, results: list[FrameResult]) -> dict[str, tuple[list[FrameResult], Any]]:
    """The drive, and on a nuScenes scene its halves (keyframes 0-19 and 20-), each scored on its own."""
    parts: dict[str, tuple[list[FrameResult], Any]] = {"all": (results, reader)}
    gts = sorted(reader.ground_truth(), key=lambda g: g.t_ns)
    if reader.metadata.get("source") == "nuscenes" and len(gts) > 20:
        for name, keep in (("keyframes 0-19", gts[:20]), ("keyframes 20-", gts[20:])):
            lo, hi = keep[0].t_ns - GT_TOLERANCE_NS, keep[-1].t_ns + GT_TOLERANCE_NS
            parts[name] = ([r for r in results if lo <= r.t_ns <= hi], _KeyframeSubset(reader, keep))
    return parts


def _fused_row(summary: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "mAP": summary.get("mAP"),
        "NDS": summary.get("NDS", summary.get("nds")),
        "AP": dict(summary.get("per_class_ap", {})),
    }


def camera_guided_study(
    drive: Path,
    results: list[FrameResult],
    config: RuntimeConfig,
    matches: dict[tuple[str, str], tuple[dict[str, Any], FrameMatches]] | None = None,
) -> dict[str, Any]:
    """Every :data:`GUIDED_VARIANTS` setting re-fused on one replay's outputs: fused mAP and AP per class on
    the whole drive and, on a nuScenes scene, on its halves (keyframes 0-19 and 20-); and what the step
    costs (fusion time per frame with and without it). ``matches`` receives each (variant, part)'s
    frame matches (for :func:`choices_study`)."""
    out: dict[str, Any] = {"variants": {}}
    with DriveReader(drive, strict=False, quiet=True) as reader:
        parts = _parts(reader, results)
        for variant, settings in GUIDED_VARIANTS.items():
            cfg = _with_guided(config, settings)
            row: dict[str, Any] = {}
            for part, (res, rd) in parts.items():
                kept: dict[str, list[tuple[int, tuple[Detection3D, ...]]]] = {}
                got: dict[str, FrameMatches] = {}
                summary = score_modes(res, cfg, rd, modes={"fused": MODES["fused"]}, detections=kept, matches=got)
                row[part] = _fused_row(summary["fused"])
                if matches is not None:
                    matches[(variant, part)] = (row[part], got["fused"])
                if part == "all" and variant == "default":
                    row[part]["guided_objects"] = sum(
                        CAMERA_GUIDED_SOURCE in d.sources for _, dets in kept.get("fused", []) for d in dets
                    )
            out["variants"][variant] = row
            log.info(
                "camera_guided %s: %s",
                variant,
                {p: _fmt(r["mAP"]) + " car " + _fmt(r["AP"].get("car")) for p, r in row.items()},
            )
    out["cost"] = guided_cost(drive, results, config)
    return out


def guided_breakdown(drive: Path, results: list[FrameResult], config: RuntimeConfig) -> dict[str, Any]:
    """What the camera-guided objects add, fused without and with them, scored under the nuScenes protocol
    on every drive (a diagnosis; on KITTI and the simulated drive their headline protocol is the native
    one): per class AP and AP per range bin, recall at 2 m per range and annotated points, and the
    precision of the camera-guided objects (and of every other source) per range."""
    out: dict[str, Any] = {"protocol": "nuscenes"}
    with DriveReader(drive, strict=False, quiet=True) as reader:
        for variant in ("off", "default"):
            cfg = _with_guided(config, GUIDED_VARIANTS[variant])
            s = score_modes(results, cfg, reader, modes={"fused": MODES["fused"]}, protocol="nuscenes")["fused"]
            out[variant] = {
                "mAP": s.get("mAP"),
                "AP": dict(s.get("per_class_ap", {})),
                "n": dict(s.get("num_ground_truth", {})),
                "ap_by_range": s.get("ap_by_range"),
                "recall_breakdown": s.get("recall_breakdown"),
                "precision_by_source": s.get("precision_by_source"),
            }
    return out


# -------------------------------------------------------------------------- every choice made on the scene


@dataclasses.dataclass(frozen=True)
class Choice:
    """A setting chosen on scene-0916, against the value it was chosen over. A setting is a mapping with
    any of ``guided`` (``fusion.camera_guided`` fields), ``fusion`` (``FusionConfig`` fields), ``params``
    (``FusionParams`` fields) and ``camera_size`` (YOLOX's input ``(width, height)``: a replay of its
    own); ``{}`` is the defaults. Scored in ``mode``."""

    name: str
    chosen: Mapping[str, Any]
    alternative: Mapping[str, Any]
    mode: str = "fused"
    note: str = ""


#: The car's tracker acceleration noise (``FusionParams.track_accel_sigma``, m/s^2) compared with the default:
#: the value before issue 32's round of choices (3), and values either side of the default.
CAR_ACCEL_SIGMAS = (0.5, 1.5, 3.0)

#: Localisation and track settings beside their neighbours (issue 32's third round; ``track_max_misses``
#: went from 3 to 5 by this table once the tracker had its standing-still model): ``(section, key,
#: alternatives)``; ``section`` is ``params`` (``FusionParams``) or ``fusion`` (``FusionConfig``).
NEIGHBOURS: tuple[tuple[str, str, tuple[float, ...]], ...] = (
    ("params", "track_coast_decay", (0.65, 0.9)),
    ("fusion", "track_max_misses", (3, 8)),
    ("params", "lidar_sigma", (0.15, 0.4)),
    ("params", "guided_range_sigma", (0.5, 1.5)),
    ("params", "guided_lateral_sigma", (0.6,)),
)


def _car_accel_choices() -> list[Choice]:
    sigma = FusionParams().track_accel_sigma
    car = LABELS.index("car")
    return [
        Choice(
            f"track_accel_sigma car {sigma[car]:g} (vs {value:g})",
            {},
            {"params": {"track_accel_sigma": tuple(value if i == car else s for i, s in enumerate(sigma))}},
        )
        for value in CAR_ACCEL_SIGMAS
        if value != sigma[car]
    ]


def _neighbour_choices() -> list[Choice]:
    defaults = {"params": dataclasses.asdict(FusionParams()), "fusion": dataclasses.asdict(FusionConfig())}
    return [
        Choice(f"{key} {defaults[section][key]:g} (vs {value:g})", {}, {section: {key: value}})
        for section, key, values in NEIGHBOURS
        for value in values
    ]


#: The standing-still model's settings beside their neighbours: ``FusionParams`` field -> alternatives.
STILL_NEIGHBOURS: Mapping[str, tuple[float, ...]] = {
    "track_still_margin": (3.0, 12.0),  # the same margin for every class
    "track_model_memory_s": (1.0, 4.0),
    "track_still_sigma": (0.05, 0.5),
}


def _still_choices() -> list[Choice]:
    """The tracker's standing-still model (issue 32, third round): on against off, for pedestrians and
    cyclists too, and its settings against their neighbours (:data:`STILL_NEIGHBOURS`)."""
    prm = dataclasses.asdict(FusionParams())
    never = -math.inf
    margin = prm["track_still_margin"]
    out = [
        Choice("standing-still model on (vs off)", {}, {"params": {"track_still_margin": (never,) * 4}}),
        Choice(
            f"track_still_margin pedestrian, cyclist {margin[2]:g} (vs never)",
            {},
            {"params": {"track_still_margin": (*margin[:2], never, never)}},
        ),
    ]
    for key, values in STILL_NEIGHBOURS.items():
        default = prm[key][0] if key == "track_still_margin" else prm[key]
        for value in values:
            alternative = (value,) * 4 if key == "track_still_margin" else value
            out.append(Choice(f"{key} {default:g} (vs {value:g})", {}, {"params": {key: alternative}}))
    return out


def _guided_choices() -> list[Choice]:
    defaults = dataclasses.asdict(CameraGuidedConfig())
    out = [Choice("camera_guided on (vs off)", {}, {"guided": {"enabled": False}})]
    for variant, settings in GUIDED_VARIANTS.items():
        if variant in ("off", "default"):
            continue
        (key, value), *_ = [(k, v) for k, v in settings.items() if k != "enabled"]
        out.append(Choice(f"camera_guided.{key} {defaults[key]:g} (vs {value:g})", {}, {"guided": {key: value}}))
    return out


#: Every setting chosen on scene-0916 (issue 32, "do not tune to one scene"). YOLOX's input size does not
#: reach the simulated drive (its camera is served by ``camera_detector``); ``radar_truck_returns`` is off
#: by default on the simulator (by the drive's source), so its column there shows what the rule would do.
CHOICES: tuple[Choice, ...] = (
    Choice(
        "camera input 544x320 (vs 416x416)",
        {},
        {"camera_size": (416, 416)},
        note="a replay per size; the simulated drive's camera (camera_detector) has no such setting",
    ),
    *_guided_choices(),
    *_car_accel_choices(),
    *_neighbour_choices(),
    *_still_choices(),
    Choice(
        "radar_truck_returns 5 (vs off)",
        {"fusion": {"radar_truck_returns": 5}},
        {"fusion": {"radar_truck_returns": 0}},
        note="default by the drive's source: 5 on recordings, off on the simulator",
    ),
    Choice("score_threshold 0.15 (vs 0.3)", {}, {"fusion": {"score_threshold": 0.3}}),
    Choice(
        "camera_alone_min_score 0.2 (vs 0.3)",
        {},
        {"params": {"camera_alone_min_score": 0.3}},
        mode="no_lidar",
        note="applies only when no lidar answered: scored in the no_lidar mode",
    ),
)


def _apply(config: RuntimeConfig, setting: Mapping[str, Any]) -> tuple[RuntimeConfig, FusionParams | None]:
    fusion = config.fusion
    if "guided" in setting:
        guided = CameraGuidedConfig(**(dataclasses.asdict(fusion.camera_guided) | dict(setting["guided"])))
        fusion = dataclasses.replace(fusion, camera_guided=guided)
    if "fusion" in setting:
        fusion = dataclasses.replace(fusion, **setting["fusion"])
    params = FusionParams(**setting["params"]) if "params" in setting else None
    return dataclasses.replace(config, fusion=fusion), params


def _size_config(config: RuntimeConfig, repo: Path, size: tuple[int, int]) -> RuntimeConfig:
    """The profile with YOLOX served at ``size`` (a copy of ``models/yolox_nano`` in ``repo``)."""
    from bench_camera import write_size_models

    name = f"yolox_nano_{size[0]}x{size[1]}"
    if not (repo / name).is_dir():
        write_size_models(repo, [size])
    camera = dataclasses.replace(config.sensor_defaults.camera, model=name)
    server = dataclasses.replace(config.server, models=(*config.server.models, repo))
    return dataclasses.replace(
        config, server=server, sensor_defaults=dataclasses.replace(config.sensor_defaults, camera=camera)
    )


def _verdict(test: Mapping[str, Any]) -> dict[str, Any]:
    """The chosen setting against its alternative on one drive (part): mAP and car AP of each, their
    differences (chosen - alternative) with the paired-bootstrap interval, and whether the choice is worse
    there beyond noise (mAP or car AP: the interval's upper end below 0)."""
    worse = [k for k in ("mAP", "car") if test.get(k, {}).get("worse")]
    better = [k for k in ("mAP", "car") if test.get(k, {}).get("better")]
    return {"worse_beyond_noise": worse, "better_beyond_noise": better}


def _overall(parts: Mapping[str, Mapping[str, Any]]) -> dict[str, bool]:
    """``kept``: the chosen value loses beyond noise nowhere (no drive or half, neither mAP nor car AP);
    ``alternative_passes``: neither does the alternative (the chosen value wins beyond noise nowhere), so
    by the rule the two cannot be told apart on these drives."""
    return {
        "kept": not any(p["worse_beyond_noise"] for p in parts.values()),
        "alternative_passes": not any(p["better_beyond_noise"] for p in parts.values()),
    }


def choices_study(
    name: str,
    drive: Path,
    results: list[FrameResult],
    config: RuntimeConfig,
    guided: Mapping[tuple[str, str], tuple[dict[str, Any], FrameMatches]],
    repo: Path,
) -> dict[str, Any]:
    """Every :data:`CHOICES` entry on this drive (and its halves): chosen and alternative re-fused on the
    same replay's outputs (the camera's size: a replay per size), scored, and compared by a paired
    bootstrap over frames (:func:`perception.evaluation.paired_bootstrap`, :data:`BOOTSTRAP_RESAMPLES`)."""
    from perception.evaluation import paired_bootstrap

    out: dict[str, Any] = {}
    cache: dict[tuple[str, str, str], tuple[dict[str, Any], FrameMatches]] = {}
    for (variant, part), got in guided.items():  # the camera-guided variants, already scored
        settings = {k: v for k, v in GUIDED_VARIANTS[variant].items() if k != "enabled" or not v}
        setting = {"guided": settings} if settings else {}
        cache[(json.dumps(setting, sort_keys=True, default=str), "fused", part)] = got
    replays: dict[tuple[int, int] | None, list[FrameResult]] = {None: results}
    with DriveReader(drive, strict=False, quiet=True) as reader:
        simulated = reader.metadata.get("source") not in ("nuscenes", "kitti")

        def scored(setting: Mapping[str, Any], mode: str) -> dict[str, tuple[dict[str, Any], FrameMatches]]:
            size: tuple[int, int] | None = setting.get("camera_size")
            if size is not None and size not in replays:
                cfg = _size_config(config, repo, size)
                got: list[FrameResult] = []
                anyio.run(
                    lambda: evaluate_modes(drive, cfg, progress=False, sinks=[each_frame(got.append)]),
                    backend="asyncio",
                )
                replays[size] = got
            cfg, params = _apply(config, {k: v for k, v in setting.items() if k != "camera_size"})
            key = json.dumps(setting, sort_keys=True, default=str)
            row = {}
            for part, (res, rd) in _parts(reader, replays[size]).items():
                if (key, mode, part) not in cache:
                    m: dict[str, FrameMatches] = {}
                    s = score_modes(res, cfg, rd, modes={mode: MODES[mode]}, fusion_params=params, matches=m)[mode]
                    cache[(key, mode, part)] = (_fused_row(s), m[mode])
                row[part] = cache[(key, mode, part)]
            return row

        for choice in CHOICES:
            if "camera_size" in choice.alternative and simulated:
                out[choice.name] = {"not_applicable": choice.note}
                continue
            try:
                with_, without = scored(choice.chosen, choice.mode), scored(choice.alternative, choice.mode)
            except Exception as exc:  # one choice that cannot be measured here is reported, the rest go on
                log.warning("%s %s: %s", name, choice.name, exc)
                out[choice.name] = {"error": str(exc)}
                continue
            parts: dict[str, Any] = {}
            for part in with_:
                test = paired_bootstrap(without[part][1], with_[part][1], resamples=BOOTSTRAP_RESAMPLES)
                parts[part] = {
                    "chosen": with_[part][0],
                    "alternative": without[part][0],
                    "difference": {k: v for k, v in test.items() if isinstance(v, dict)},
                    "frames": test["frames"],
                    **_verdict(test),
                }
            out[choice.name] = {"mode": choice.mode, "note": choice.note, "parts": parts, **_overall(parts)}
            log.info(
                "choice %s on %s: %s",
                choice.name,
                name,
                {
                    p: f"{_fmt(r['difference']['mAP']['difference'])} {r['worse_beyond_noise']}"
                    for p, r in parts.items()
                },
            )
    return out


def guided_oracle(
    drive: Path, results: list[FrameResult], config: RuntimeConfig, radius: float = 4.0
) -> dict[str, Any]:
    """What limits car AP with camera-guided objects on (a diagnosis with the answers in hand, as
    :func:`localisation_oracle`): the fused, tracked output re-scored after giving the exact centre of an
    annotated car within ``radius`` (BEV, nearest first, one detection per car) to (a) only the
    camera-guided cars, (b) every car detection. What (b) still misses is recall."""
    from perception.evaluation import NuScenesEvaluator
    from perception.scheduler import Session

    kept: dict[str, list[tuple[int, tuple[Detection3D, ...]]]] = {}
    out: dict[str, Any] = {}
    with DriveReader(drive, strict=False, quiet=True) as reader:
        cfg = _with_guided(config, GUIDED_VARIANTS["default"])
        score_modes(results, cfg, reader, modes={"fused": MODES["fused"]}, detections=kept)
        ego_at = Session.assemble(cfg, reader.source).source.ego_at
        frames = sorted(kept.get("fused", []), key=lambda td: td[0])
        times = [t for t, _ in frames]
        for variant in ("none", "guided", "all"):
            ev = NuScenesEvaluator(ego_at=ego_at)
            moved = 0
            for gt in reader.ground_truth():
                if not times:
                    ev.add(gt, None, None)
                    continue
                k = min(range(len(times)), key=lambda i: abs(times[i] - gt.t_ns))
                if abs(times[k] - gt.t_ns) > GT_TOLERANCE_NS:
                    ev.add(gt, None, None)
                    continue
                dets = list(frames[k][1])
                cars = [o for o in gt.objects if o.label == "car"]
                taken: set[int] = set()
                for i in sorted(range(len(dets)), key=lambda i: -dets[i].score):
                    d = dets[i]
                    if variant == "none" or d.label != "car":
                        continue
                    if variant == "guided" and CAMERA_GUIDED_SOURCE not in d.sources:
                        continue
                    best, best_j = radius, -1
                    for j, o in enumerate(cars):
                        dist = math.hypot(o.center[0] - d.center[0], o.center[1] - d.center[1])
                        if j not in taken and dist <= best:
                            best, best_j = dist, j
                    if best_j >= 0:
                        taken.add(best_j)
                        moved += 1
                        dets[i] = dataclasses.replace(d, center=cars[best_j].center)
                ev.add(gt, tuple(dets), times[k])
            summary = ev.summary()
            out[variant] = {
                "cars_moved": moved,
                "fused_car_AP": summary["per_class_ap"].get("car"),
                "fused_car_ap_by_threshold": (summary.get("ap_by_threshold") or {}).get("car"),
                "car_recall_by_points": [
                    {"points": b["points"], "recall": b["recall"], "n": b["n"]}
                    for b in ((summary.get("recall_breakdown") or {}).get("car") or {}).get("by_points", [])
                ],
            }
    return out


def guided_cost(drive: Path, results: list[FrameResult], config: RuntimeConfig) -> dict[str, Any]:
    """The fusion step's time per frame (``fusion`` in the latency tree, tracking apart), off and with
    the default camera-guided step, on the replay's outputs and the drive's lidar points."""
    from perception.fusion import Fuser
    from perception.scheduler import Session
    from perception.types import Frame

    out: dict[str, Any] = {}
    with DriveReader(drive, strict=False, quiet=True) as reader:
        lidars = [s.name for s in reader.rig.values() if s.kind == "lidar"]
        for variant in ("off", "default"):
            session = Session.assemble(_with_guided(config, GUIDED_VARIANTS[variant]), reader.source)
            fuser = Fuser(session.config.fusion, session.rig, ego_at=session.source.ego_at)
            spent: list[float] = []
            for r in results:
                samples: dict[str, Any] = {}
                for name in lidars:
                    t = r.sensors[name].sample_t_ns if name in r.sensors else None
                    if t is not None:
                        for sample in reader.samples(t, t + 1, sensors=name):
                            samples[name] = sample
                ego = session.source.ego_at(r.t_ns) if session.source.ego_at else None
                frame = Frame(frame_id=r.frame_id, t_ns=r.t_ns, samples=samples, ego=ego)
                _, stages = fuser(frame, r.sensors)
                spent.append(stages["fusion"] / 1e6)
            out[variant] = {
                "fusion_p50_ms": float(np.percentile(spent, 50)),
                "fusion_p99_ms": float(np.percentile(spent, 99)),
            }
    return out


#: Lidar sweep accumulation windows measured per dataset (ms): off, the default (one earlier sweep of
#: a 10 Hz lidar, two of nuScenes' 20 Hz sweeps), two earlier sweeps at 10 Hz, and on a keyframe-only
#: nuScenes copy (2 Hz) the previous keyframe, and the two previous ones: three sweeps' points per
#: request, the load of a nuScenes drive with its sweeps under the default window (for its latency).
ACCUMULATE_MS = {"sim": (0.0, 120.0, 220.0), "nuscenes": (0.0, 600.0, 1100.0), "kitti": ()}


def accumulation(drive: Path, windows: tuple[float, ...]) -> dict[str, Any]:
    """Fused and lidar-only quality and the lidar's latency per sweep accumulation window (every
    window a full lockstep replay through Triton, the lidar model re-run on the merged sweeps)."""
    base = load_config(ROOT / "launch" / "replay.yaml")
    with DriveReader(drive, strict=False, quiet=True) as reader:
        lidars = [spec.name for spec in reader.rig.values() if spec.kind == "lidar"]
    out: dict[str, Any] = {}
    for ms in windows:
        lidar = dataclasses.replace(base.sensor_defaults.lidar, accumulate_ms=ms)
        cfg = dataclasses.replace(base, sensor_defaults=dataclasses.replace(base.sensor_defaults, lidar=lidar))
        modes, outcome = anyio.run(lambda c=cfg: evaluate_modes(drive, c, progress=False), backend="asyncio")
        lat = _latency(outcome.report)
        lidar_ms = {n: lat["sensors_p50_ms"].get(n, {}).get("total") for n in lidars}
        out[f"{ms:g}"] = {
            "report": outcome.report.accumulation,
            "modes": {
                m: {k: _mode_row(modes[m])[k] for k in ("mAP", "NDS", "per_class")} for m in ("fused", "lidar_only")
            },
            "lidar_total_p50_ms": lidar_ms,
            "frame_p50_ms": lat["p50_ms"],
            "frame_p99_ms": lat["p99_ms"],
        }
    return out


def targets(result: Mapping[str, Any]) -> dict[str, Any]:
    modes = result["modes"]
    fused = modes["fused"]
    out: dict[str, Any] = {}
    car = fused["per_class"].get("car", {}).get("AP") or 0.0
    out["fused_car_ap_ge_0.40"] = {"value": car, "met": car >= 0.40}
    best = max((modes[m]["mAP"] or 0.0) for m in SINGLE)
    ratio = (fused["mAP"] or 0.0) / best if best > 0 else None
    out["fused_map_ge_1.10x_best_single"] = {
        "value": ratio,
        "best_single": best,
        "met": ratio is not None and ratio >= 1.10,
    }
    for mode, classes in VISIBLE.items():
        per = modes[mode]["per_class"]
        zero = [c for c in classes if per.get(c, {}).get("n", 0) > 0 and not (per[c]["AP"] or 0.0) > 0]
        out[f"{mode}_ap_gt_0_per_visible_class"] = {"zero_classes": zero, "met": not zero}
    # issue #32: against the run before camera-guided objects (fused mAP 0.191, 1-4-point car recall 0.22)
    few = next(
        (
            b
            for b in ((fused.get("recall_breakdown") or {}).get("car") or {}).get("by_points", [])
            if b["points"][0] == 1
        ),
        None,
    )
    recall = few["recall"] if few else None
    out["car_recall_1_4_points_gt_0.22"] = {"value": recall, "met": recall is not None and recall > 0.22}
    out["fused_map_gt_0.191"] = {"value": fused["mAP"], "met": (fused["mAP"] or 0.0) > 0.191}
    lock = result.get("lockstep_fusion", {}).get("default", {})
    if lock:
        p99 = lock.get("p99_ms")
        out["lockstep_frame_with_fusion_p99_le_450_ms"] = {"value": p99, "met": p99 is not None and p99 <= 450.0}
    with_radar, without = fused["AVE"], modes["no_radar"]["AVE"]
    out["ave_with_radar_lt_without"] = {
        "with_radar": with_radar,
        "without_radar": without,
        "met": with_radar is not None and without is not None and with_radar < without,
    }
    return out


def _fmt(x: Any, digits: int = 3) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def _bin_names(row: Mapping[str, Any]) -> list[str]:
    rb = (row.get("recall_breakdown") or {}).get("car") or {"by_range_m": [], "by_points": []}

    def name(b: Mapping[str, Any], unit: str) -> str:
        lo, hi = b[unit]
        return (
            f"{lo:g}+ {'m' if unit == 'range_m' else 'pts'}"
            if hi is None
            else f"{lo:g}-{hi:g} {'m' if unit == 'range_m' else 'pts'}"
        )

    return [name(b, "range_m") for b in rb["by_range_m"]] + [name(b, "points") for b in rb["by_points"]]


def _bins(rb: Mapping[str, Any]) -> list[str]:
    def name(b: Mapping[str, Any], unit: str) -> str:
        lo, hi = b[unit]
        suffix = "m" if unit == "range_m" else "pts"
        return f"{lo:g}+ {suffix}" if hi is None else f"{lo:g}-{hi:g} {suffix}"

    return [name(b, "range_m") for b in rb["by_range_m"]] + [name(b, "points") for b in rb["by_points"]]


def _guided_markdown(results: Mapping[str, Any]) -> list[str]:
    """Tables of the camera-guided study (issue #32): each setting on every dataset, what the step adds per
    class, range and annotated points, its objects' precision per range, and its cost."""
    studies = {n: r["camera_guided"] for n, r in results["datasets"].items() if "camera_guided" in r}
    if not studies:
        return []
    columns: list[tuple[str, str]] = []  # (dataset, part)
    for name, study in studies.items():
        first = next(iter(study["variants"].values()), {})
        columns += [(name, part) for part in first]
    lines = [
        "",
        "Camera-guided lidar objects (`fusion.camera_guided`; every row re-fuses the same replay's outputs): "
        "fused mAP / car AP",
        "",
        "| setting | " + " | ".join(f"{n} {p}" for n, p in columns) + " |",
        "|---|" + "---:|" * len(columns),
    ]
    for variant in GUIDED_VARIANTS:
        cells = []
        for name, part in columns:
            row = studies[name]["variants"].get(variant, {}).get(part)
            cells.append("-" if row is None else f"{_fmt(row['mAP'])} / {_fmt(row['AP'].get('car'))}")
        lines.append(f"| {variant} | " + " | ".join(cells) + " |")
    lines += _choices_markdown(results)
    for name, study in studies.items():
        lines += _breakdown_markdown(name, study.get("breakdown") or {})
    prec = [
        (n, ((s.get("breakdown") or {}).get("default") or {}).get("precision_by_source") or {})
        for n, s in studies.items()
    ]
    if prec:
        ranges = [
            b["range_m"]
            for b in next((p[CAMERA_GUIDED_SOURCE] for _, p in prec if CAMERA_GUIDED_SOURCE in p), {"by_range_m": []})[
                "by_range_m"
            ]
        ]
        lines += [
            "",
            "Precision of the camera-guided objects (nuScenes protocol on every drive: the share of them, at every "
            "score, that take an annotated object of their class at 2 m in the protocol's matching) per range",
            "",
            "| dataset | objects | all | " + " | ".join(_range_name(r) for r in ranges) + " |",
            "|---|---:|---:|" + "---:|" * len(ranges),
        ]
        for name, p in prec:
            g = p.get(CAMERA_GUIDED_SOURCE)
            if g is None:
                lines.append(f"| {name} | 0 | - |" + " - |" * len(ranges))
                continue
            cells = [f"{_fmt(b['precision'], 2)} ({b['n']})" for b in g["by_range_m"]]
            lines.append(f"| {name} | {g['n']} | {_fmt(g['precision'], 2)} | " + " | ".join(cells) + " |")
    oracle = results["datasets"].get("nuscenes", {}).get("guided_oracle")
    if oracle:
        lines += [
            "",
            "What limits car AP with camera-guided objects (nuScenes): annotated car centres given to the fused "
            "cars within 4 m",
            "",
            "| given to | cars moved | fused car AP | 0.5 / 1 / 2 / 4 m | car recall 1-5 / 5-20 / 20-100 / 100+ pts |",
            "|---|---:|---:|---|---|",
        ]
        for variant, row in oracle.items():
            if not isinstance(row, dict):
                continue
            th = " / ".join(_fmt(v) for v in (row["fused_car_ap_by_threshold"] or {}).values())
            rec = " / ".join(_fmt(b["recall"], 2) for b in row["car_recall_by_points"])
            lines.append(f"| {variant} | {row['cars_moved']} | {_fmt(row['fused_car_AP'])} | {th} | {rec} |")
    lines += [
        "",
        "Cost: the fusion step per frame (re-fused offline) and the lockstep frame with fusion, off / on",
        "",
        "| dataset | fusion p50 ms | fusion p99 ms | lockstep frame p50 ms | p99 ms |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, study in studies.items():
        c, lock = study.get("cost", {}), results["datasets"][name].get("lockstep_fusion", {})
        off, on = c.get("off", {}), c.get("default", {})
        lo, ln = lock.get("off", {}), lock.get("default", {})
        lines.append(
            f"| {name} | {_fmt(off.get('fusion_p50_ms'), 1)} / {_fmt(on.get('fusion_p50_ms'), 1)} "
            f"| {_fmt(off.get('fusion_p99_ms'), 1)} / {_fmt(on.get('fusion_p99_ms'), 1)} "
            f"| {_fmt(lo.get('p50_ms'), 1)} / {_fmt(ln.get('p50_ms'), 1)} "
            f"| {_fmt(lo.get('p99_ms'), 1)} / {_fmt(ln.get('p99_ms'), 1)} |"
        )
    return lines


def _range_name(r: list[float | None]) -> str:
    lo, hi = r
    return f"{lo:g}+ m" if hi is None else f"{lo:g}-{hi:g} m"


def _choices_markdown(results: Mapping[str, Any]) -> list[str]:
    """Every setting chosen on the scene against its alternative, on every drive and half: the difference
    chosen - alternative in mAP and car AP with its 95 % paired-bootstrap interval, and the verdict."""
    studies = {n: r["choices"] for n, r in results["datasets"].items() if "choices" in r}
    if not studies:
        return []
    columns: list[tuple[str, str]] = []
    for name, study in studies.items():
        first: dict[str, Any] = next((c["parts"] for c in study.values() if "parts" in c), {})
        columns += [(name, part) for part in first]
    lines = [
        "",
        'Every setting chosen on scene-0916 against the value it was chosen over (issue #32, "do not tune to one '
        'scene"): chosen - alternative, fused mAP / car AP, with the 95 % paired-bootstrap interval over the '
        f"drive's frames ({BOOTSTRAP_RESAMPLES} resamples); **worse** / *better*: beyond noise (the interval "
        "excludes 0)",
        "",
        "| setting | " + " | ".join(f"{n} {p}" for n, p in columns) + " | kept | alternative passes |",
        "|---|" + "---|" * len(columns) + "---|---|",
    ]
    for choice in CHOICES:
        cells, worse, better = [], False, False
        for name, part in columns:
            c = studies[name].get(choice.name, {})
            row = (c.get("parts") or {}).get(part)
            if row is None:
                cells.append("n/a" if "not_applicable" in c else ("error" if "error" in c else "-"))
                continue
            d = row["difference"]
            worse = worse or bool(row["worse_beyond_noise"])
            better = better or bool(row["better_beyond_noise"])

            def cell(k: str, d: Mapping[str, Any] = d, row: Mapping[str, Any] = row) -> str:
                x = d.get(k) or {}
                text = f"{_sgn(x.get('difference'))} [{_sgn(x.get('low'))}, {_sgn(x.get('high'))}]"
                if k in row["worse_beyond_noise"]:
                    return f"**{text}**"
                return f"*{text}*" if k in row["better_beyond_noise"] else text

            cells.append(f"{cell('mAP')} / {cell('car')}")
        mode = f" ({choice.mode})" if choice.mode != "fused" else ""
        verdict = f" | {'no' if worse else 'yes'} | {'no' if better else 'yes'} |"
        lines.append(f"| {choice.name}{mode} | " + " | ".join(cells) + verdict)
    return lines


def _sgn(x: float | None) -> str:
    return "-" if x is None else f"{x:+.3f}"


def _breakdown_markdown(name: str, b: Mapping[str, Any]) -> list[str]:
    """Per class, fused without -> with camera-guided objects (nuScenes protocol): AP and AP per range bin;
    recall at 2 m per range bin and annotated points."""
    off, on = b.get("off") or {}, b.get("default") or {}
    if not off.get("ap_by_range"):
        return []
    labels = [lab for lab, n in off["n"].items() if n]
    ranges = [r["range_m"] for r in off["ap_by_range"][labels[0]]] if labels else []
    lines = [
        "",
        f"What the camera-guided objects add on {name} (nuScenes protocol; fused without → with them): AP per "
        "class and per range bin (ground truth and detections in the bin), n = annotated objects",
        "",
        "| class | AP | " + " | ".join(_range_name(r) for r in ranges) + " |",
        "|---|---:|" + "---:|" * len(ranges),
    ]
    for label in labels:
        cells = [
            f"{_fmt(x['AP'], 2)} → {_fmt(y['AP'], 2)} ({x['n']})"
            for x, y in zip(off["ap_by_range"][label], on["ap_by_range"][label], strict=True)
        ]
        ap = f"{_fmt(off['AP'].get(label))} → {_fmt(on['AP'].get(label))} ({off['n'][label]})"
        lines.append(f"| {label} | {ap} | " + " | ".join(cells) + " |")
    rb_off, rb_on = off.get("recall_breakdown") or {}, on.get("recall_breakdown") or {}
    if rb_off:
        bins = _bins(next(iter(rb_off.values())))
        lines += [
            "",
            f"... and recall at 2 m at every score on {name}, per range and annotated lidar + radar points",
            "",
            "| class | " + " | ".join(bins) + " |",
            "|---|" + "---:|" * len(bins),
        ]
        for label in rb_off:
            x_, y_ = rb_off[label], rb_on.get(label, rb_off[label])
            cells = [
                f"{_fmt(x['recall'], 2)} → {_fmt(y['recall'], 2)} ({x['n']})"
                for x, y in zip(x_["by_range_m"] + x_["by_points"], y_["by_range_m"] + y_["by_points"], strict=True)
            ]
            lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return lines


def lockstep_fusion(drive: Path) -> dict[str, Any]:
    """The lockstep frame with fusion in it (the runtime's own fusion stage, every sensor awaited), with the
    camera-guided step off and on: frame latency p50/p99 and the fusion stage's."""
    from perception.replay import ReplayOptions, replay_drive

    base = load_config(ROOT / "launch" / "replay.yaml")
    out: dict[str, Any] = {}
    for variant in ("off", "default"):
        cfg = _with_guided(base, GUIDED_VARIANTS[variant])
        opts = ReplayOptions(rate="lockstep", fusion=True, evaluate=False, progress=False)
        outcome = anyio.run(functools.partial(replay_drive, drive, cfg, opts), backend="asyncio")
        lat = outcome.report.latency
        total, fusion = lat.total or LatencyStats(), lat.stages.get("fusion", LatencyStats())
        out[variant] = {
            "p50_ms": total.p50,
            "p99_ms": total.p99,
            "fusion_p50_ms": fusion.p50,
            "fusion_p99_ms": fusion.p99,
        }
    return out


def markdown(results: Mapping[str, Any]) -> str:
    lines = [
        f"Measured {results['environment'].get('date', '')} on {results['environment'].get('cpu', '?')} "
        f"(load {results['environment'].get('load_average', '?')} at the start, "
        f"{results.get('load_average_end', '?')} at the end; {results.get('seconds_total', '?')} s in all).",
        "",
        "| dataset | mode | protocol | mAP | NDS | car AP (n) | pedestrian AP (n) | ATE m | AVE m/s |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, res in results["datasets"].items():
        if "error" in res:
            lines.append(f"| {name} | - | - | skipped: {res['error']} | | | | | |")
            continue
        for mode, row in res["modes"].items():
            pc = row["per_class"]
            car, ped = pc.get("car", {}), pc.get("pedestrian", {})
            lines.append(
                f"| {name} | {mode} | {row['protocol']} | {_fmt(row['mAP'])} | {_fmt(row['NDS'])} "
                f"| {_fmt(car.get('AP'))} ({car.get('n', 0)}) | {_fmt(ped.get('AP'))} ({ped.get('n', 0)}) "
                f"| {_fmt(row['ATE'], 2)} | {_fmt(row['AVE'], 2)} |"
            )
    lines += ["", "| dataset | sensors | lockstep frame p50 ms | p99 ms |", "|---|---:|---:|---:|"]
    for name, res in results["datasets"].items():
        if "error" not in res:
            lat = res["latency_lockstep"]
            lines.append(f"| {name} | {len(res['sensors'])} | {_fmt(lat['p50_ms'], 1)} | {_fmt(lat['p99_ms'], 1)} |")
    nus = results["datasets"].get("nuscenes", {})
    if "modes" in nus:
        lines += [
            "",
            "Diagnosis (nuScenes): car recall at 2 m at every score, per range and per annotated points",
            "",
            "| mode | " + " | ".join(_bin_names(nus["modes"]["fused"])) + " |",
            "|---|" + "---:|" * len(_bin_names(nus["modes"]["fused"])),
        ]
        for mode in ("fused", "lidar_only", "camera_only", "radar_only"):
            rb = (nus["modes"].get(mode, {}).get("recall_breakdown") or {}).get("car")
            if rb:
                cells = [f"{_fmt(b['recall'], 2)} ({b['n']})" for b in rb["by_range_m"] + rb["by_points"]]
                lines.append(f"| {mode} | " + " | ".join(cells) + " |")
        by_th = {m: (nus["modes"].get(m, {}).get("ap_by_threshold") or {}) for m in ("fused", "lidar_only")}
        if by_th["fused"]:
            ths = list(next(iter(by_th["fused"].values())))
            lines += [
                "",
                "AP per centre-distance threshold (nuScenes; the class AP is their mean)",
                "",
                "| mode | class | " + " | ".join(f"{t} m" for t in ths) + " |",
                "|---|---|" + "---:|" * len(ths),
            ]
            for mode, per in by_th.items():
                for label, aps in per.items():
                    lines.append(f"| {mode} | {label} | " + " | ".join(_fmt(aps.get(t)) for t in ths) + " |")
    if "localisation_oracle" in nus:
        lines += [
            "",
            "Localisation oracle (nuScenes): lidar car boxes within R of an annotated car given its centre, re-fused",
            "",
            "| R m | boxes moved | fused car AP | 0.5 / 1 / 2 / 4 m |",
            "|---:|---:|---:|---|",
        ]
        for radius, row in nus["localisation_oracle"].items():
            th = " / ".join(_fmt(v) for v in (row["fused_car_ap_by_threshold"] or {}).values())
            lines.append(
                f"| {radius} | {row['boxes_moved']} of {row['lidar_car_boxes']} | {_fmt(row['fused_car_AP'])} | {th} |"
            )
    if "radar_visibility" in nus:
        lines += ["", "| label | GT < 50 m | >= 1 radar point | >= 2 | mean points |", "|---|---:|---:|---:|---:|"]
        for label, v in nus["radar_visibility"].items():
            shares = f"{_fmt(v['share_ge_1'], 2)} | {_fmt(v['share_ge_2'], 2)}"
            lines.append(f"| {label} | {v['n']} | {shares} | {_fmt(v['mean'], 2)} |")
    acc_rows = [(n, r["accumulation"]) for n, r in results["datasets"].items() if "accumulation" in r]
    if acc_rows:
        lines += [
            "",
            "Lidar sweep accumulation (`accumulate_ms`; each window a full replay, the lidar model re-run)",
            "",
            "| dataset | window ms | sweeps merged | fused mAP | lidar_only mAP | fused car / truck / ped / cyclist AP "
            "| lidar request p50 ms | frame p50 / p99 ms |",
            "|---|---:|---:|---:|---:|---|---:|---:|",
        ]
        for name, acc in acc_rows:
            for ms, row in acc.items():
                pc = row["modes"]["fused"]["per_class"]
                aps = " / ".join(_fmt(pc.get(c, {}).get("AP")) for c in ("car", "truck", "pedestrian", "cyclist"))
                merged = (row["report"] or {}).get("merged", 0)
                infer = ", ".join(_fmt(v, 1) for v in row["lidar_total_p50_ms"].values()) or "-"
                lines.append(
                    f"| {name} | {ms} | {merged} | {_fmt(row['modes']['fused']['mAP'])} "
                    f"| {_fmt(row['modes']['lidar_only']['mAP'])} | {aps} | {infer} "
                    f"| {_fmt(row['frame_p50_ms'], 1)} / {_fmt(row['frame_p99_ms'], 1)} |"
                )
    lines += _guided_markdown(results)
    if "targets" in results:
        lines += ["", "| target (nuScenes scene) | value | met |", "|---|---|---|"]
        for name, t in results["targets"].items():
            value = {k: v for k, v in t.items() if k != "met"}
            lines.append(f"| {name} | {json.dumps(value)} | {'yes' if t['met'] else 'no'} |")
    return "\n".join(lines) + "\n"


def _write_readme(table: str) -> None:
    begin, end = "<!-- real:begin -->", "<!-- real:end -->"
    text = README.read_text(encoding="utf-8")
    block = f"{begin}\n{table}{end}"
    if begin in text and end in text:
        text = text[: text.index(begin)] + block + text[text.index(end) + len(end) :]
    else:
        text = text.rstrip("\n") + "\n\n## `bench/bench_real.py` — real drives\n\n" + block + "\n"
    README.write_text(text, encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--datasets", default="nuscenes,kitti,sim")
    p.add_argument("--out", type=Path, default=RESULTS)
    p.add_argument("--no-readme", action="store_true", help="do not rewrite the table in bench/README.md")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    root = real_data_root()
    wanted = [d for d in args.datasets.split(",") if d]
    started = time.perf_counter()
    results: dict[str, Any] = {"environment": environment(), "real_data": str(root), "datasets": {}}
    with tempfile.TemporaryDirectory(prefix="bench-real-") as tmp:
        for name in wanted:
            log.info("dataset %s", name)
            try:
                if name == "sim":
                    drive = BUNDLED
                else:
                    folder, importer = IMPORTERS[name]
                    if not (root / folder).is_dir():
                        raise RuntimeError(f"{root / folder} is absent (set PERCEPTION_REAL_DATA)")
                    drive = importer(root, Path(tmp))
                repo = Path(tmp) / "models"
                repo.mkdir(exist_ok=True)
                results["datasets"][name] = score(drive, name, repo)
                if name in LOCKSTEP_FUSION:
                    results["datasets"][name]["lockstep_fusion"] = lockstep_fusion(drive)
                if ACCUMULATE_MS.get(name):
                    results["datasets"][name]["accumulation"] = accumulation(drive, ACCUMULATE_MS[name])
            except Exception as exc:  # a missing dataset or importer is reported, the others go on
                log.warning("dataset %s: %s", name, exc)
                results["datasets"][name] = {"error": str(exc)}
    results["seconds_total"] = round(time.perf_counter() - started, 1)
    results["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
    nus = results["datasets"].get("nuscenes", {})
    if "modes" in nus:
        results["targets"] = targets(nus)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    table = markdown(results)
    if not args.no_readme:
        _write_readme(table)
    sys.stdout.write(table)
    log.info("wrote %s", args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
