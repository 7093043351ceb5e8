"""Sensor kinds: each kind is one module declaring everything about it, and kinds register here.

A :class:`SensorKindDef` states a kind's sample type (and so its drive codec), its tensor contract
(:class:`KindContract` of :class:`TensorSpec`, the single source of the client-side check, the model side,
the server's model table and the docs), how a sample becomes request tensors and its warm-up sample, its
role in fusion (:class:`FusionRole`), its default model and its colour. The built-in kinds are
``camera``, ``lidar`` and ``radar``; another one is added with :func:`register_kind`::

    from perception.kinds import SensorKindDef, register_kind
    register_kind(SensorKindDef(name="thermal", sample=ImageSample, contract=..., prepare=..., warmup=...,
                                fusion=FusionRole.IMAGE_BOXES, default_model="thermal_detector"))

Bottom layer: imports only :mod:`perception.types`, :mod:`perception.errors` (and the image codec).
"""

from __future__ import annotations

from ._camera import CAMERA, CAMERA_INPUT_SIZE_KEYS, camera_input, camera_input_size, encoded_input
from ._intake import MAX_SAMPLE_BYTES, MAX_STAMP_NS, ego_problem, sample_check, sample_problem, stamp_problem
from ._kind import FusionRole, SensorKindDef, accumulate_problem
from ._lidar import LIDAR
from ._points import in_kind_order, point_columns
from ._radar import RADAR
from ._registry import fusion_role, kind_def, known_kinds, register_kind, unregister_kind
from ._tensors import KindContract, TensorSpec

__all__ = [
    "CAMERA",
    "CAMERA_INPUT_SIZE_KEYS",
    "LIDAR",
    "MAX_SAMPLE_BYTES",
    "MAX_STAMP_NS",
    "RADAR",
    "FusionRole",
    "KindContract",
    "SensorKindDef",
    "TensorSpec",
    "accumulate_problem",
    "camera_input",
    "camera_input_size",
    "ego_problem",
    "encoded_input",
    "fusion_role",
    "in_kind_order",
    "kind_def",
    "known_kinds",
    "point_columns",
    "register_kind",
    "sample_check",
    "sample_problem",
    "stamp_problem",
    "unregister_kind",
]

for _defn in (LIDAR, RADAR, CAMERA):
    register_kind(_defn)
