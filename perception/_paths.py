"""Output paths confined to the output directory the user chose."""

from __future__ import annotations

from pathlib import Path

from perception.errors import ConfigError

__all__ = [
    "DETECTIONS_FILE",
    "FUSED_MCAP_FILE",
    "MODES_FILE",
    "REPORT_FILE",
    "REPORT_MD_FILE",
    "safe_output_path",
]

#: The files of a replay's output directory, defined once: replay writes them; budget, viz, fleet and the
#: baseline gate read them.
DETECTIONS_FILE = "detections.jsonl"  # one record per frame
REPORT_FILE = "report.json"
REPORT_MD_FILE = "report.md"
FUSED_MCAP_FILE = "fused.mcap"  # the drive plus fused detections, for Foxglove
MODES_FILE = "modes.json"  # every sensor mode's scores (--compare-modes, fleet --eval)


def safe_output_path(out_dir: Path, name: str) -> Path:
    """``out_dir/name``, refusing names (or planted symlinks) that would escape the output directory."""
    root = out_dir.resolve()
    path = (root / name).resolve()
    if root != path and root not in path.parents:
        raise ConfigError(f"output {name!r} escapes the output directory {out_dir}", key="output")
    return path
