"""KindSleeperModel of :mod:`perception.modelkit._testing`, loaded from its file rather than through the
``perception.modelkit`` package, whose import (scipy, the reference detectors) cost each backend stub
~0.6 s: the suite starts many servers with these models (as reliability_helpers' repositories load them)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import perception  # light: the version and lazy aliases

_spec = importlib.util.spec_from_file_location(
    "perception_test_sleepers", Path(perception.__file__).resolve().parent / "modelkit" / "_testing.py"
)
assert _spec is not None and _spec.loader is not None
_module = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_module)
TritonPythonModel = _module.KindSleeperModel
