"""Camera JPEGs decoded at the model's scale (DCT draft) and the boxes scaled back to original pixels."""

from __future__ import annotations

import dataclasses

import anyio
import numpy as np
import numpy.typing as npt
import pytest

from perception._imageio import decode_image, decode_image_scaled, encode_jpeg, letterbox_size
from perception.errors import InputError, ModelContractError
from perception.scheduler import camera_input, prepare_inputs, scale_camera_boxes
from perception.triton import InferRequest, parse_model_config
from perception.types import ImageSample


def gradient(h: int, w: int) -> npt.NDArray[np.uint8]:
    y, x = np.mgrid[0:h, 0:w]
    out: npt.NDArray[np.uint8] = np.stack([x * 255 // w, y * 255 // h, (x + y) % 256], axis=-1).astype(np.uint8)
    return out


@pytest.fixture(scope="module")
def big_jpeg() -> bytes:
    return encode_jpeg(gradient(900, 1600))


def test_letterbox_size() -> None:
    assert letterbox_size(1600, 900, (416, 416)) == (416, 234)
    assert letterbox_size(1600, 900, (384, 224)) == (384, 216)
    assert letterbox_size(640, 360, (1000, 1000)) is None  # already small enough


@pytest.mark.parametrize(
    ("fit", "shape"),
    [(None, (900, 1600, 3)), ((416, 416), (450, 800, 3)), ((384, 224), (225, 400, 3)), ((100, 100), (113, 200, 3))],
)
def test_draft_decode_is_the_smallest_dct_scale_covering_the_letterbox(
    big_jpeg: bytes, fit: tuple[int, int] | None, shape: tuple[int, ...]
) -> None:
    image, size = decode_image_scaled(big_jpeg, fit=fit)
    assert image.shape == shape and image.dtype == np.uint8 and size == (1600, 900)
    if fit is not None:
        need = letterbox_size(1600, 900, fit)
        assert need is not None and image.shape[1] >= need[0] and image.shape[0] >= need[1]


def test_draft_decode_is_the_downscaled_picture(big_jpeg: bytes) -> None:
    full = decode_image(big_jpeg).astype(np.float32)
    half, _ = decode_image_scaled(big_jpeg, fit=(416, 416))
    pooled = full.reshape(450, 2, 800, 2, 3).mean(axis=(1, 3))
    assert np.abs(pooled - half).mean() < 3.0


def test_png_decodes_at_full_size() -> None:
    from io import BytesIO

    from PIL import Image

    buf = BytesIO()
    Image.fromarray(gradient(90, 160)).save(buf, format="PNG")
    image, size = decode_image_scaled(buf.getvalue(), fit=(16, 16))
    assert image.shape == (90, 160, 3) and size == (160, 90)


def test_camera_input_gives_the_factors_back(big_jpeg: bytes) -> None:
    sample = ImageSample("cam_front", 0, "cam_front", big_jpeg)
    image, scale = camera_input(sample, (416, 416))
    assert image.shape == (450, 800, 3) and scale == (2.0, 2.0)
    image, scale = camera_input(sample)
    assert image.shape == (900, 1600, 3) and scale == (1.0, 1.0)
    assert prepare_inputs("camera", sample, input_size=(384, 224))["IMAGE"].shape == (1, 225, 400, 3)


def test_camera_input_names_the_sensor() -> None:
    with pytest.raises(InputError, match="cam_x"):
        camera_input(ImageSample("cam_x", 0, "cam_x", b"not a jpeg"), (416, 416))


def test_scale_camera_boxes_keeps_padding_and_other_outputs() -> None:
    boxes = np.zeros((100, 4), np.float32)
    boxes[0] = (10, 20, 30, 40)
    outputs = {"BOXES": boxes, "SCORES": np.ones(100, np.float32), "COUNT": np.array([1], np.int32)}
    out = scale_camera_boxes(outputs, (2.0, 4.0))
    np.testing.assert_allclose(out["BOXES"][0], (20, 80, 60, 160))
    assert not out["BOXES"][1:].any() and out["SCORES"] is outputs["SCORES"] and out["COUNT"] is outputs["COUNT"]
    assert scale_camera_boxes(outputs, (1.0, 1.0))["BOXES"] is boxes


def config(**parameters: str) -> dict[str, object]:
    return {
        "name": "cam",
        "max_batch_size": 8,
        "parameters": {k: {"string_value": v} for k, v in parameters.items()},
    }


def test_model_config_states_its_input_size() -> None:
    assert parse_model_config(config(input_width="416", input_height="416")).input_size == (416, 416)
    assert parse_model_config(config(input_width="416")).input_size is None  # both or nothing
    assert parse_model_config({"name": "cam"}).input_size is None
    with pytest.raises(ModelContractError, match="input_height"):
        parse_model_config(config(input_width="416", input_height="big"))
    with pytest.raises(ModelContractError, match="input_width"):
        parse_model_config(config(input_width="0", input_height="10"))


class _RecordingCamera:
    """A camera model answering one box per image at (10, 20, 30, 40) in the pixels it received."""

    def __init__(self) -> None:
        self.shapes: list[tuple[int, ...]] = []

    async def infer_request(self, req: InferRequest) -> object:
        images = req.inputs["IMAGE"]
        self.shapes.append(tuple(images.shape))
        b = len(images)
        boxes = np.zeros((b, 100, 4), np.float32)
        boxes[:, 0] = (10, 20, 30, 40)
        outputs = {
            "BOXES": boxes,
            "SCORES": np.zeros((b, 100), np.float32),
            "LABELS": np.zeros((b, 100), np.int32),
            "COUNT": np.ones((b, 1), np.int32),
        }
        return type("Result", (), {"outputs": outputs, "prepare_ns": 0})()


@pytest.mark.anyio
async def test_dispatcher_sends_images_at_the_models_scale_and_answers_in_original_pixels(big_jpeg: bytes) -> None:
    import time

    import anyio

    from perception.config import PipelineConfig, SensorConfig
    from perception.scheduler._dispatch import Dispatcher
    from perception.types import Frame, SensorStatus

    sensors = [SensorConfig("cam_a", "camera", "cam"), SensorConfig("cam_b", "camera", "cam")]
    samples = {name: ImageSample(name, 0, name, big_jpeg) for name in ("cam_a", "cam_b")}
    for sizes, shape, a_box in (
        ({"cam": (416, 416)}, (2, 450, 800, 3), (20, 40, 60, 80)),
        ({}, (2, 900, 1600, 3), (10, 20, 30, 40)),
    ):
        client = _RecordingCamera()
        dispatcher = Dispatcher(client, sensors, PipelineConfig(), input_sizes=sizes)  # type: ignore[arg-type]
        with anyio.fail_after(30):
            results = await dispatcher.dispatch(Frame(0, 0, samples), time.monotonic_ns() + 20_000_000_000)
        assert client.shapes == [shape]  # both cameras in one batched request
        for name in samples:
            assert results[name].status is SensorStatus.OK, results[name].error
            np.testing.assert_allclose(results[name].outputs["BOXES"][0], a_box)
            assert not results[name].outputs["BOXES"][1:].any()


class _RecordingEncoded:
    """A camera model that decodes (decode: server): records what it was sent, one box at (10, 20, 30, 40)."""

    def __init__(self) -> None:
        self.inputs: list[dict[str, npt.NDArray[np.object_]]] = []

    async def infer_request(self, req: InferRequest) -> object:
        self.inputs.append(dict(req.inputs))
        return await _RecordingCamera().infer_request(
            InferRequest(req.model, {"IMAGE": np.zeros((len(req.inputs["IMAGE_BYTES"]), 1, 1, 3), np.uint8)})
        )


@pytest.mark.anyio
async def test_a_camera_the_model_decodes_sends_its_jpeg_as_recorded(big_jpeg: bytes) -> None:
    """decode: server -- the JPEGs go as recorded in one IMAGE_BYTES batch (nothing decoded here, no
    worker thread), and the boxes come back in the original's pixels (no factors applied); a camera the
    client decodes next to it still sends pixels."""
    import time

    import anyio

    from perception.config import PipelineConfig, SensorConfig
    from perception.scheduler._dispatch import Dispatcher
    from perception.types import Frame, SensorStatus

    sensors = [SensorConfig("cam_a", "camera", "cam"), SensorConfig("cam_b", "camera", "cam")]
    samples = {name: ImageSample(name, 0, name, big_jpeg) for name in ("cam_a", "cam_b")}
    client = _RecordingEncoded()
    dispatcher = Dispatcher(
        client,  # type: ignore[arg-type]
        sensors,
        PipelineConfig(),
        input_sizes={"cam": (416, 416)},
        server_decode={"cam_a", "cam_b"},
    )
    with anyio.fail_after(30):
        results = await dispatcher.dispatch(Frame(0, 0, samples), time.monotonic_ns() + 20_000_000_000)
    (sent,) = client.inputs
    assert set(sent) == {"IMAGE_BYTES"} and sent["IMAGE_BYTES"].shape == (2, 1)
    assert [bytes(row[0]) for row in sent["IMAGE_BYTES"]] == [big_jpeg, big_jpeg]
    for name in samples:
        assert results[name].status is SensorStatus.OK, results[name].error
        np.testing.assert_allclose(results[name].outputs["BOXES"][0], (10, 20, 30, 40))  # not scaled


class _FlaggingEncoded:
    """A camera model that decodes and answers a row it cannot decode on its own (DECODE_ERROR): rows whose
    bytes are not a JPEG get no detections and a reason; the others one box at (10, 20, 30, 40). Without
    ``flags`` it fails the whole request on such a row, as a model lacking the output does."""

    def __init__(self, *, flags: bool) -> None:
        self.flags = flags
        self.outputs: list[tuple[str, ...] | None] = []

    async def infer_request(self, req: InferRequest) -> object:
        from perception.errors import InferenceError

        self.outputs.append(req.outputs)
        rows = [bytes(row[0]) for row in req.inputs["IMAGE_BYTES"]]
        bad = [i for i, blob in enumerate(rows) if not blob.startswith(b"\xff\xd8")]
        if bad and not self.flags:
            raise InferenceError(f"invalid input IMAGE_BYTES: row {bad[0]}: cannot decode image", model=req.model)
        result = await _RecordingCamera().infer_request(
            InferRequest(req.model, {"IMAGE": np.zeros((len(rows), 1, 1, 3), np.uint8)})
        )
        outputs = dict(result.outputs)  # type: ignore[attr-defined]
        errors = np.empty((len(rows), 1), np.object_)
        for i in range(len(rows)):
            errors[i, 0] = f"row {i}: cannot decode image".encode() if i in bad else b""
            if i in bad:
                outputs["BOXES"][i] = 0
                outputs["COUNT"][i] = 0
        if req.outputs is not None and "DECODE_ERROR" in req.outputs:
            outputs["DECODE_ERROR"] = errors
        return type("Result", (), {"outputs": outputs, "prepare_ns": 0})()


@pytest.mark.anyio
async def test_an_image_the_model_cannot_decode_is_its_cameras_error_alone(big_jpeg: bytes) -> None:
    """A model that answers an undecodable row on its own (``decode_errors``) is asked for DECODE_ERROR:
    the flagged camera is an error naming it, the model and the encoded input, with no outputs; the
    other camera of the batch keeps its detections (without DECODE_ERROR among them). A model that
    lacks the output is not asked for it, and its failed request is every camera's error, as before."""
    import time

    import anyio

    from perception.config import PipelineConfig, SensorConfig
    from perception.scheduler._dispatch import Dispatcher
    from perception.types import Frame, SensorStatus

    sensors = [SensorConfig("cam_a", "camera", "cam"), SensorConfig("cam_b", "camera", "cam")]
    samples = {
        "cam_a": ImageSample("cam_a", 0, "cam_a", b"not a jpeg"),
        "cam_b": ImageSample("cam_b", 0, "cam_b", big_jpeg),
    }
    flagging = _FlaggingEncoded(flags=True)
    dispatcher = Dispatcher(
        flagging,  # type: ignore[arg-type]
        sensors,
        PipelineConfig(),
        server_decode={"cam_a", "cam_b"},
        decode_errors={"cam"},
    )
    with anyio.fail_after(30):
        results = await dispatcher.dispatch(Frame(3, 0, samples), time.monotonic_ns() + 20_000_000_000)
    assert flagging.outputs == [("BOXES", "SCORES", "LABELS", "COUNT", "DECODE_ERROR")]
    a, b = results["cam_a"], results["cam_b"]
    assert a.status is SensorStatus.ERROR and a.outputs == {}
    assert a.error is not None and a.error.startswith(
        "cam_a: IMAGE_BYTES: not decoded by the model: row 0: cannot decode"
    )
    assert "model=cam" in a.error and "frame=3" in a.error
    assert b.status is SensorStatus.OK, b.error
    assert set(b.outputs) == {"BOXES", "SCORES", "LABELS", "COUNT"}
    np.testing.assert_allclose(b.outputs["BOXES"][0], (10, 20, 30, 40))

    # a model without DECODE_ERROR: not asked for it; one bad image fails its batch (both cameras)
    legacy = _FlaggingEncoded(flags=False)
    dispatcher = Dispatcher(legacy, sensors, PipelineConfig(), server_decode={"cam_a", "cam_b"})  # type: ignore[arg-type]
    with anyio.fail_after(30):
        results = await dispatcher.dispatch(Frame(4, 0, samples), time.monotonic_ns() + 20_000_000_000)
    assert legacy.outputs == [("BOXES", "SCORES", "LABELS", "COUNT")]
    assert {r.status for r in results.values()} == {SensorStatus.ERROR}

    # the clients' own decode: nothing for the model to flag, nothing asked for
    client_side = _RecordingCamera()
    dispatcher = Dispatcher(client_side, sensors, PipelineConfig(), decode_errors={"cam"})  # type: ignore[arg-type]
    with anyio.fail_after(30):
        results = await dispatcher.dispatch(Frame(5, 0, samples), time.monotonic_ns() + 20_000_000_000)
    assert results["cam_a"].status is SensorStatus.ERROR and results["cam_b"].status is SensorStatus.OK
    assert results["cam_a"].error is not None and "cam_a: image: cannot decode" in results["cam_a"].error


@pytest.mark.anyio
async def test_a_malformed_decode_error_is_a_contract_error_of_the_batch(big_jpeg: bytes) -> None:
    import time

    import anyio

    from perception.config import PipelineConfig, SensorConfig
    from perception.scheduler._dispatch import Dispatcher
    from perception.types import Frame, SensorStatus

    class _BadFlags(_FlaggingEncoded):
        async def infer_request(self, req: InferRequest) -> object:
            result = await super().infer_request(req)
            result.outputs["DECODE_ERROR"] = np.zeros((1, 1), np.int32)  # type: ignore[attr-defined]
            return result

    sensors = [SensorConfig("cam_a", "camera", "cam"), SensorConfig("cam_b", "camera", "cam")]
    samples = {name: ImageSample(name, 0, name, big_jpeg) for name in ("cam_a", "cam_b")}
    dispatcher = Dispatcher(
        _BadFlags(flags=True),  # type: ignore[arg-type]
        sensors,
        PipelineConfig(),
        server_decode={"cam_a", "cam_b"},
        decode_errors={"cam"},
    )
    with anyio.fail_after(30):
        results = await dispatcher.dispatch(Frame(0, 0, samples), time.monotonic_ns() + 20_000_000_000)
    for r in results.values():
        assert r.status is SensorStatus.ERROR and r.error is not None
        assert "answer outside the camera contract: DECODE_ERROR" in r.error, r.error


def test_decode_server_is_for_image_sensors_and_names_the_sensor() -> None:
    from perception.config import SensorConfig, SensorDefaults
    from perception.errors import ConfigError
    from perception.kinds import CAMERA
    from perception.triton import ModelContract, check_encoded_input

    assert SensorConfig("cam", "camera", "m").decode == "auto"
    assert SensorConfig("cam", "camera", "m", decode="server").decode == "server"
    with pytest.raises(ValueError, match=r"decode: .*sensor 'lidar_top' is a lidar"):
        SensorConfig("lidar_top", "lidar", "m", decode="server")
    with pytest.raises(ValueError, match=r"lidar\.decode"):
        SensorDefaults(lidar=dataclasses.replace(SensorDefaults().lidar, decode="server"))
    # a served model without the encoded input: the start fails naming the sensors and the model
    pixels_only = ModelContract("cam_model", 8, CAMERA.contract.inputs, CAMERA.contract.outputs)
    with pytest.raises(ConfigError, match=r"cam_model .*IMAGE_BYTES.*decode: client for cam_a, cam_b") as info:
        check_encoded_input("camera", pixels_only, ["cam_a", "cam_b"])
    assert info.value.sensor == "cam_a, cam_b" and info.value.model == "cam_model"
    encoded = CAMERA.contract.encoded
    assert encoded is not None
    takes_it = dataclasses.replace(pixels_only, inputs=(*CAMERA.contract.inputs, encoded))
    check_encoded_input("camera", takes_it, ["cam_a"])
    required = dataclasses.replace(pixels_only, inputs=(dataclasses.replace(encoded, optional=False),))
    with pytest.raises(ConfigError, match="must be optional"):
        check_encoded_input("camera", required, ["cam_a"])


def test_a_served_decode_error_output_must_be_as_the_contract_says() -> None:
    """DECODE_ERROR is optional (a model may lack it), but one that is served is BYTES [1]."""
    from perception.kinds import CAMERA, TensorSpec
    from perception.triton import ModelContract, check_contract

    flag = CAMERA.contract.decode_error
    assert flag is not None and flag.name == "DECODE_ERROR"
    plain = ModelContract("cam_model", 8, CAMERA.contract.inputs, CAMERA.contract.outputs)
    check_contract("camera", plain)
    check_contract("camera", dataclasses.replace(plain, outputs=(*plain.outputs, flag)))
    wrong = dataclasses.replace(plain, outputs=(*plain.outputs, TensorSpec("DECODE_ERROR", "INT32", (1,))))
    with pytest.raises(ModelContractError, match=r"output DECODE_ERROR: dtype is INT32, expected BYTES") as info:
        check_contract("camera", wrong)
    assert info.value.model == "cam_model" and info.value.tensor == "DECODE_ERROR"


@pytest.mark.anyio
async def test_auto_sends_the_jpeg_only_to_a_model_that_answers_a_bad_one_on_its_own(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """``decode: auto`` (the default): the model decodes when it takes IMAGE_BYTES *and* declares
    DECODE_ERROR (so one undecodable image is its camera's error alone); a model taking IMAGE_BYTES
    without DECODE_ERROR, or pixels only, gets pixels; ``server`` sends the JPEG all the same (with a
    warning when the model lacks DECODE_ERROR)."""
    from typing import Any

    from perception.config import RuntimeConfig, from_data
    from perception.kinds import CAMERA
    from perception.scheduler import Runtime
    from perception.triton import ModelContract, TritonClient

    encoded, flag = CAMERA.contract.encoded, CAMERA.contract.decode_error
    assert encoded is not None and flag is not None
    plain = ModelContract("pixels", 8, CAMERA.contract.inputs, CAMERA.contract.outputs)
    served = {
        "pixels": plain,
        "bytes_only": dataclasses.replace(plain, name="bytes_only", inputs=(*plain.inputs, encoded)),
        "flags": dataclasses.replace(
            plain, name="flags", inputs=(*plain.inputs, encoded), outputs=(*plain.outputs, flag)
        ),
    }

    class _Served(TritonClient):
        async def wait_ready(self, models: Any, timeout_s: float, **kwargs: Any) -> None:
            return None

        async def model_statistics(self, model: str, url: str | None = None, **kwargs: Any) -> dict[str, int]:
            return {}

        async def model_contract(self, model: str, url: str | None = None) -> ModelContract:
            return served[model]

    sensors = [
        {"name": "cam_a", "kind": "camera", "model": "flags"},
        {"name": "cam_b", "kind": "camera", "model": "bytes_only"},
        {"name": "cam_c", "kind": "camera", "model": "pixels"},
        {"name": "cam_d", "kind": "camera", "model": "bytes_only", "decode": "server"},
        {"name": "cam_e", "kind": "camera", "model": "flags", "decode": "client"},
    ]
    data = {
        "server": {"url": "127.0.0.1:1"},
        "sensors": sensors,
        "trigger": {"rate_hz": 10},
        "fusion": {"enabled": False},
    }
    rt = Runtime(from_data(RuntimeConfig, data), client=_Served())
    with anyio.fail_after(10):  # watchdog
        await rt._verify_models()
    assert rt._server_decode == {"cam_a", "cam_d"}
    assert rt._decode_errors == {"flags"}
    (warning,) = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert "decode: server for cam_d, but model bytes_only does not declare DECODE_ERROR" in warning
