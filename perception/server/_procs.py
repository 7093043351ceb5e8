"""Linux process and ``/dev/shm`` housekeeping for the embedded server.

Shared-memory regions created on behalf of this package (by the python backend of an embedded server,
or by the client transport) are named ``perception_<owner-pid>_...`` (:mod:`perception.triton` names
them). A region whose owner pid is no longer alive is a leftover of a crashed run and can be removed;
regions of live pids are never touched.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import signal
from collections.abc import Callable
from pathlib import Path

from perception.triton import SHM_NAME_PREFIX, shm_owner_pid

__all__ = [
    "SHM_DIR",
    "cleanup_stale_shm",
    "pdeathsig_preexec",
    "pid_alive",
    "process_group_members",
    "remove_shm_prefix",
    "signal_group",
]

log = logging.getLogger(__name__)

SHM_DIR = Path("/dev/shm")

_PR_SET_PDEATHSIG = 1


def pid_alive(pid: int) -> bool:
    """True when a process with this pid exists (zombies included; EPERM means it exists)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _unlink(path: Path) -> bool:
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    except OSError as exc:
        log.warning("cannot remove shared-memory leftover %s: %s", path, exc)
        return False
    return True


def remove_shm_prefix(prefix: str, shm_dir: Path = SHM_DIR) -> list[str]:
    """Remove every ``shm_dir`` entry whose name starts with ``prefix``; return the removed names."""
    if not prefix.startswith(SHM_NAME_PREFIX) or len(prefix) <= len(SHM_NAME_PREFIX):
        raise ValueError(f"refusing to remove shared memory outside this package's namespace: {prefix!r}")
    try:
        entries = list(shm_dir.iterdir())
    except OSError:
        return []
    return [p.name for p in entries if p.name.startswith(prefix) and _unlink(p)]


def cleanup_stale_shm(shm_dir: Path = SHM_DIR) -> list[str]:
    """Remove ``perception_<pid>_*`` regions whose owner pid is dead; return the removed names."""
    try:
        entries = list(shm_dir.iterdir())
    except OSError:
        return []
    alive: dict[int, bool] = {}
    removed = []
    for path in entries:
        pid = shm_owner_pid(path.name)
        if pid is None:
            continue
        if pid not in alive:
            alive[pid] = pid == os.getpid() or pid_alive(pid)
        if not alive[pid] and _unlink(path):
            removed.append(path.name)
    if removed:
        log.info("removed %d shared-memory leftover(s) of dead processes: %s", len(removed), removed)
    return removed


def process_group_members(pgid: int) -> list[int]:
    """Pids of the live (non-zombie) processes in process group ``pgid``, from ``/proc``."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # Field 2 (comm) may contain spaces and parentheses: split after its closing ')'.
        fields = stat[stat.rfind(")") + 2 :].split()
        state, group = fields[0], int(fields[2])
        if group == pgid and state not in ("Z", "X"):
            members.append(int(entry.name))
    return members


def _load_prctl() -> Callable[..., int] | None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        prctl: Callable[..., int] = libc.prctl
        return prctl
    except (OSError, AttributeError):
        return None


_PRCTL = _load_prctl()


def pdeathsig_preexec(sig: int = signal.SIGTERM) -> Callable[[], None]:
    """A ``preexec_fn`` making the child receive ``sig`` when the spawning thread of this process exits.

    ``prctl`` is resolved here, in the parent, so the child only calls a function pointer between fork
    and exec. If the parent already died before ``prctl`` took effect, the child signals itself.
    """
    parent = os.getpid()
    prctl = _PRCTL

    def preexec() -> None:
        if prctl is not None:
            prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
        if os.getppid() != parent:
            os.kill(os.getpid(), sig)

    return preexec


def signal_group(pgid: int, sig: int) -> None:
    """``killpg`` that ignores an already-empty group."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, sig)
