"""Fused detections as a ``visualization_msgs/MarkerArray`` (RViz, Foxglove) and, where the host has
``vision_msgs``, a ``Detection3DArray``."""

from __future__ import annotations

import math
from typing import Any

from perception.types import FrameResult
from perception.viz import LABEL_COLORS

__all__ = ["detections_array", "marker_array"]

_DELETEALL = 3
_CUBE, _ARROW, _TEXT = 1, 0, 9
_ADD = 0
_OTHER = (0.8, 0.8, 0.8)


def _yaw_quaternion(msg: Any, yaw: float) -> None:
    msg.x, msg.y, msg.z, msg.w = 0.0, 0.0, math.sin(yaw / 2), math.cos(yaw / 2)


def marker_array(m: Any, result: FrameResult, header: Any, lifetime: Any) -> Any:
    """``m``: the ``visualization_msgs.msg`` module (and ``geometry_msgs.msg.Point`` as ``m.Point``).

    A DELETEALL first (the previous frame's markers go), then per detection a box coloured by class
    (ns ``boxes``), its label, score and contributing sensors as text (ns ``labels``) and its velocity as
    an arrow (ns ``velocity``, only when moving)."""
    out = m.MarkerArray()
    clear = m.Marker(header=header, action=_DELETEALL)
    out.markers.append(clear)
    for i, det in enumerate(result.detections):
        r, g, b = LABEL_COLORS.get(det.label, _OTHER)
        cx, cy, cz = (float(v) for v in det.center)
        box = m.Marker(header=header, ns="boxes", id=i, type=_CUBE, action=_ADD, lifetime=lifetime)
        box.pose.position.x, box.pose.position.y, box.pose.position.z = cx, cy, cz
        _yaw_quaternion(box.pose.orientation, float(det.yaw))
        box.scale.x, box.scale.y, box.scale.z = (max(0.05, float(v)) for v in det.size)
        box.color.r, box.color.g, box.color.b, box.color.a = r, g, b, 0.5
        out.markers.append(box)
        text = m.Marker(header=header, ns="labels", id=i, type=_TEXT, action=_ADD, lifetime=lifetime)
        text.pose.position.x, text.pose.position.y = cx, cy
        text.pose.position.z = cz + float(det.size[2]) / 2 + 0.5
        text.pose.orientation.w = 1.0
        text.scale.z = 0.8
        text.color.r = text.color.g = text.color.b = text.color.a = 1.0
        text.text = f"{det.label} {det.score:.2f} #{det.id} [{'+'.join(det.sources)}]"
        out.markers.append(text)
        vx, vy = (float(v) for v in det.velocity)
        if math.hypot(vx, vy) > 0.1:
            arrow = m.Marker(header=header, ns="velocity", id=i, type=_ARROW, action=_ADD, lifetime=lifetime)
            arrow.pose.orientation.w = 1.0
            arrow.points = [m.Point(x=cx, y=cy, z=cz), m.Point(x=cx + vx, y=cy + vy, z=cz)]
            arrow.scale.x, arrow.scale.y, arrow.scale.z = 0.2, 0.4, 0.4
            arrow.color.r, arrow.color.g, arrow.color.b, arrow.color.a = r, g, b, 1.0
            out.markers.append(arrow)
    return out


def detections_array(v: Any, result: FrameResult, header: Any) -> Any:
    """``v``: the ``vision_msgs.msg`` module. One ``Detection3D`` per fused detection (box, class, score)."""
    out = v.Detection3DArray(header=header)
    for det in result.detections:
        d = v.Detection3D(header=header, id=str(det.id))
        d.bbox.center.position.x, d.bbox.center.position.y, d.bbox.center.position.z = (float(x) for x in det.center)
        _yaw_quaternion(d.bbox.center.orientation, float(det.yaw))
        d.bbox.size.x, d.bbox.size.y, d.bbox.size.z = (float(x) for x in det.size)
        hyp = v.ObjectHypothesisWithPose()
        hyp.hypothesis.class_id = det.label
        hyp.hypothesis.score = float(det.score)
        hyp.pose.pose.position = d.bbox.center.position
        d.results.append(hyp)
        out.detections.append(d)
    return out
