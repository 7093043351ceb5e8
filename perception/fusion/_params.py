"""Sensor-model constants of fusion and tracking (not user knobs: those are in ``FusionConfig``)."""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["CLASS_SIZES", "FusionParams"]

#: Typical ``(length, width, height)`` per label id (car, truck, pedestrian, cyclist), used where a
#: sensor measures no size (camera-only, radar-only objects).
CLASS_SIZES: tuple[tuple[float, float, float], ...] = (
    (4.5, 1.85, 1.55),
    (8.5, 2.5, 3.2),
    (0.6, 0.6, 1.75),
    (1.8, 0.6, 1.7),
)


@dataclass(frozen=True, slots=True)
class FusionParams:
    """Tunables of :class:`~perception.fusion.Fuser` and its tracker, with documented defaults.

    Scores: a sensor's score is read as the probability that its detection is a real object. Evidence
    is combined noisy-OR style, ``1 - prod(1 - w_i * s_i)``, with per-sensor weights; objects without
    lidar are scaled down (``camera_only_factor``, ``radar_only_factor``); a lidar object that a camera
    should clearly see (in view, unoccluded, near, tall enough) but that no detection of that camera
    matches is scaled by ``camera_miss_factor`` (negative evidence, only from cameras that answered).
    """

    # -- lidar ----------------------------------------------------------------------------------
    lidar_min_score: float = 0.05
    lidar_sigma: float = 0.25  # m, 1-sigma BEV position error of a lidar box centre
    lidar_class_weight: float = 0.5  # weight of the lidar's (size-based) class vote vs. a camera's 1.0
    # -- camera ---------------------------------------------------------------------------------
    camera_min_score: float = 0.1  # camera detections below this are ignored
    camera_weight: float = 0.8  # evidence weight of a matched camera detection
    camera_class_min_score: float = 0.3  # class vote (s - min) / (1 - min): no class from unsure detections
    camera_iou: float = 0.3  # min IoU between a projected lidar box and a camera box to match
    occlusion_coverage: float = 0.7  # projected box covered this much by nearer boxes -> occluded
    min_visible_fraction: float = 0.3  # less of the 2D box inside the image -> not matchable
    camera_miss_factor: float = 0.75
    camera_miss_min_recall: float = 0.5  # ...applied only when the camera matched this share of what it
    # should clearly see in the frame (at least 3 such objects): a failing camera gives no negative evidence
    camera_miss_max_depth: float = 40.0  # m; farther objects are not expected to be detected
    camera_miss_min_height: float = 24.0  # px; smaller projected boxes are not expected to be detected
    camera_only_min_score: float = 0.3  # camera-only objects, when a lidar answered in the frame
    #: ... and when none did (lidar failed, late or absent): the cameras are then all there is, not a
    #: second opinion on what the lidar did not see. 0.2 by bench/bench_real.py (re-fusing one replay):
    #: nuScenes camera_only mAP 0.078 -> 0.094, no_lidar 0.086 -> 0.091; simulated no_lidar 0.304 -> 0.346,
    #: camera_only 0.161 -> 0.159; 0.1 was worse on the simulated drive (0.131 / 0.242).
    camera_alone_min_score: float = 0.2
    camera_only_factor: float = 0.6
    camera_only_min_height: float = 8.0  # px
    camera_absorb_iou: float = 0.2  # unmatched camera box overlapping a projected lidar box: same object
    camera_absorb_gate: float = 5.99  # chi-square 2 dof, 95 %: candidate within it of a lidar object: same
    camera_match_pad: float = 2.0  # px added around both boxes before the matching IoU (small objects)
    camera_pixel_sigma: float = 3.0  # px, box-edge noise (ground-plane depth, lateral position)
    camera_height_sigma: float = 0.15  # relative 1-sigma of a class's true height (height-prior depth)
    camera_max_depth: float = 80.0  # m
    # camera-guided lidar objects (FusionConfig.camera_guided): 1-sigma BEV position error along the line
    # of sight (the heading of the size prior is unknown, so where its centre lies behind the face) and
    # across it
    guided_range_sigma: float = 0.8  # m
    guided_lateral_sigma: float = 0.3  # m
    # -- radar ----------------------------------------------------------------------------------
    radar_min_score: float = 0.05
    radar_weight: float = 0.5
    radar_vru_weight: float = 0.15  # for objects currently classed pedestrian or cyclist
    radar_range_sigma: float = 0.6  # m, along the line of sight (includes spread over the object)
    radar_azimuth_sigma: float = math.radians(2.0)  # rad, scaled by range across the line of sight
    radar_lateral_floor: float = 0.5  # m, added in quadrature across the line of sight
    radar_gate: float = 9.21  # chi-square 2 dof, 99 %
    radar_surface_factor: float = 0.75  # radar centroid sits this share of the half-extent before centre
    # m/s per class, full 2D and radial radar velocity: limbs and pedals of pedestrians and cyclists
    # spread their Doppler (micro-Doppler), so their radar speed is much less certain than a vehicle's
    radar_velocity_sigma: tuple[float, float, float, float] = (0.35, 0.35, 1.2, 0.9)
    radar_radial_sigma: tuple[float, float, float, float] = (0.25, 0.25, 1.0, 0.7)
    radar_only_factor: float = 0.5
    radar_only_min_score: float = 0.2
    radar_car_rcs: float = 5.0  # dBsm; radar-only objects at least this strong are cars, else pedestrians
    radar_truck_rcs: float = 22.0  # dBsm
    min_heading_cos: float = 0.3  # radial -> full velocity along the heading only if |cos| above this
    max_speed: float = 60.0  # m/s, clamp of derived velocities
    class_max_speed: tuple[float, float, float, float] = (60.0, 45.0, 3.5, 15.0)  # m/s; faster radar: ignored
    # -- output ---------------------------------------------------------------------------------
    nms_radius: tuple[float, float, float, float] = (1.0, 1.5, 0.4, 0.7)  # m, same-object centre distance
    flip_speed: float = 1.0  # m/s; above it a box's yaw is turned to face its velocity
    # -- tracker --------------------------------------------------------------------------------
    track_gate: float = 13.8  # chi-square 2 dof, 99.9 %
    track_max_distance: float = 6.0  # m, hard cap on association distance
    track_label_penalty: float = 3.0  # added cost when labels differ
    #: m/s^2 per class; the car's by bench/bench_real.py (issue 32: the scene, its halves, KITTI, the
    #: simulated drive), 1.0 against 3.0 / 1.5 / 0.5
    track_accel_sigma: tuple[float, float, float, float] = (1.0, 2.0, 1.5, 2.0)
    track_init_speed_sigma: tuple[float, float, float, float] = (12.0, 10.0, 2.5, 6.0)  # m/s per class
    track_score_alpha: float = 0.5  # EMA weight of a new detection score
    track_size_alpha: float = 0.3
    track_yaw_alpha: float = 0.5
    track_vote_decay: float = 0.8
    track_coast_decay: float = 0.8  # score factor per missed frame
    #: Two motion models per track (:mod:`._track_kernels`): a standing-still one, whose position moves by
    #: a random walk of this many m per sqrt(s) (what a parked car's box fit wanders by, as the view
    #: changes; 0.2 by bench/bench_real.py, issue 32: 0.05 lost to it on the scene beyond noise)...
    track_still_sigma: float = 0.2
    #: ...judged against the constant-velocity one by their squared prediction errors, discounted with
    #: this time constant (s; 2 by bench_real.py: 1 lost to it on the scene's mAP beyond noise)...
    track_model_memory_s: float = 2.0
    #: ...the track standing still while the standing-still model's sum is within this of the other's
    #: (chi-square, 2 dof, 95 %), per class; -inf: never
    track_still_margin: tuple[float, float, float, float] = (6.0, 6.0, 6.0, 6.0)
    tentative_factor: float = 0.6  # score factor of tracks not yet confirmed
    emit_tentative: bool = True
    track_max_gap_s: float = 2.0  # a longer gap between frames drops every track
