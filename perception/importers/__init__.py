"""Importers: real recordings -> drives (``replay_data/README.md``), one module per source format.

* :func:`import_ros2` — a ROS 2 bag (rosbag2 directory or ``.mcap`` file) with a ``topics.yaml``
  (``_topic_map.TopicMap``) mapping its PointCloud2 / Image / CompressedImage topics onto sensors;
  extrinsics and ego motion from ``/tf_static`` and ``/tf``, intrinsics from CameraInfo.
* :func:`import_nuscenes` — one scene of a nuScenes-format dataset (v1.0 JSON tables), keyframes and
  sweeps, with the annotations as ground truth.
* :func:`import_kitti` — a KITTI-format tree: the object layout (unrelated frames), a tracking
  sequence (with OXTS ego poses), or View-of-Delft's per-sensor trees (lidar, camera, radar); the
  ``label_2``/``label_02`` boxes as ground truth, classes mapped by ``_kitti.KITTI_LABELS``.

All write through :class:`perception.drives.DriveWriter` into a file that only appears when the
import succeeded, and return an :class:`ImportSummary` (messages per topic, what was skipped and why).
The format parsers live in their modules: ``_pointcloud2.decode_point_cloud2`` (vectorised
``sensor_msgs/PointCloud2``) and ``_pcd.parse_pcd`` (PCD v0.7).
"""

from __future__ import annotations

from perception.importers._kitti import OBJECT_FRAME_GAP_NS, import_kitti, parse_frames
from perception.importers._nuscenes import BIKE_RACK, import_nuscenes
from perception.importers._output import ImportSummary
from perception.importers._pointcloud2 import decode_point_cloud2, point_fields
from perception.importers._ros2 import import_ros2
from perception.importers._topic_map import TOPIC_MAP_HELP

__all__ = [
    "BIKE_RACK",
    "OBJECT_FRAME_GAP_NS",
    "TOPIC_MAP_HELP",
    "ImportSummary",
    "decode_point_cloud2",
    "import_kitti",
    "import_nuscenes",
    "import_ros2",
    "parse_frames",
    "point_fields",
]
