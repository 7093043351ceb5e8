"""Linux process and ``/dev/shm`` housekeeping for the embedded server.

:func:`iter_processes` is the one walk over ``/proc`` (the server's stop, the tests' and benches' checks
for processes left behind, and CPU time by process all read it).

Shared-memory regions created on behalf of this package (by the python backend of an embedded server,
or by the client transport) are named ``perception_<owner-pid>_...`` (:mod:`perception.triton` names
them). A region whose owner pid is no longer alive is a leftover of a crashed run and can be removed;
regions of live pids are never touched. A python backend stub whose region's owner is dead is an orphan:
a server killed while its models loaded leaves its stubs waiting for it forever (:func:`kill_orphaned_stubs`).
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import signal
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

from perception.server._locate import STUB_NAME
from perception.triton import SHM_DIR, SHM_NAME_PREFIX, shm_owner_pid

__all__ = [
    "PROC_DIR",
    "ProcessInfo",
    "cleanup_stale_shm",
    "iter_processes",
    "kill_orphaned_stubs",
    "pdeathsig_preexec",
    "pid_alive",
    "process_group_members",
    "remove_shm_prefix",
    "signal_group",
]

log = logging.getLogger(__name__)

PROC_DIR = Path("/proc")

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


def _owner_dead(pid: int, seen: dict[int, bool]) -> bool:
    """Whether ``pid``, the owner named by a region, is dead (this process never is); one sweep's answers
    are kept in ``seen``."""
    if pid not in seen:
        seen[pid] = pid != os.getpid() and not pid_alive(pid)
    return seen[pid]


def cleanup_stale_shm(shm_dir: Path = SHM_DIR) -> list[str]:
    """Remove ``perception_<pid>_*`` regions whose owner pid is dead; return the removed names."""
    try:
        entries = list(shm_dir.iterdir())
    except OSError:
        return []
    dead: dict[int, bool] = {}
    removed = []
    for path in entries:
        pid = shm_owner_pid(path.name)
        if pid is None:
            continue
        if _owner_dead(pid, dead) and _unlink(path):
            removed.append(path.name)
    if removed:
        log.info("removed %d shared-memory leftover(s) of dead processes: %s", len(removed), removed)
    return removed


def kill_orphaned_stubs(proc_dir: Path = PROC_DIR) -> list[int]:
    """SIGKILL the python backend stubs whose shared-memory region's owner is dead; return their pids.

    A stub names its region on its command line. When the server's owner is killed while the models load,
    the server goes (its parent-death signal) but stubs still starting wait for it forever (seen: six
    stubs, 78 MB each, still there minutes later). Stubs of live owners are never touched.
    """
    comm = STUB_NAME[:15]  # the kernel keeps 15 characters of a command name
    dead: dict[int, bool] = {}
    killed: list[int] = []
    # Command lines of the stubs only: reading one takes that process's memory lock (iter_processes).
    stubs = [p.pid for p in iter_processes(proc_dir=proc_dir) if p.alive and p.comm == comm]
    for stub in stubs:
        p = _read_process(proc_dir / str(stub), 1, argv=True, environ=False)
        if p is None:
            continue
        owner = next((pid for arg in p.argv if (pid := shm_owner_pid(arg)) is not None), None)
        if owner is None or not _owner_dead(owner, dead):
            continue
        with contextlib.suppress(ProcessLookupError):
            os.kill(p.pid, signal.SIGKILL)
            killed.append(p.pid)
    if killed:
        log.info("killed %d python backend stub(s) left by dead owners: %s", len(killed), killed)
    return killed


@dataclass(frozen=True)
class ProcessInfo:
    """One process as :func:`iter_processes` read it from ``/proc/<pid>``."""

    pid: int
    #: command name (``stat`` field 2; the kernel keeps 15 characters: ``triton_python_b``)
    comm: str
    #: state letter (``R``, ``S``, ``D``...; ``Z`` zombie: exited, not yet reaped; ``X`` dead)
    state: str
    #: process group id
    pgid: int
    #: user + system CPU time used so far (``stat`` fields 14 and 15), in ns at clock-tick resolution
    cpu_ns: int
    #: command line, undecodable bytes replaced; empty when not asked for, and for kernel threads and zombies
    argv: tuple[str, ...]
    #: environment; empty when not asked for, for zombies, and for a process this one may not read
    environ: Mapping[str, str] = field(repr=False, compare=False)

    @property
    def alive(self) -> bool:
        """Not a zombie nor dead."""
        return self.state not in ("Z", "X")


_NO_ENVIRON: Mapping[str, str] = MappingProxyType({})


def _nul_separated(data: bytes) -> list[str]:
    """The items of ``cmdline`` or ``environ``: NUL-terminated (a rewritten command line may lack the last)."""
    if not data:
        return []
    return [item.decode(errors="replace") for item in data.removesuffix(b"\0").split(b"\0")]


def _read_process(entry: Path, ns_per_tick: int, argv: bool, environ: bool) -> ProcessInfo | None:
    """The process of ``/proc/<pid>`` entry ``entry``; None when it is gone meanwhile (or unreadable)."""
    try:
        stat = (entry / "stat").read_text()
        cmdline = (entry / "cmdline").read_bytes() if argv else b""
    except OSError:
        return None
    env = _NO_ENVIRON
    if environ:
        try:
            data = (entry / "environ").read_bytes()
        except PermissionError:
            data = b""  # another user's process: listed, without its environment
        except OSError:
            return None
        env = MappingProxyType(dict(item.partition("=")[::2] for item in _nul_separated(data)))
    # Field 2 (comm) may contain spaces and parentheses: it ends at the last ')'.
    opening, closing = stat.find("("), stat.rfind(")")
    fields = stat[closing + 2 :].split()
    try:
        state, pgid, utime, stime = fields[0], int(fields[2]), int(fields[11]), int(fields[12])
    except (IndexError, ValueError):
        return None
    return ProcessInfo(
        pid=int(entry.name),
        comm=stat[opening + 1 : closing],
        state=state,
        pgid=pgid,
        cpu_ns=(utime + stime) * ns_per_tick,
        argv=tuple(_nul_separated(cmdline)),
        environ=env,
    )


def iter_processes(*, argv: bool = False, environ: bool = False, proc_dir: Path = PROC_DIR) -> Iterator[ProcessInfo]:
    """Every process in ``proc_dir``, zombies included, in its listing order.

    Always read: ``stat`` (command name, state, process group, CPU time). ``argv`` reads each command
    line too and ``environ`` each environment (both are off by default: reading them takes the target's
    memory lock, which a process in trouble can hold for long). A process that exits while it is read
    is skipped, so is one whose ``stat`` or command line cannot be read.
    """
    ns_per_tick = 1_000_000_000 // os.sysconf("SC_CLK_TCK")
    try:
        entries = [entry for entry in proc_dir.iterdir() if entry.name.isdigit()]
    except OSError:
        return
    for entry in entries:
        info = _read_process(entry, ns_per_tick, argv, environ)
        if info is not None:
            yield info


def process_group_members(pgid: int) -> list[int]:
    """Pids of the live (non-zombie) processes in process group ``pgid``, from ``/proc``."""
    return [p.pid for p in iter_processes() if p.pgid == pgid and p.alive]


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
