"""Output paths confined to the output directory the user chose."""

from __future__ import annotations

from pathlib import Path

from perception.errors import ConfigError

__all__ = ["safe_output_path"]


def safe_output_path(out_dir: Path, name: str) -> Path:
    """``out_dir/name``, refusing names (or planted symlinks) that would escape the output directory."""
    root = out_dir.resolve()
    path = (root / name).resolve()
    if root != path and root not in path.parents:
        raise ConfigError(f"output {name!r} escapes the output directory {out_dir}", key="output")
    return path
