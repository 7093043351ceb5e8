"""Helpers shared by the server tests (imported by name: tests/server is on sys.path)."""

from __future__ import annotations

from pathlib import Path

TEST_MODELS = Path(__file__).resolve().parents[1] / "triton_models"


def stubs_with_prefix(prefix: str) -> list[int]:
    """Pids of python backend stubs whose shared-memory region name (an argument) has ``prefix``."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if (
            argv
            and argv[0].endswith(b"triton_python_backend_stub")
            and any(a.startswith(prefix.encode()) for a in argv)
        ):
            pids.append(int(entry.name))
    return pids


def shm_entries(prefix: str) -> list[str]:
    return sorted(p.name for p in Path("/dev/shm").iterdir() if p.name.startswith(prefix))
