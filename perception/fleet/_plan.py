"""What a fleet run replays: the drives named on the command line, each with a unique output name."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from perception.errors import ConfigError
from perception.fleet._outputs import OUT_MARKER

__all__ = ["DRIVE_SUFFIX", "FleetDrive", "find_drives"]

#: The drive format's file suffix (``perception sim``, ``perception import`` write MCAP).
DRIVE_SUFFIX = ".mcap"


@dataclass(frozen=True, slots=True)
class FleetDrive:
    """One drive of a fleet run: its file, and the name of its output directory ``OUT/<name>/``."""

    name: str
    path: Path


def find_drives(paths: Sequence[str | os.PathLike[str]]) -> list[FleetDrive]:
    """The drives of ``paths``: files as given, directories searched (recursively) for ``*.mcap``.

    Names are file stems; two drives with one stem are told apart by their parent directory
    (``a/drive`` -> ``a-drive``). A directory search skips hidden directories and fleet outputs
    (holding :data:`OUT_MARKER`: an earlier run's ``--out``, whose ``fused.mcap`` files are results, not
    drives). A missing path, a directory without drives, or two paths that name one file are a
    :class:`ConfigError` naming the path.
    """
    if not paths:
        raise ConfigError("no drive given: pass drive files or a directory of drives", key="DRIVE")
    files: list[Path] = []
    for raw in paths:
        p = Path(raw)
        if p.is_dir():
            if (p / OUT_MARKER).is_file():
                raise ConfigError("this directory is a fleet run's output, not a directory of drives", file=str(p))
            found = sorted(
                f for f in p.rglob(f"*{DRIVE_SUFFIX}") if f.is_file() and not _hidden(f, p) and not _in_output(f, p)
            )
            if not found:
                raise ConfigError(f"no {DRIVE_SUFFIX} drive in this directory", file=str(p))
            files.extend(found)
        elif p.is_file():
            files.append(p)
        else:
            raise ConfigError("drive not found", file=str(p))
    seen: dict[Path, Path] = {}
    for f in files:
        real = f.resolve()
        if real in seen:
            raise ConfigError(f"the same drive is given twice (also as {seen[real]})", file=str(f))
        seen[real] = f
    return _named(files)


def _hidden(f: Path, root: Path) -> bool:
    return any(part.startswith(".") for part in f.relative_to(root).parts)


def _in_output(f: Path, root: Path) -> bool:
    """Whether ``f`` lies in a fleet output directory under ``root``."""
    folder = f.parent
    while folder != root:
        if (folder / OUT_MARKER).is_file():
            return True
        folder = folder.parent
    return False


def _named(files: list[Path]) -> list[FleetDrive]:
    by_stem: dict[str, list[Path]] = {}
    for f in files:
        by_stem.setdefault(f.stem, []).append(f)
    drives = []
    for f in files:
        name = f.stem if len(by_stem[f.stem]) == 1 else f"{f.resolve().parent.name}-{f.stem}"
        drives.append(FleetDrive(name=name, path=f))
    names = [d.name for d in drives]
    clash = sorted({n for n in names if names.count(n) > 1})
    if clash:
        where = ", ".join(str(d.path) for d in drives if d.name in clash)
        raise ConfigError(f"drives would share the output name {clash[0]!r}: rename one ({where})", key="DRIVE")
    return drives
