"""The ``perception`` command line."""

from __future__ import annotations

from perception.cli._main import main

__all__ = ["main"]
