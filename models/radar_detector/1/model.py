"""Triton python-backend entry of the reference radar detector (logic: perception.modelkit)."""

from __future__ import annotations

from perception.modelkit import RadarDetectorModel


class TritonPythonModel(RadarDetectorModel):
    """See :class:`perception.modelkit.RadarDetectorModel` and ``models/README.md``."""
