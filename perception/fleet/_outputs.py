"""Per-drive outputs written once: a staging directory, then one atomic rename to ``OUT/<drive>/``.

A drive's worker writes into ``OUT/.staging/<drive>.<attempt>.<pid>/`` and renames it into place only
when the replay has ended, so a worker killed mid-drive leaves a staging directory (removed by the
driver at the end of the run), never a partial ``OUT/<drive>/``, and a retried drive never leaves two
copies or duplicate records. An earlier run's ``OUT/<drive>/`` is replaced whole. The rename is atomic
on one filesystem: on a cluster, ``OUT`` is a directory every node shares (NFS...).
"""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path

__all__ = ["STAGING", "clear_staging", "publish", "staging_dir"]

STAGING = ".staging"


def staging_dir(out: Path, name: str, attempt: int) -> Path:
    """A fresh, empty staging directory for ``attempt`` of drive ``name`` in this process."""
    path = out / STAGING / f"{name}.{attempt}.{os.getpid()}"
    if path.exists():
        shutil.rmtree(path)
    path.mkdir(parents=True)
    return path


def publish(staging: Path, final: Path) -> None:
    """Move ``staging`` to ``final`` in one rename, replacing an earlier ``final`` whole."""
    old = None
    if final.exists():
        old = final.parent / STAGING / f"{final.name}.old.{uuid.uuid4().hex[:8]}"
        os.replace(final, old)
    os.replace(staging, final)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def clear_staging(out: Path) -> None:
    """Remove what unfinished attempts left (a killed worker's, a cancelled drive's)."""
    shutil.rmtree(out / STAGING, ignore_errors=True)
