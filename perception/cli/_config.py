"""``perception config FILE``: validate a launch profile and print it resolved."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

from perception.config import load_config

__all__ = ["register"]


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "config", help="validate a launch profile (YAML) and print it resolved", description=__doc__
    )
    p.add_argument("file", type=Path, help="launch profile, e.g. launch/replay.yaml")
    p.set_defaults(func=run)


def _plain(obj: Any) -> Any:
    """``obj`` as JSON data: the keys a profile has (not the file it came from, ``source``)."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        fields = [f for f in dataclasses.fields(obj) if f.metadata.get("yaml", True)]
        return {f.name: _plain(getattr(obj, f.name)) for f in fields}
    if isinstance(obj, tuple | list):
        return [_plain(x) for x in obj]
    if hasattr(obj, "items"):
        return {k: _plain(v) for k, v in obj.items()}
    if isinstance(obj, Path):
        return str(obj)
    return obj


def run(args: argparse.Namespace) -> int:
    cfg = load_config(args.file)
    sys.stdout.write(json.dumps(_plain(cfg), indent=2) + "\n")
    sensors = f"{len(cfg.sensors)} sensors" if cfg.sensors else "sensors from the drive"
    sys.stdout.write(f"{args.file}: ok ({sensors})\n")
    return 0
