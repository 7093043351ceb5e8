"""Importers: real recordings -> drives (``replay_data/README.md``), one module per source format.

* :func:`import_ros2` — a ROS 2 bag (rosbag2 directory or ``.mcap`` file) with a ``topics.yaml``
  (:class:`TopicMap`) mapping its PointCloud2 / Image / CompressedImage topics onto sensors;
  extrinsics and ego motion from ``/tf_static`` and ``/tf``, intrinsics from CameraInfo.
* :func:`import_nuscenes` — one scene of a nuScenes-format dataset (v1.0 JSON tables), keyframes and
  sweeps, with the annotations as ground truth.
* :func:`import_kitti` — a KITTI-format tree: the object layout (unrelated frames), a tracking
  sequence (with OXTS ego poses), or View-of-Delft's per-sensor trees (lidar, camera, radar); the
  ``label_2``/``label_02`` boxes as ground truth, classes mapped by :data:`KITTI_LABELS`.

All write through :class:`perception.drives.DriveWriter` into a file that only appears when the
import succeeded, and return an :class:`ImportSummary` (messages per topic, what was skipped and why).
The format parsers are public too: :func:`decode_point_cloud2` (vectorised ``sensor_msgs/PointCloud2``)
and :func:`parse_pcd` (PCD v0.7).
"""

from __future__ import annotations

from perception.importers._kitti import KITTI_LABELS, import_kitti, kitti_label, parse_frames
from perception.importers._nuscenes import (
    BIKE_RACK,
    NUSCENES_ATTRIBUTES,
    NUSCENES_LABELS,
    import_nuscenes,
    nuscenes_label,
)
from perception.importers._output import ImportSummary
from perception.importers._pcd import PcdHeader, parse_pcd
from perception.importers._pointcloud2 import decode_point_cloud2
from perception.importers._ros2 import image_to_rgb, import_ros2
from perception.importers._topic_map import TOPIC_MAP_HELP, Ros2Sensor, TopicMap, load_topic_map

__all__ = [
    "BIKE_RACK",
    "KITTI_LABELS",
    "NUSCENES_ATTRIBUTES",
    "NUSCENES_LABELS",
    "TOPIC_MAP_HELP",
    "ImportSummary",
    "PcdHeader",
    "Ros2Sensor",
    "TopicMap",
    "decode_point_cloud2",
    "image_to_rgb",
    "import_kitti",
    "import_nuscenes",
    "import_ros2",
    "kitti_label",
    "load_topic_map",
    "nuscenes_label",
    "parse_frames",
    "parse_pcd",
]
