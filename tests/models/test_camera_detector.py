"""The camera detector (ONNX CenterNet in the python backend) through the real embedded Triton server."""

from __future__ import annotations

from dataclasses import dataclass

import anyio
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as grpcaio
from tritonclient.utils import InferenceServerException, np_to_triton_dtype

from perception.modelkit import CameraDetections, box_iou, camera_ground_truth
from perception.server import EmbeddedTriton
from perception.sim import Simulator, project_ground_truth
from perception.types import LABELS, ImageSample

MODEL = "camera_detector"
CAR = LABELS.index("car")
OUTPUTS = ("BOXES", "SCORES", "LABELS", "COUNT")


@dataclass(frozen=True)
class Frame:
    image: np.ndarray
    gt_boxes: np.ndarray
    gt_labels: np.ndarray
    gt_ignore: np.ndarray


@pytest.fixture(scope="module")
def frame() -> Frame:
    """The busiest of a few front-camera frames of a simulated urban drive (an evaluation seed), with its
    projected ground truth."""
    sim = Simulator("urban", seed=7, duration_s=4.0)
    spec = sim.rig.sensor("cam_front").spec
    frames = []
    for k in range(0, len(sim.capture_times("cam_front")), 8):
        sample = sim.sample("cam_front", k)
        assert isinstance(sample, ImageSample)
        labels = [
            (b.label, b.x1, b.y1, b.x2, b.y2, b.visible_fraction)
            for b in project_ground_truth(sim.ground_truth(sample.t_ns), spec)
        ]
        boxes, label_ids, ignore = camera_ground_truth(labels)
        frames.append(Frame(sample.decode(), boxes, label_ids, ignore))
    return max(frames, key=lambda f: int((~f.gt_ignore & (f.gt_labels == CAR)).sum()))


@pytest.fixture(scope="module")
def road_image(frame: Frame) -> np.ndarray:
    return frame.image


def image_input(images: np.ndarray) -> grpcclient.InferInput:
    inp = grpcclient.InferInput("IMAGE", list(images.shape), np_to_triton_dtype(images.dtype))
    inp.set_data_from_numpy(images)
    return inp


def infer(client: grpcclient.InferenceServerClient, images: np.ndarray) -> dict[str, np.ndarray]:
    result = client.infer(
        MODEL,
        [image_input(images)],
        outputs=[grpcclient.InferRequestedOutput(o) for o in OUTPUTS],
        client_timeout=60.0,
    )
    return {o: result.as_numpy(o) for o in OUTPUTS}


def detections(out: dict[str, np.ndarray], row: int) -> CameraDetections:
    return CameraDetections.from_padded(out["BOXES"][row], out["SCORES"][row], out["LABELS"][row], out["COUNT"][row])


def assert_invalid_arg(exc: InferenceServerException, *fragments: str) -> None:
    assert "INVALID_ARGUMENT" in str(exc.status()), exc
    for fragment in fragments:
        assert fragment in exc.message(), exc.message()


def test_contract_shapes_and_padding(client: grpcclient.InferenceServerClient, road_image: np.ndarray) -> None:
    out = infer(client, road_image[None])
    assert out["BOXES"].dtype == np.float32 and out["BOXES"].shape == (1, 100, 4)
    assert out["SCORES"].dtype == np.float32 and out["SCORES"].shape == (1, 100)
    assert out["LABELS"].dtype == np.int32 and out["LABELS"].shape == (1, 100)
    assert out["COUNT"].dtype == np.int32 and out["COUNT"].shape == (1, 1)
    n = int(out["COUNT"][0, 0])
    assert 0 < n <= 100
    assert not out["BOXES"][0, n:].any() and not out["SCORES"][0, n:].any() and not out["LABELS"][0, n:].any()
    scores = out["SCORES"][0, :n]
    assert np.all((scores > 0) & (scores <= 1)) and np.all(np.diff(scores) <= 0)
    assert set(out["LABELS"][0, :n].tolist()) <= {0, 1, 2, 3}
    boxes = out["BOXES"][0, :n]
    h, w = road_image.shape[:2]
    assert np.all(boxes[:, 0] <= boxes[:, 2]) and np.all(boxes[:, 1] <= boxes[:, 3])
    assert boxes.min() >= 0 and np.all(boxes[:, [0, 2]] <= w) and np.all(boxes[:, [1, 3]] <= h)


