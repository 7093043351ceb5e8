"""Deterministic synthetic drives with exact ground truth.

An ego vehicle drives a road (straights and gentle curves, lanes, sidewalks) through traffic (cars,
trucks, pedestrians, cyclists); a configurable rig of lidars, radars and cameras samples the world
on its own unaligned clocks. Everything is a pure function of the scenario, the seed and the rig, so
identical arguments give byte-identical drives on the same machine; across CPU models, whose
transcendentals may differ by an ulp, the written ground truth and ego poses are rounded to a fixed
grid (1 µm, 1e-8 rad: :mod:`perception.sim._precision`) and drives agree within it.

* :func:`generate_drive` writes a drive (MCAP, see :mod:`perception.drives`); the CLI is
  ``perception sim``.
* :class:`Simulator` gives random access to scenes, samples, ego poses and ground truth; its
  :meth:`Simulator.render` returns an image with per-pixel object ids (``_camera.CameraFrame``).
* :func:`project_ground_truth` turns ground truth into 2D camera boxes (training labels).
* Each sensor kind has a simulator model (:class:`SimKind`: its rig parameters and a model that
  captures a sample from a scene); the built-in kinds' are registered here, another kind's with
  :func:`register_sim_kind` (after :func:`perception.kinds.register_kind`).
* Sensor weaknesses are deliberate: the lidar is sparse at range and has no velocity; the radar has
  velocity but poor lateral accuracy and clutter; the camera has the class but no depth.
"""

from __future__ import annotations

from perception.sim import _builtin_kinds  # noqa: F401 - registers the built-in kinds' models
from perception.sim._camera import project_ground_truth
from perception.sim._generate import MAX_DURATION_S, Simulator, generate_drive
from perception.sim._kinds import SimKind, SimSensorModel, register_sim_kind
from perception.sim._rig import SimRadarParams, SimSensor, load_rig
from perception.sim._scenarios import SCENARIOS
from perception.sim._seeds import EVAL_SEED, FIRST_TRAINING_SEED, is_evaluation_seed

__all__ = [
    "EVAL_SEED",
    "FIRST_TRAINING_SEED",
    "MAX_DURATION_S",
    "SCENARIOS",
    "SimKind",
    "SimRadarParams",
    "SimSensor",
    "SimSensorModel",
    "Simulator",
    "generate_drive",
    "is_evaluation_seed",
    "load_rig",
    "project_ground_truth",
    "register_sim_kind",
]
