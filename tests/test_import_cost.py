"""Importing the package, the scheduler or the live API does not import fusion's heavy dependencies
(numba, scipy): a vehicle process starting up pays for fusion when it first needs it. Each import runs
in a fresh interpreter (this one has imported everything already). Import time: bench/bench_import.py."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = ("numba", "scipy", "perception.fusion")


@pytest.mark.parametrize("module", ["perception", "perception.scheduler", "perception.live"])
def test_import_pulls_no_numba_or_scipy(module: str) -> None:
    code = f"import sys, json, {module}; print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert json.loads(out.stdout) == [], f"import {module} loaded {out.stdout.strip()}"


def test_fusion_is_loaded_when_a_sweep_window_needs_it() -> None:
    # Lazily, not never: a SweepAccumulator with a window (the rig's extrinsic known) loads it.
    code = (
        "import sys\n"
        "from perception.config import SensorConfig\n"
        "from perception.scheduler import SweepAccumulator\n"
        "from perception.types import Transform\n"
        "s = SensorConfig(name='lidar', kind='lidar', model='m', accumulate_ms=100)\n"
        "SweepAccumulator([s], {'lidar': Transform()})\n"
        "print('perception.fusion' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert out.stdout.strip() == "True"
