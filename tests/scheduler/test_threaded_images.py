"""A camera sample whose data is not encoded image bytes, in a frame handed in whole (ThreadedRuntime over a fake
inference client, no Triton): the camera's input error, the frame's other sensors answered."""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import pytest
from fake_answers import EmptyAnswers

from perception._imageio import encode_jpeg
from perception.config import RuntimeConfig, from_data
from perception.errors import InputError
from perception.kinds import kind_def
from perception.scheduler import Runtime, ThreadedRuntime, _thread
from perception.scheduler._tensors import prepare_sample
from perception.types import Frame, FrameResult, FrameStatus, ImageSample, PointCloudSample

MS = 1_000_000
WATCHDOG_S = 30.0
JPEG = encode_jpeg(np.full((36, 64, 3), 200, np.uint8))


@pytest.mark.parametrize("decode", ["client", "server"])
@pytest.mark.parametrize(
    ("data", "said"),
    [
        (np.zeros((36, 64, 3), np.uint8), "image data must be bytes, got ndarray (an array: pass the encoded"),
        (np.frombuffer(JPEG, np.uint8), "image data must be bytes, got ndarray"),  # cv2.imencode's buffer
        ("a path.jpg", "image data must be bytes, got str"),
    ],
)
def test_image_data_that_is_not_bytes_is_an_input_error_naming_the_camera(data: Any, said: str, decode: str) -> None:
    # Before: numpy's ValueError (the truth value of an array), or none at all for a str passed to the decoder.
    with pytest.raises(InputError, match=r"image data must be bytes") as err:
        prepare_sample(kind_def("camera"), ImageSample("cam", 1, "cam", data), None, decode)
    assert said in str(err.value) and err.value.sensor == "cam"


@pytest.mark.parametrize("view", [memoryview, bytearray])
def test_image_bytes_in_a_buffer_are_decoded(view: type) -> None:
    # Before: a memoryview's decode raised AttributeError (no startswith).
    tensors, _ = prepare_sample(kind_def("camera"), ImageSample("cam", 1, "cam", view(JPEG)), None, "client")
    assert tensors["IMAGE"].shape == (36, 64, 3)


def test_a_frame_holding_pixels_for_an_image_answers_its_other_sensors(monkeypatch: pytest.MonkeyPatch) -> None:
    # Before: the frame's processing raised numpy's ValueError: the frame was dropped ('internal error:
    # ExceptionGroup ...'), the lidar's answer lost with it, and no sensor named.
    monkeypatch.setattr(_thread, "Runtime", functools.partial(Runtime, client=EmptyAnswers(), check_models=False))
    cfg = from_data(
        RuntimeConfig,
        {
            "server": {"url": "localhost:1"},
            "sensors": [
                {"name": "lidar", "kind": "lidar", "model": "lid", "transport": "grpc"},
                {"name": "cam", "kind": "camera", "model": "cam", "transport": "grpc"},
            ],
            "trigger": {"rate_hz": 10},
            "fusion": {"enabled": False},
            "budget": {"total_ms": 3000, "fusion_reserve_ms": 10},
        },
    )
    cloud = PointCloudSample("lidar", 0, "lidar", np.zeros((10, 4), np.float32), ("x", "y", "z", "intensity"))
    pixels = ImageSample("cam", 0, "cam", np.zeros((36, 64, 3), np.uint8))  # type: ignore[arg-type]
    with ThreadedRuntime(cfg, fusion=None) as rt:
        result: FrameResult = rt.submit(Frame(0, 0, {"lidar": cloud, "cam": pixels})).result(WATCHDOG_S)
    assert result.status is FrameStatus.DEGRADED, result.reason
    assert result.sensors["lidar"].status == "ok"
    cam = result.sensors["cam"]
    assert cam.status == "error" and "image data must be bytes, got ndarray" in (cam.error or "")
