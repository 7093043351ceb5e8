"""The recording tests build sleeper-model repositories with the reliability tests' helper (one definition
of the sleeper models)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "reliability"))
