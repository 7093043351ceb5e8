"""How this package names ``/dev/shm`` regions: ``perception_<owner-pid>_<random>_...``.

The owner pid in the name lets the embedded server's housekeeping (:mod:`perception.server`) tell a
leftover of a crashed run (owner dead) from a live region, which it never touches.
"""

from __future__ import annotations

import os
import re
import secrets
from pathlib import Path

__all__ = ["SHM_DIR", "SHM_NAME_PREFIX", "make_shm_prefix", "shm_owner_pid"]

#: Where POSIX shared-memory regions live (Triton's and this package's).
SHM_DIR = Path("/dev/shm")

#: Every region this package creates starts with ``perception_<owner-pid>_``.
SHM_NAME_PREFIX = "perception_"
_OWNED = re.compile(rf"^{SHM_NAME_PREFIX}(\d+)_")


def make_shm_prefix(owner_pid: int | None = None) -> str:
    """``perception_<pid>_<random>_``: identifies the owner process and one server or pool instance."""
    pid = os.getpid() if owner_pid is None else owner_pid
    return f"{SHM_NAME_PREFIX}{pid}_{secrets.token_hex(4)}_"


def shm_owner_pid(name: str) -> int | None:
    """The owner pid in a region name of this package, else None (not ours)."""
    match = _OWNED.match(name)
    return int(match.group(1)) if match else None
