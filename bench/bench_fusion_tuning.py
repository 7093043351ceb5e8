"""Fusion settings measured on the real nuScenes scene and the simulated drive in the same run.

Each drive is replayed once in lockstep with every sensor (the models' outputs are kept); then every
variant of the fusion settings re-fuses those same outputs in every sensor mode and is scored (the
nuScenes protocol on the nuScenes scene, the native one on the simulated drive). So the variants differ
only in fusion, and a setting tuned on the real scene is seen on the simulator at once.

    .venv/bin/python bench/bench_fusion_tuning.py [--out bench/results/fusion_tuning.json]

Reads the real data from ``$PERCEPTION_REAL_DATA`` (default ``../shared/real_data``).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import logging
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import anyio

from perception.benchmark import environment
from perception.config import load_config
from perception.drives import DriveReader
from perception.fusion import FusionParams
from perception.replay import each_frame, evaluate_modes, score_modes
from perception.scheduler import Session
from perception.types import FrameResult

log = logging.getLogger("bench_fusion_tuning")

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results" / "fusion_tuning.json"

#: name -> (FusionConfig changes, FusionParams changes)
VARIANTS: Mapping[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "default": ({}, {}),
    "threshold_0.15": ({"score_threshold": 0.15}, {}),
    "threshold_0.1": ({"score_threshold": 0.1}, {}),
    "radar_only_0.8": ({}, {"radar_only_factor": 0.8}),
    "threshold_0.1_radar_only_0.8": ({"score_threshold": 0.1}, {"radar_only_factor": 0.8}),
    "threshold_0.1_camera_only_0.8": ({"score_threshold": 0.1}, {"camera_only_factor": 0.8}),
    # radar-only trucks by return count (default: by the drive's source, 5 on recordings, off on the sim)
    **{f"radar_truck_returns_{n}": ({"radar_truck_returns": n}, {}) for n in (0, 4, 5, 6, 8, 12)},
}


def _drives(tmp: Path) -> dict[str, Path]:
    sys.path.insert(0, str(ROOT / "bench"))
    from bench_real import BUNDLED, _import_nuscenes, real_data_root

    out = {"sim": BUNDLED}
    root = real_data_root()
    if (root / "nuscenes-scene-0916").is_dir():
        out["nuscenes"] = _import_nuscenes(root, tmp)
    else:
        log.warning("no nuScenes scene under %s: only the simulated drive is measured", root)
    return out


def _row(summary: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "mAP": summary.get("mAP"),
        "NDS": summary.get("NDS"),
        "AVE": summary.get("ave"),
        "per_class_ap": summary.get("per_class_ap"),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=RESULTS)
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    base = load_config(ROOT / "launch" / "replay.yaml")
    results: dict[str, Any] = {"environment": environment(), "variants": {}, "drives": {}}
    with tempfile.TemporaryDirectory(prefix="bench-fusion-tuning-") as tmp:
        for name, drive in _drives(Path(tmp)).items():
            replayed: list[FrameResult] = []
            sinks = [each_frame(replayed.append)]
            anyio.run(functools.partial(evaluate_modes, drive, base, progress=False, sinks=sinks), backend="asyncio")
            per_variant: dict[str, Any] = {}
            with DriveReader(drive) as reader:
                cfg0 = Session.assemble(base, reader.source).config
                for variant, (fusion_changes, param_changes) in VARIANTS.items():
                    cfg = dataclasses.replace(cfg0, fusion=dataclasses.replace(cfg0.fusion, **fusion_changes))
                    params = dataclasses.replace(FusionParams(), **param_changes)
                    modes = score_modes(replayed, cfg, reader, fusion_params=params)
                    per_variant[variant] = {m: _row(s) for m, s in modes.items()}
                    log.info("%s %s: fused mAP %.3f", name, variant, modes["fused"]["mAP"])
            results["drives"][name] = per_variant
    results["variants"] = {k: {"fusion": f, "params": q} for k, (f, q) in VARIANTS.items()}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    for name, per_variant in results["drives"].items():
        for variant, modes in per_variant.items():
            cells = " ".join(f"{m}={(r['mAP'] or 0):.3f}" for m, r in modes.items())
            sys.stdout.write(f"{name:9s} {variant:32s} {cells}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
