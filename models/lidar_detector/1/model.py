"""Triton python-backend entry of the reference lidar detector (logic: perception.modelkit)."""

from __future__ import annotations

from perception.modelkit import LidarDetectorModel


class TritonPythonModel(LidarDetectorModel):
    """See :class:`perception.modelkit.LidarDetectorModel` and ``models/README.md``."""
