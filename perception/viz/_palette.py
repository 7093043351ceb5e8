"""Colours shared by the Foxglove output and the PNG renderer, so a box looks the same in both.

Fused boxes are coloured by the *combination of sensor kinds* that contributed to them this frame
(lidar+camera+radar, lidar+camera, ...); a track that is only predicted (no sensor this frame) is grey.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from perception.kinds import kind_def, known_kinds
from perception.types import SensorKind

__all__ = [
    "CAMERA_DETECTION_COLOR",
    "COMBINATIONS",
    "GROUND_TRUTH_COLOR",
    "LABEL_COLORS",
    "LIDAR_COLOR",
    "RADAR_COLOR",
    "RGB",
    "combination",
    "combination_color",
    "source_kinds",
]

RGB = tuple[float, float, float]

_L, _C, _R = SensorKind.LIDAR, SensorKind.CAMERA, SensorKind.RADAR

#: Source combination name -> colour, in legend order. Names are kinds joined by ``+`` (``"predicted"``
#: for a track without a detection this frame).
COMBINATIONS: Mapping[str, RGB] = {
    "lidar+camera+radar": (0.10, 0.85, 0.25),
    "lidar+camera": (0.00, 0.75, 0.95),
    "lidar+radar": (0.25, 0.40, 1.00),
    "camera+radar": (0.90, 0.30, 0.95),
    # a kind alone: the kind's own colour (perception.kinds)
    "lidar": kind_def(_L).color,
    "camera": kind_def(_C).color,
    "radar": kind_def(_R).color,
    "predicted": (0.60, 0.60, 0.60),
}

GROUND_TRUTH_COLOR: RGB = (1.0, 1.0, 1.0)
CAMERA_DETECTION_COLOR: RGB = (1.0, 1.0, 1.0)
LIDAR_COLOR: RGB = (0.55, 0.55, 0.55)
RADAR_COLOR: RGB = (1.0, 0.35, 0.65)

#: Label colours of the camera's own 2D detections in Foxglove (the PNGs draw them white, dashed).
LABEL_COLORS: Mapping[str, RGB] = {
    "car": (0.2, 0.5, 1.0),
    "truck": (1.0, 0.6, 0.1),
    "pedestrian": (1.0, 0.2, 0.2),
    "cyclist": (0.2, 0.9, 0.3),
}

_ORDER = (_L, _C, _R)


def source_kinds(sources: Iterable[str], kinds: Mapping[str, str]) -> frozenset[str]:
    """Kinds of the named sensors (names not in ``kinds`` are ignored)."""
    return frozenset(kinds[s] for s in sources if s in kinds)


def combination(kinds: Iterable[str]) -> str:
    """Name of a combination of sensor kinds, e.g. ``"lidar+radar"`` (``"predicted"`` when empty): the
    built-in kinds in legend order, then other registered kinds in registration order."""
    present = {str(k) for k in kinds}
    order = [*_ORDER, *(k for k in known_kinds() if k not in _ORDER), *sorted(present - set(known_kinds()))]
    return "+".join(k for k in order if k in present) or "predicted"


def combination_color(kinds: Iterable[str]) -> RGB:
    """Colour of a fused box whose detection came from sensors of these kinds: :data:`COMBINATIONS`'
    for the built-in kinds; with another kind, that of its built-in companions, or alone the kind's own."""
    name = combination(kinds)
    rgb = COMBINATIONS.get(name)
    if rgb is not None:
        return rgb
    present = name.split("+")
    built_in = combination(k for k in present if k in _ORDER)
    if built_in != "predicted":
        return COMBINATIONS[built_in]
    return kind_def(present[0]).color if present[0] in known_kinds() else COMBINATIONS["predicted"]
