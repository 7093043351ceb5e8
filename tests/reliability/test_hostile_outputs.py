"""Model answers outside the contract (issue 33): a wrong shape, dtype, rank, a missing output or outputs
whose rows disagree is that sensor's ``error`` naming model and tensor (and a breaker failure), never an
exception cancelling the frame's other sensors or reaching the host. Through the real server: ``told_lidar`` /
``told_camera`` answer what the sample tells them (perception.modelkit._testing.ToldModel)."""

from __future__ import annotations

import io
from collections.abc import Sequence

import anyio
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image
from reliability_helpers import LIDAR_FIELDS, MS, T0, make_frame, rig, runtime_config

from perception.scheduler import Runtime
from perception.server import EmbeddedTriton
from perception.types import Frame, FrameStatus, ImageSample, PointCloudSample, SensorStatus

MODELS = {"lidar_top": "told_lidar", "radar_front": "sleepy_radar", "cam_front": "told_camera"}
RIGHT = (0, 0, 0, 0, 0)


def told_frame(i: int, lidar: Sequence[Sequence[int]], camera: Sequence[Sequence[int]]) -> Frame:
    """Frame ``i`` whose lidar and camera samples tell their models what to answer (five numbers per
    output: dtype code, rank, dims; see ``told_outputs``)."""
    base = make_frame(i, ["radar_front"])
    points = np.zeros((64, 4), np.float32)
    points.reshape(-1)[: 5 * len(lidar)] = np.asarray(lidar, np.float32).reshape(-1)
    pixels = np.zeros((48, 64, 3), np.uint8)
    pixels.reshape(-1)[: 5 * len(camera)] = np.asarray(camera, np.uint8).reshape(-1)
    png = io.BytesIO()
    Image.fromarray(pixels).save(png, format="PNG")
    t = T0 + i * 100 * MS
    samples = {
        **base.samples,
        "lidar_top": PointCloudSample("lidar_top", t, "lidar_top", points, LIDAR_FIELDS),
        "cam_front": ImageSample("cam_front", t, "cam_front", png.getvalue(), "png"),
    }
    return Frame(frame_id=i, t_ns=t, samples=samples)


# (lidar BOXES, LABELS, SCORES), (camera BOXES, SCORES, LABELS, COUNT), what the lidar / camera get
CASES = [
    ((RIGHT, RIGHT, RIGHT), (RIGHT, RIGHT, RIGHT, RIGHT), "ok", "ok"),
    (((1, 2, 3, 6, 0), (2, 1, 3, 0, 0), (1, 1, 3, 0, 0)), (RIGHT,) * 4, "BOXES", "ok"),  # 6 box columns
    ((RIGHT, (9, 0, 0, 0, 0), RIGHT), (RIGHT,) * 4, "LABELS", "ok"),  # an output left out
    (((1, 0, 0, 0, 0), RIGHT, RIGHT), (RIGHT,) * 4, "BOXES", "ok"),  # a scalar
    (((1, 3, 2, 3, 7), RIGHT, RIGHT), (RIGHT,) * 4, "BOXES", "ok"),  # rank 3
    # rows that disagree: 3 boxes, 5 labels
    (((1, 2, 3, 7, 0), (2, 1, 5, 0, 0), (1, 1, 3, 0, 0)), (RIGHT,) * 4, "LABELS has 5 rows, BOXES 3", "ok"),
    ((RIGHT,) * 3, ((1, 2, 100, 4, 0), RIGHT, RIGHT, RIGHT), "ok", "BOXES"),  # no batch dimension
    ((RIGHT,) * 3, ((1, 3, 1, 100, 3), RIGHT, RIGHT, RIGHT), "ok", "BOXES"),  # 3 box columns
    ((RIGHT,) * 3, ((1, 3, 2, 100, 4), RIGHT, RIGHT, RIGHT), "ok", "BOXES"),  # a batch of 2 for 1 image
    ((RIGHT,) * 3, (RIGHT, RIGHT, RIGHT, (9, 0, 0, 0, 0)), "ok", "COUNT"),
    ((RIGHT,) * 3, (RIGHT, RIGHT, (2, 2, 1, 99, 0), RIGHT), "ok", "LABELS"),  # 99 labels for 100 rows
]


