"""The fleet fault tests build their drives, sleeper-model repositories and launch profiles with the
reliability tests' helpers (one definition of the small three-sensor drive and of the sleeper models)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "reliability"))
