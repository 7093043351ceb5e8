"""The simulator's sensor models, one per sensor kind: :class:`SimKind` and its registry.

A sensor kind (:mod:`perception.kinds`) says what a sensor's samples are; a :class:`SimKind` says how
the simulator makes them: the kind's parameter class (a frozen dataclass, the rig YAML key named after
the kind: ``lidar: {beams: 32}``) and its model, built once per sensor, which captures one sample's
payload from a :class:`~perception.sim._world.Scene`. The built-in kinds (lidar, radar, camera) are
registered by :mod:`perception.sim`; another kind registers its model with :func:`register_sim_kind`::

    register_sim_kind(SimKind("thermal", SimThermalParams, ThermalModel, image_format="png"))

A rig naming a kind without a simulator model is an error at load time, naming the sensor's ``kind``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, is_dataclass
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import numpy.typing as npt

from perception.kinds import kind_def, known_kinds

if TYPE_CHECKING:
    from perception.sim._rig import SimSensor
    from perception.sim._world import Scene

__all__ = ["SimKind", "SimSensorModel", "register_sim_kind", "sim_kind", "sim_kinds", "unregister_sim_kind"]


class SimSensorModel(Protocol):
    """One simulated sensor: ``capture`` returns a sample's payload at ``scene.t_ns``, in the sensor's
    frame: encoded image bytes for an image kind, ``[N, len(point_fields)]`` float32 rows for a point kind."""

    def capture(self, scene: Scene, rng: np.random.Generator) -> bytes | npt.NDArray[np.float32]: ...


@dataclass(frozen=True, slots=True)
class SimKind:
    """How the simulator models sensor kind ``kind``.

    * ``params``: the kind's parameter dataclass, built from the rig's key named after the kind (its
      ``__post_init__`` holds the range checks); an image kind's has ``calibration()`` (its
      :class:`~perception.types.CameraCalibration`).
    * ``model``: ``model(sensor, seed)`` builds the sensor's :class:`SimSensorModel` (``seed``: the drive's).
    * ``image_format``: the encoding an image kind's ``capture`` returns (``jpeg`` or ``png``).
    """

    kind: str
    params: type[Any]
    model: Callable[[SimSensor, int], SimSensorModel]
    image_format: str = "jpeg"

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", str(self.kind))  # a SensorKind member is stored as its plain name
        if not is_dataclass(self.params):
            raise ValueError(f"simulator kind {self.kind!r}: params must be a dataclass, got {self.params!r}")
        if self.image_format not in ("jpeg", "png"):
            raise ValueError(
                f"simulator kind {self.kind!r}: image_format must be jpeg or png, got {self.image_format!r}"
            )


_REGISTRY: dict[str, SimKind] = {}


def register_sim_kind(defn: SimKind) -> None:
    """Give sensor kind ``defn.kind`` (registered in :mod:`perception.kinds`) a simulator model; raises
    ``ValueError`` for an unknown kind, or when another definition already has it."""
    if defn.kind not in known_kinds():
        raise ValueError(
            f"simulator kind {defn.kind!r}: no such sensor kind (known: {', '.join(sorted(known_kinds()))}); "
            "register it with perception.kinds.register_kind first"
        )
    have = _REGISTRY.get(defn.kind)
    if have is not None and have != defn:  # the same definition again is a no-op, as for register_kind
        raise ValueError(f"simulator kind {defn.kind!r} is already registered with another definition")
    if kind_def(defn.kind).is_image and not callable(getattr(defn.params, "calibration", None)):
        raise ValueError(f"simulator kind {defn.kind!r}: an image kind's params need a calibration() method")
    _REGISTRY[defn.kind] = defn


def unregister_sim_kind(kind: str) -> None:
    """Remove ``kind``'s simulator model (tests that register one)."""
    _REGISTRY.pop(kind, None)


def sim_kind(kind: str) -> SimKind:
    """The simulator model of ``kind``; ``ValueError("kind: ...")`` naming the simulated kinds if none."""
    defn = _REGISTRY.get(kind)
    if defn is None:
        raise ValueError(
            f"kind: the simulator has no model for sensor kind {kind!r} (it simulates: "
            f"{', '.join(sorted(_REGISTRY))}; perception.sim.register_sim_kind adds one)"
        )
    return defn


def sim_kinds() -> frozenset[str]:
    """The kinds the simulator can simulate."""
    return frozenset(_REGISTRY)
