"""What the numbers were measured on: machine, load, versions, date."""

from __future__ import annotations

import importlib.metadata
import os
import platform
import sys
import time
from typing import Any

__all__ = ["environment", "load_average"]

_PACKAGES = ("perception-fusion", "tritonclient", "grpcio", "numpy", "anyio", "nvidia-pytriton")


def load_average() -> float:
    """The 1-minute load average (other processes competing for the CPUs)."""
    return round(os.getloadavg()[0], 2)


def environment() -> dict[str, Any]:
    """Machine and software description for a results file."""
    versions: dict[str, str | None] = {}
    for name in _PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return {
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "cpus": os.cpu_count(),
        "cpus_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "processor": platform.processor() or platform.machine(),
        "platform": platform.platform(),
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "python": sys.version.split()[0],
        "versions": versions,
    }
