"""Helpers shared by the server tests (imported by name: tests/server is on sys.path)."""

from __future__ import annotations

from pathlib import Path

from perception.server._procs import iter_processes

TEST_MODELS = Path(__file__).resolve().parents[1] / "triton_models"


def stubs_with_prefix(prefix: str) -> list[int]:
    """Pids of python backend stubs whose shared-memory region name (an argument) has ``prefix``."""
    return [
        p.pid
        for p in iter_processes(argv=True)
        if p.argv and p.argv[0].endswith("triton_python_backend_stub") and any(a.startswith(prefix) for a in p.argv)
    ]


def shm_entries(prefix: str) -> list[str]:
    return sorted(p.name for p in Path("/dev/shm").iterdir() if p.name.startswith(prefix))
