"""A kind's contract checks that the outputs holding one row per detection agree in their row count
(``KindContract.outputs_problem``, the dispatcher's check on every answer), naming the tensors."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from perception.kinds import CAMERA, LIDAR, RADAR, KindContract, TensorSpec

F4 = np.float32
I4 = np.int32


def _lidar(boxes: int, labels: int, scores: int) -> dict[str, Any]:
    return {"BOXES": np.zeros((boxes, 7), F4), "LABELS": np.zeros(labels, I4), "SCORES": np.zeros(scores, F4)}


def _radar(n: int, **rows: int) -> dict[str, Any]:
    shapes = {"POSITIONS": (3,), "RADIAL_VELOCITY": (), "VELOCITY": (2,), "RCS": (), "SCORES": (), "RETURNS": ()}
    return {
        name: np.zeros((rows.get(name, n), *cols), I4 if name == "RETURNS" else F4) for name, cols in shapes.items()
    }


#: The camera's outputs with a variable row count (a kind of one's own: the built-in camera's are 100 each).
VARIABLE_CAMERA = replace(
    CAMERA.contract,
    outputs=tuple(replace(t, dims=(-1, *t.dims[1:])) if t.dims[0] == 100 else t for t in CAMERA.contract.outputs),
)


def _camera(batch: int, boxes: int, scores: int, labels: int) -> dict[str, Any]:
    return {
        "BOXES": np.zeros((batch, boxes, 4), F4),
        "SCORES": np.zeros((batch, scores), F4),
        "LABELS": np.zeros((batch, labels), I4),
        "COUNT": np.zeros((batch, 1), I4),
    }


def test_the_row_outputs_of_the_built_in_kinds() -> None:
    assert LIDAR.contract.row_outputs == ("BOXES", "LABELS", "SCORES")
    assert RADAR.contract.row_outputs == RADAR.contract.output_names
    assert CAMERA.contract.row_outputs == ()  # a fixed 100 rows each: the dims check them
    assert VARIABLE_CAMERA.row_outputs == ("BOXES", "SCORES", "LABELS")  # not COUNT, of one row


@pytest.mark.parametrize("n", [0, 1, 40])
def test_answers_whose_rows_agree_pass(n: int) -> None:
    assert LIDAR.contract.outputs_problem(_lidar(n, n, n)) is None
    assert RADAR.contract.outputs_problem(_radar(n)) is None
    assert VARIABLE_CAMERA.outputs_problem(_camera(3, n, n, n), batch=3) is None


@pytest.mark.parametrize(
    ("answer", "problem"),
    [
        (_lidar(2, 2, 3), "SCORES has 3 rows, BOXES 2 (one row per detection)"),
        (_lidar(2, 5, 2), "LABELS has 5 rows, BOXES 2 (one row per detection)"),
        (_lidar(0, 1, 1), "LABELS has 1 row, BOXES 0 (one row per detection)"),
    ],
)
def test_lidar_rows_that_disagree_name_the_tensors(answer: dict[str, Any], problem: str) -> None:
    assert LIDAR.contract.outputs_problem(answer) == problem


def test_radar_rows_that_disagree_name_the_tensors() -> None:
    problem = RADAR.contract.outputs_problem(_radar(4, RETURNS=3))
    assert problem == "RETURNS has 3 rows, POSITIONS 4 (one row per detection)"
    problem = RADAR.contract.outputs_problem(_radar(4, VELOCITY=0))
    assert problem == "VELOCITY has 0 rows, POSITIONS 4 (one row per detection)"


def test_batched_rows_are_counted_per_image() -> None:
    problem = VARIABLE_CAMERA.outputs_problem(_camera(2, 5, 6, 5), batch=2)
    assert problem == "SCORES has 6 rows, BOXES 5 (one row per detection)"
    # the built-in camera's rows are fixed: another count is that tensor's wrong dim
    answer = _camera(2, 100, 100, 99)
    assert (CAMERA.contract.outputs_problem(answer, batch=2) or "").startswith("LABELS: expected 100 ")


def test_a_wrong_shape_is_reported_before_the_rows() -> None:
    answer = _lidar(2, 3, 3)
    answer["BOXES"] = np.zeros((2, 6), F4)
    assert (LIDAR.contract.outputs_problem(answer) or "").startswith("BOXES: expected 7 columns")


def test_a_contract_may_state_its_row_outputs() -> None:
    free = replace(LIDAR.contract, rows=())  # a kind whose variable outputs are not of one length
    assert free.row_outputs == () and free.outputs_problem(_lidar(2, 3, 4)) is None
    some = replace(LIDAR.contract, rows=("BOXES", "SCORES"))
    assert some.outputs_problem(_lidar(2, 3, 2)) is None
    assert some.outputs_problem(_lidar(2, 2, 3)) == "SCORES has 3 rows, BOXES 2 (one row per detection)"
    assert replace(LIDAR.contract, rows=("BOXES",)).row_outputs == ()  # one output: nothing to agree with
    assert free != LIDAR.contract and some == replace(LIDAR.contract, rows=("BOXES", "SCORES"))


@pytest.mark.parametrize(
    ("rows", "outputs", "match"),
    [
        (("BOXES", "NOPE"), None, r"rows: 'NOPE' is not an output with a row dimension"),
        (("BOXES", "FLAG"), (TensorSpec("BOXES", "FP32", (-1, 7)), TensorSpec("FLAG", "BOOL", ())), "'FLAG'"),
        (
            ("A", "B"),
            (TensorSpec("A", "FP32", (100, 4)), TensorSpec("B", "FP32", (50,))),
            r"rows: A, B have fixed row counts that differ \(\[50, 100\]\)",
        ),
    ],
)
def test_row_outputs_a_contract_cannot_have(
    rows: tuple[str, ...], outputs: tuple[TensorSpec, ...] | None, match: str
) -> None:
    with pytest.raises(ValueError, match=match):
        KindContract(inputs=LIDAR.contract.inputs, outputs=outputs or LIDAR.contract.outputs, rows=rows)
