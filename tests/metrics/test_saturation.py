"""A late request is blamed on its cause: the servers' queue (saturation) or the model's compute."""

from __future__ import annotations

from typing import Any

from perception.metrics import ModelServed, late_causes, late_lines
from perception.metrics._run_report import RunCounters

_Run = tuple[RunCounters, dict[str, ModelServed], dict[str, dict[str, Any]]]


def _report(queue_ms: float, total_ms: float, late: int = 3) -> _Run:
    return (
        RunCounters(sensor_status={"lidar_top": {"ok": 97, "late": late}, "cam_front": {"ok": 100}}),
        {"lidar_top": ModelServed("lidar_detector"), "cam_front": ModelServed("camera_detector")},
        {
            "lidar_detector": {"requests": 100.0, "queue_ms": queue_ms, "total_ms": total_ms},
            "camera_detector": {"requests": 100.0, "queue_ms": 90.0, "total_ms": 100.0},
        },
    )


def test_a_queue_that_took_most_of_the_time_is_saturation() -> None:
    causes = late_causes(*_report(queue_ms=102.0, total_ms=152.0))
    assert causes == {
        "lidar_detector": {"late": 3, "server_ms": 152.0, "queue_ms": 102.0, "cause": "saturated"}
    }  # the camera queued too, but none of its requests was late: not named
    assert late_lines(causes) == [
        "host saturated: lidar_detector queued 102.0 ms of 152.0 ms per request (3 late); "
        "lower --workers/--in-flight or use --rate lockstep"
    ]


def test_a_slow_model_is_its_compute() -> None:
    (line,) = late_lines(late_causes(*_report(queue_ms=0.5, total_ms=77.6)))
    assert line.startswith("late: lidar_detector 3 late; Triton's time 77.6 ms per request, of which 0.5 ms queued")


def test_nothing_late_or_no_answer_says_nothing() -> None:
    assert late_causes(*_report(queue_ms=102.0, total_ms=152.0, late=0)) == {}
    counters, models, _ = _report(queue_ms=0.0, total_ms=0.0)
    hung = {"lidar_detector": {"requests": 0.0, "queue_ms": 0.0, "total_ms": 0.0}}
    assert late_causes(counters, models, hung) == {}  # a model that never answered is a fault, reported as one
