"""See what the runtime saw: Foxglove recordings, a live Foxglove view, PNG renders and the replay report.

* ``_record.VizRecorder`` writes a replay frame by frame into ``_outputs.McapOutput`` (``DIR/fused.mcap``)
  and/or a :class:`LiveServer` (Foxglove WebSocket): the drive's messages copied through untouched,
  plus ``/perception/detections`` (SceneUpdate), ``/perception/frame_stats`` (JSON) and
  ``/sensors/<camera>/detections`` (ImageAnnotations). :func:`recorder_sink` plugs it into
  :func:`perception.replay.replay_drive` on a background thread (``_record.BackgroundRecorder``), so the
  recording never delays the runtime.
* :func:`load_frame_views` reads frames back from a replay's output directory; :func:`render_frame` draws a
  bird's-eye view and every camera with the fused boxes (``perception render``).
* :func:`write_replay_report` writes ``DIR/report.md``: latency tables, quality, rendered frames.
"""

from __future__ import annotations

from perception.viz._live import LiveServer
from perception.viz._load import load_frame_views
from perception.viz._palette import LABEL_COLORS
from perception.viz._record import recorder_sink
from perception.viz._render import render_frame
from perception.viz._report import write_replay_report

__all__ = [
    "LABEL_COLORS",
    "LiveServer",
    "load_frame_views",
    "recorder_sink",
    "render_frame",
    "write_replay_report",
]
