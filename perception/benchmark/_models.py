"""Where ``perception bench``'s own Triton models live: ``models/`` of this package (package data)."""

from __future__ import annotations

from pathlib import Path

__all__ = ["bench_model_repository"]


def bench_model_repository() -> Path:
    """The model repository of ``perception bench``'s own models (the ``sink``): ``models/`` of this
    package, shipped as package data (``pyproject.toml``), so an installed package needs no source
    checkout. The test suite serves the same directories (``tests/triton_models/sink`` links here)."""
    return Path(__file__).resolve().parent / "models"