def _check(result: object, sensor: str, want: str) -> None:
    res = result.sensors[sensor]  # type: ignore[attr-defined]
    if want == "ok":
        assert res.status is SensorStatus.OK, (sensor, res.error)
    else:
        assert res.status is SensorStatus.ERROR, (sensor, want, res.status)
        assert res.error is not None and want in res.error and MODELS[sensor] in res.error, res.error


@pytest.mark.anyio
async def test_answers_outside_the_contract_are_that_sensors_error(triton: EmbeddedTriton) -> None:
    cfg = runtime_config(
        triton.grpc_url,
        MODELS,
        fusion={"enabled": True},
        pipeline={"circuit": {"failure_threshold": 100}},
    )
    specs = {s.name: s for s in rig()}
    with anyio.fail_after(120):
        async with Runtime(cfg, rig=specs) as rt:
            for i, (lidar, camera, want_lidar, want_camera) in enumerate(CASES):
                r = await rt.process(told_frame(i, lidar, camera))
                _check(r, "lidar_top", want_lidar)
                _check(r, "cam_front", want_camera)
                assert r.sensors["radar_front"].status is SensorStatus.OK  # never cancelled by the others
                assert r.status is (FrameStatus.OK if want_lidar == want_camera == "ok" else FrameStatus.DEGRADED)


@pytest.mark.anyio
@pytest.mark.parametrize(
    "wrong",
    [((1, 2, 3, 6, 0), RIGHT, RIGHT), ((1, 2, 3, 7, 0), (2, 1, 3, 0, 0), (1, 1, 2, 0, 0))],
    ids=["6 box columns", "rows that disagree"],
)
async def test_a_model_answering_the_wrong_shape_opens_its_circuit(
    triton: EmbeddedTriton, wrong: tuple[tuple[int, ...], ...]
) -> None:
    cfg = runtime_config(triton.grpc_url, MODELS, pipeline={"circuit": {"failure_threshold": 2}})
    with anyio.fail_after(120):
        async with Runtime(cfg) as rt:
            statuses = [(await rt.process(told_frame(i, wrong, (RIGHT,) * 4))).sensors["lidar_top"] for i in range(4)]
    assert [s.status for s in statuses] == [SensorStatus.ERROR] * 2 + [SensorStatus.SKIPPED] * 2
    assert statuses[0].error is not None and "told_lidar" in statuses[0].error and "contract" in statuses[0].error


_OUTPUT = st.tuples(st.sampled_from([0, 1, 2, 3, 4, 5, 9]), st.integers(0, 3), *[st.integers(0, 4)] * 3)


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(answers=st.lists(st.tuples(st.tuples(*[_OUTPUT] * 3), st.tuples(*[_OUTPUT] * 4)), min_size=15, max_size=15))
def test_any_answer_is_ok_or_that_sensors_error(
    triton: EmbeddedTriton, answers: list[tuple[tuple[tuple[int, ...], ...], tuple[tuple[int, ...], ...]]]
) -> None:
    cfg = runtime_config(
        triton.grpc_url, MODELS, fusion={"enabled": True}, pipeline={"circuit": {"failure_threshold": 100}}
    )
    specs = {s.name: s for s in rig()}

    async def run() -> None:
        with anyio.fail_after(120):
            async with Runtime(cfg, rig=specs) as rt:
                for i, (lidar, camera) in enumerate(answers):
                    r = await rt.process(told_frame(i, lidar, camera))
                    assert r.frame_id == i and r.status is not FrameStatus.DROPPED, r.reason
                    assert r.sensors["radar_front"].status is SensorStatus.OK
                    for name in ("lidar_top", "cam_front"):
                        assert r.sensors[name].status in (SensorStatus.OK, SensorStatus.ERROR), r.sensors[name]

    anyio.run(run)