def test_finds_the_cars_of_a_generated_frame(client: grpcclient.InferenceServerClient, frame: Frame) -> None:
    dets = detections(infer(client, frame.image[None]), 0)
    cars = ~frame.gt_ignore & (frame.gt_labels == CAR)
    assert cars.sum() >= 2, "the fixture frame should show several cars"
    iou = box_iou(frame.gt_boxes, dets.boxes)
    car_hits = (iou >= 0.5) & (dets.labels[None, :] == CAR) & (dets.scores[None, :] >= 0.3)
    missed = cars & ~car_hits.any(axis=1)
    assert not missed.any(), f"cars not found: {frame.gt_boxes[missed].round().tolist()}"
    # Confident detections (any class) sit on real objects (counted or don't-care), not on background.
    confident = dets.scores >= 0.4
    assert confident.any()
    assert (iou[:, confident] >= 0.3).any(axis=0).mean() >= 0.8


def test_two_cameras_in_one_request(client: grpcclient.InferenceServerClient, road_image: np.ndarray) -> None:
    flipped = np.ascontiguousarray(road_image[:, ::-1])
    both = infer(client, np.stack([road_image, flipped]))
    assert both["BOXES"].shape == (2, 100, 4) and both["COUNT"].shape == (2, 1)
    for row, image in enumerate((road_image, flipped)):
        alone = detections(infer(client, image[None]), 0)
        batched = detections(both, row)
        assert len(alone) == len(batched)
        np.testing.assert_allclose(batched.boxes, alone.boxes, atol=1e-3)
        np.testing.assert_allclose(batched.scores, alone.scores, atol=1e-5)


def encoded_input(blobs: list[bytes]) -> grpcclient.InferInput:
    rows = np.empty((len(blobs), 1), dtype=np.object_)
    for i, blob in enumerate(blobs):
        rows[i, 0] = blob
    inp = grpcclient.InferInput("IMAGE_BYTES", list(rows.shape), "BYTES")
    inp.set_data_from_numpy(rows)
    return inp


def test_the_jpeg_decoded_by_the_model_answers_like_the_clients_decode(
    client: grpcclient.InferenceServerClient, road_image: np.ndarray
) -> None:
    """decode: server -- the camera's JPEG as recorded (IMAGE_BYTES), decoded by the model at its network's
    scale -- gives the detections of decode: client (decoded here at that scale, boxes scaled back): the
    same pixels, so the same boxes, in the original image's pixels."""
    from perception._imageio import encode_jpeg
    from perception.scheduler import camera_input, scale_camera_boxes

    big = np.ascontiguousarray(np.repeat(np.repeat(road_image, 2, axis=0), 2, axis=1))  # decodes at a 1/2 scale
    jpegs = [encode_jpeg(road_image), encode_jpeg(big)]
    config = client.get_model_config(MODEL, as_json=True)["config"]["parameters"]
    fit = (int(config["input_width"]["string_value"]), int(config["input_height"]["string_value"]))
    result = client.infer(MODEL, [encoded_input(jpegs)], outputs=[grpcclient.InferRequestedOutput(o) for o in OUTPUTS])
    server = {o: result.as_numpy(o) for o in OUTPUTS}
    assert server["BOXES"].shape == (2, 100, 4)
    for row, jpeg in enumerate(jpegs):
        image, scale = camera_input(ImageSample("cam", 0, "cam", jpeg), fit)
        out = infer(client, image[None])
        expected = detections({**out, "BOXES": scale_camera_boxes({"BOXES": out["BOXES"][0]}, scale)["BOXES"][None]}, 0)
        got = detections(server, row)
        assert len(got) == len(expected) > 0
        np.testing.assert_allclose(got.boxes, expected.boxes, atol=1e-3)
        np.testing.assert_allclose(got.scores, expected.scores, atol=1e-6)
    assert detections(server, 1).boxes.max() > road_image.shape[1]  # the big image's boxes in its own pixels


def test_an_undecodable_jpeg_is_invalid_arg_naming_its_row(client: grpcclient.InferenceServerClient) -> None:
    from perception._imageio import encode_jpeg

    good = encode_jpeg(np.zeros((36, 64, 3), np.uint8))
    with pytest.raises(InferenceServerException) as info:
        client.infer(MODEL, [encoded_input([good, b"not a jpeg"])], outputs=[grpcclient.InferRequestedOutput("COUNT")])
    assert_invalid_arg(info.value, "IMAGE_BYTES", "row 1", "cannot decode")


