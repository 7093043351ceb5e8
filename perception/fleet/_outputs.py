"""Per-drive outputs written once: a staging directory, then one atomic rename to ``OUT/<drive>/``.

A drive's worker writes into ``OUT/.perception-fleet-staging/<drive>.<attempt>.<pid>/`` and renames it
into place only when the replay has ended, so a worker killed mid-drive leaves a staging directory
(removed by the driver at the end of the run), never a partial ``OUT/<drive>/``, and a retried drive never
leaves two copies or duplicate records. The rename is atomic on one filesystem: on a cluster, ``OUT`` is a
directory every node shares (NFS...). The staging root (:data:`STAGING`) is the tool's own: it is made
holding :data:`STAGING_MARKER` and removed only when it holds it, so a user's directory of that name, or
any other dot-directory in ``OUT`` (``.staging``, ``.git``...), is never used nor removed.

A reused ``OUT`` keeps the drive directories of an earlier run that this run does not replay: they are
left as they are (logged at the start), and are no part of this run -- its ``fleet.json``/``fleet.md``
list this run's drives only, and a later ``--baseline OUT`` compares the drives ``fleet.json`` lists.

Only what the tool made is written or replaced. ``OUT`` is claimed at the start of a run
(:func:`claim_output`): a new or empty directory gets the marker :data:`OUT_MARKER`; one holding
anything else without it (an earlier fleet run's ``fleet.json`` counts) is refused unless ``--force``.
Each published drive directory carries :data:`DRIVE_MARKER`, and an existing ``OUT/<drive>/`` is
replaced only when it is such a directory (or an earlier run's, holding :data:`SUMMARY_FILE`): a drive
named ``models.mcap`` published into ``--out .`` fails that drive and leaves ``./models`` as it was,
``--force`` or not.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Collection
from pathlib import Path

from perception.errors import FleetError

__all__ = [
    "ADMISSION_FILE",
    "DRIVE_MARKER",
    "FLEET_JSON",
    "OUT_MARKER",
    "STAGING",
    "STAGING_MARKER",
    "SUMMARY_FILE",
    "claim_output",
    "clear_staging",
    "earlier_drives",
    "publish",
    "staging_dir",
]

#: In ``OUT``: where drives are staged before they are published (the tool's own; see the module docs).
STAGING = ".perception-fleet-staging"
#: In ``OUT/STAGING``: this staging directory is one the tool made (so it may remove it).
STAGING_MARKER = ".perception-fleet-staging-dir"
#: In ``OUT``: this directory is a fleet run's output (written by :func:`claim_output`).
OUT_MARKER = ".perception-fleet"
#: In ``OUT/<drive>/``: this directory is a drive output the tool published (written by :func:`publish`).
DRIVE_MARKER = ".perception-fleet-drive"
#: A drive's summary in ``OUT/<drive>/`` (also what marks an output of runs before the markers).
SUMMARY_FILE = "fleet_drive.json"
#: Each drive's frames as its node's shared admission admitted them (``OUT/<drive>/``; :mod:`._worker`).
ADMISSION_FILE = "fleet_admission.json"
#: In ``OUT``: the run's report (:mod:`._report`); its ``drives`` are the drives that run replayed.
FLEET_JSON = "fleet.json"


def claim_output(out: Path, *, force: bool = False) -> None:
    """Make ``out`` this tool's output directory, or refuse it (:class:`FleetError`): it must be new,
    empty, or already a fleet output (marker or an earlier run's report), unless ``force``."""
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise FleetError("the output is not a directory", file=str(out))
    if out.is_dir() and not (out / OUT_MARKER).is_file() and not (out / FLEET_JSON).is_file():
        other = sorted(p.name for p in out.iterdir())
        if other and not force:
            shown = ", ".join(other[:5]) + (f" and {len(other) - 5} more" if len(other) > 5 else "")
            raise FleetError(
                f"the output directory holds other files ({shown}) and is not a fleet output; "
                "choose a new or empty directory, or pass --force to write beside them "
                "(existing directories that are not fleet drive outputs are never replaced)",
                file=str(out),
            )
    staging = out / STAGING
    if (staging.exists() or staging.is_symlink()) and not _is_staging(staging):
        raise FleetError(
            f"{staging} exists and is not the fleet's staging directory (no {STAGING_MARKER}); "
            "it is neither used nor removed: move it or choose another --out",
            file=str(staging),
        )
    out.mkdir(parents=True, exist_ok=True)
    (out / OUT_MARKER).write_text("perception fleet output\n", encoding="utf-8")


def earlier_drives(out: Path, names: Collection[str]) -> list[str]:
    """The drive outputs in ``out`` of an earlier run that are not among ``names`` (this run's drives): kept
    as they are, but no part of this run (its ``fleet.json``, its comparisons)."""
    ours = set(names)
    return sorted(p.name for p in out.iterdir() if p.name not in ours and is_drive_output(p))


def is_drive_output(path: Path) -> bool:
    """Whether ``path`` is a drive directory the tool published (its marker, or an older run's summary)."""
    return (
        path.is_dir() and not path.is_symlink() and ((path / DRIVE_MARKER).is_file() or (path / SUMMARY_FILE).is_file())
    )


def staging_dir(out: Path, name: str, attempt: int) -> Path:
    """A fresh, empty staging directory for ``attempt`` of drive ``name`` in this process."""
    path = _staging_root(out) / f"{name}.{attempt}.{os.getpid()}"
    if path.exists():
        shutil.rmtree(path)
    path.mkdir(parents=True)
    return path


def publish(staging: Path, final: Path) -> None:
    """Mark ``staging`` as a drive output and move it to ``final`` in one rename, replacing an earlier
    ``final`` whole -- only if that is a drive output too (:class:`FleetError` naming it otherwise)."""
    old = None
    if final.exists() or final.is_symlink():
        if not is_drive_output(final):
            raise FleetError(
                f"{final} exists and is not a fleet drive output (no {DRIVE_MARKER}); not replaced: "
                "rename the drive or choose another --out",
                file=str(final),
            )
        old = _staging_root(final.parent) / f"{final.name}.old.{uuid.uuid4().hex[:8]}"
        os.replace(final, old)
    (staging / DRIVE_MARKER).write_text("perception fleet drive output\n", encoding="utf-8")
    os.replace(staging, final)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def clear_staging(out: Path) -> None:
    """Remove what unfinished attempts left (a killed worker's, a cancelled drive's): the staging
    directory, only if the tool made it (it holds :data:`STAGING_MARKER`)."""
    staging = out / STAGING
    if _is_staging(staging):
        shutil.rmtree(staging, ignore_errors=True)


def _is_staging(path: Path) -> bool:
    return path.is_dir() and not path.is_symlink() and (path / STAGING_MARKER).is_file()


def _staging_root(out: Path) -> Path:
    """``OUT/STAGING``, made with its marker if there is none yet (atomically: workers on several nodes may
    race to make it); a directory of that name without the marker is not used (:class:`FleetError`)."""
    root = out / STAGING
    if not root.exists() and not root.is_symlink():
        fresh = out / f"{STAGING}.{uuid.uuid4().hex[:8]}"
        fresh.mkdir(parents=True)
        (fresh / STAGING_MARKER).write_text("perception fleet staging; removed at the end of a run\n", encoding="utf-8")
        try:
            os.rename(fresh, root)
        except OSError:  # another process made it meanwhile
            shutil.rmtree(fresh, ignore_errors=True)
    if not _is_staging(root):
        raise FleetError(f"{root} is not the fleet's staging directory (no {STAGING_MARKER}); not used", file=str(root))
    return root
