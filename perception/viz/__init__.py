"""See what the runtime saw: Foxglove recordings, a live Foxglove view, PNG renders and the replay report.

* :class:`VizRecorder` writes a replay frame by frame into :class:`McapOutput` (``DIR/fused.mcap``)
  and/or a :class:`LiveServer` (Foxglove WebSocket): the drive's messages copied through untouched,
  plus ``/perception/detections`` (SceneUpdate), ``/perception/frame_stats`` (JSON) and
  ``/sensors/<camera>/detections`` (ImageAnnotations). :func:`recorder_sink` plugs it into
  :func:`perception.replay.replay_drive` on a background thread (:class:`BackgroundRecorder`), so the
  recording never delays the runtime.
* :func:`load_frame_views` reads frames back from a replay's output directory; :func:`render_frame` draws a
  bird's-eye view and every camera with the fused boxes (``perception render``).
* :func:`write_replay_report` writes ``DIR/report.md``: latency tables, quality, rendered frames.
"""

from __future__ import annotations

from perception.viz._copy import DriveCopy
from perception.viz._encode import (
    DETECTIONS_TOPIC,
    FRAME_STATS_TOPIC,
    ChannelDef,
    LabelledBoxes,
    SchemaDef,
    camera_detections,
    camera_detections_topic,
    decode_camera_detections,
    decode_detections,
    encode_camera_detections,
    encode_detections,
    frame_stats,
)
from perception.viz._live import LiveOutput, LiveServer
from perception.viz._load import FUSED_MCAP, FrameView, frame_ids, load_frame_views
from perception.viz._outputs import McapOutput, Output
from perception.viz._palette import COMBINATIONS, GROUND_TRUTH_COLOR, combination, combination_color, source_kinds
from perception.viz._record import REPLAY_METADATA, BackgroundRecorder, VizRecorder, recorder_sink
from perception.viz._render import RenderedView, render_bev, render_camera, render_frame
from perception.viz._report import write_replay_report

__all__ = [
    "COMBINATIONS",
    "DETECTIONS_TOPIC",
    "FRAME_STATS_TOPIC",
    "FUSED_MCAP",
    "GROUND_TRUTH_COLOR",
    "REPLAY_METADATA",
    "BackgroundRecorder",
    "ChannelDef",
    "DriveCopy",
    "FrameView",
    "LabelledBoxes",
    "LiveOutput",
    "LiveServer",
    "McapOutput",
    "Output",
    "RenderedView",
    "SchemaDef",
    "VizRecorder",
    "camera_detections",
    "camera_detections_topic",
    "combination",
    "combination_color",
    "decode_camera_detections",
    "decode_detections",
    "encode_camera_detections",
    "encode_detections",
    "frame_ids",
    "frame_stats",
    "load_frame_views",
    "recorder_sink",
    "render_bev",
    "render_camera",
    "render_frame",
    "source_kinds",
    "write_replay_report",
]