def test_an_undecodable_row_is_answered_on_its_own_when_decode_error_is_asked_for(
    client: grpcclient.InferenceServerClient, road_image: np.ndarray
) -> None:
    """A request asking for DECODE_ERROR (the camera contract's per-row answer) gets a row whose bytes do
    not decode (garbage, a zero-width PNG) answered on its own: no detections and its reason; the other
    rows are detected as if sent alone. (Without DECODE_ERROR the whole request failed: the test above.)"""
    from perception._imageio import encode_jpeg

    zero_width_png = b"\x89PNG\r\n\x1a\n" + b"\x00\x00\x00\rIHDR" + (0).to_bytes(4, "big") + (48).to_bytes(4, "big")
    good = encode_jpeg(road_image)
    wanted = [*OUTPUTS, "DECODE_ERROR"]
    result = client.infer(
        MODEL,
        [encoded_input([good, b"not a jpeg", good, zero_width_png])],
        outputs=[grpcclient.InferRequestedOutput(o) for o in wanted],
    )
    out = {o: result.as_numpy(o) for o in wanted}
    alone = client.infer(MODEL, [encoded_input([good])], outputs=[grpcclient.InferRequestedOutput(o) for o in wanted])
    expected = detections({o: alone.as_numpy(o) for o in OUTPUTS}, 0)
    assert out["DECODE_ERROR"].shape == (4, 1) and alone.as_numpy("DECODE_ERROR")[0, 0] == b""
    for row in (0, 2):
        assert out["DECODE_ERROR"][row, 0] == b""
        got = detections(out, row)
        assert len(got) == len(expected) > 0
        np.testing.assert_allclose(got.boxes, expected.boxes, atol=1e-3)
    for row in (1, 3):
        assert out["DECODE_ERROR"][row, 0].startswith(f"row {row}: ".encode()), out["DECODE_ERROR"][row, 0]
        assert int(out["COUNT"][row, 0]) == 0 and not out["BOXES"][row].any() and not out["SCORES"][row].any()
    assert b"cannot decode" in out["DECODE_ERROR"][1, 0]
    # every row undecodable: answered all the same, no network run needed
    result = client.infer(
        MODEL,
        [encoded_input([b"", b"\xff\xd8\xff garbage"])],
        outputs=[grpcclient.InferRequestedOutput(o) for o in wanted],
    )
    assert result.as_numpy("COUNT").tolist() == [[0], [0]]
    assert all(row[0] for row in result.as_numpy("DECODE_ERROR"))


@pytest.mark.parametrize(
    ("images", "fragments"),
    [
        (np.zeros((1, 36, 64, 3), np.float32), ("IMAGE", "FP32")),  # wrong dtype
        (np.zeros((1, 36, 64), np.uint8), ("IMAGE",)),  # wrong rank
        (np.zeros((1, 36, 64, 4), np.uint8), ("IMAGE",)),  # RGBA
        (np.zeros((1, 0, 64, 3), np.uint8), ("IMAGE", "zero-size")),
        (np.zeros((1, 9000, 2, 3), np.uint8), ("IMAGE", "too large")),
    ],
)
def test_malformed_images_are_invalid_arg(
    client: grpcclient.InferenceServerClient, images: np.ndarray, fragments: tuple[str, ...]
) -> None:
    with pytest.raises(InferenceServerException) as info:
        infer(client, images)
    assert_invalid_arg(info.value, *fragments)


@pytest.mark.anyio
async def test_concurrent_requests_match_single_ones(
    triton: EmbeddedTriton, client: grpcclient.InferenceServerClient, road_image: np.ndarray
) -> None:
    """Concurrent requests (which the dynamic batcher may merge into one network run, together with a
    malformed one that must fail alone) each get their own answer."""
    images = [road_image, np.ascontiguousarray(road_image[::-1]), np.ascontiguousarray(road_image[:, ::-1])]
    expected = [detections(infer(client, image[None]), 0) for image in images]
    results: dict[int, CameraDetections | InferenceServerException] = {}
    with anyio.fail_after(90):  # watchdog (the client's open and close too)
        async with grpcaio.InferenceServerClient(triton.grpc_url) as aio:

            async def one(i: int, batch: np.ndarray) -> None:
                inp = grpcaio.InferInput("IMAGE", list(batch.shape), "UINT8")
                inp.set_data_from_numpy(batch)
                try:
                    res = await aio.infer(MODEL, [inp], outputs=[grpcaio.InferRequestedOutput(o) for o in OUTPUTS])
                except InferenceServerException as exc:
                    results[i] = exc
                    return
                results[i] = detections({o: res.as_numpy(o) for o in OUTPUTS}, 0)

            async with anyio.create_task_group() as tg:
                for i, image in enumerate(images * 2):
                    tg.start_soon(one, i, image[None])
                tg.start_soon(one, 99, np.zeros((1, 0, 640, 3), np.uint8))
    bad = results.pop(99)
    assert isinstance(bad, InferenceServerException)
    assert_invalid_arg(bad, "IMAGE")
    for i, got in results.items():
        assert isinstance(got, CameraDetections), got
        want = expected[i % len(images)]
        assert len(got) == len(want)
        np.testing.assert_allclose(got.boxes, want.boxes, atol=1e-3)
