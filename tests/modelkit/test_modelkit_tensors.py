"""Tensor contract checks and the Triton-independent parts of the python-backend glue."""

from __future__ import annotations

import numpy as np
import pytest

from perception.errors import InputError, ModelContractError
from perception.kinds import LIDAR, RADAR, TensorSpec
from perception.modelkit import LidarParams, RadarParams, check_model_config, params_from_config

LIDAR_INPUTS, LIDAR_OUTPUTS = LIDAR.contract.inputs, LIDAR.contract.outputs
RADAR_INPUTS, RADAR_OUTPUTS = RADAR.contract.inputs, RADAR.contract.outputs

LIDAR_POINTS = LIDAR_INPUTS[0]
RADAR_POINTS = RADAR_INPUTS[0]


def test_valid_tensors_pass_through() -> None:
    a = np.zeros((7, 4), np.float32)
    assert LIDAR_POINTS.validate(a) is a
    assert RADAR_POINTS.validate(np.zeros((3, 6), np.float32)).shape == (3, 6)
    assert LIDAR_POINTS.validate(np.zeros((0, 4), np.float32)).shape == (0, 4)


@pytest.mark.parametrize(
    ("spec", "array", "fragment"),
    [
        (LIDAR_POINTS, np.zeros((5, 4), np.float64), "expected data type FP32"),
        (LIDAR_POINTS, np.zeros((5, 4), np.int32), "got INT32"),
        (LIDAR_POINTS, np.zeros((20,), np.float32), "expected rank 2"),
        (LIDAR_POINTS, np.zeros((5, 3), np.float32), "expected 4 columns"),
        (RADAR_POINTS, np.zeros((5, 4), np.float32), "expected at least 5 columns"),
        (RADAR_POINTS, np.zeros((2, 2, 5), np.float32), "got rank 3"),
    ],
)
def test_bad_tensors_name_tensor_and_expectation(spec: TensorSpec, array: np.ndarray, fragment: str) -> None:
    with pytest.raises(InputError) as info:
        spec.validate(array)
    assert info.value.tensor == "POINTS"
    text = str(info.value)
    assert text.startswith("POINTS: ")
    assert fragment in text
    assert spec.expected() in text  # what was expected, e.g. "FP32 [-1, 4]"


def test_missing_tensor() -> None:
    with pytest.raises(InputError, match=r"POINTS: missing input; expected FP32 \[-1, >=5\]"):
        RADAR_POINTS.validate(None)


def test_spec_rejects_bad_declarations() -> None:
    with pytest.raises(ValueError, match="unknown data type"):
        TensorSpec("X", "FLOAT", (1,))
    with pytest.raises(ValueError, match="unknown data type"):
        TensorSpec("X", "TYPE_FP32", (1,))  # the config spelling is config_dtype, not the spec's
    with pytest.raises(ValueError, match="dims"):
        TensorSpec("X", "FP32", (0,))


def _config(inputs: tuple[TensorSpec, ...], outputs: tuple[TensorSpec, ...], **extra: object) -> dict[str, object]:
    def entries(specs: tuple[TensorSpec, ...]) -> list[dict[str, object]]:
        return [{"name": s.name, "data_type": s.config_dtype, "dims": [str(d) for d in s.dims]} for s in specs]

    return {"name": "m", "max_batch_size": 0, "input": entries(inputs), "output": entries(outputs), **extra}


def test_model_config_must_match_contract() -> None:
    check_model_config(_config(LIDAR_INPUTS, LIDAR_OUTPUTS), LIDAR_INPUTS, LIDAR_OUTPUTS)
    with pytest.raises(ModelContractError, match="outputs"):
        check_model_config(_config(LIDAR_INPUTS, LIDAR_OUTPUTS[:2]), LIDAR_INPUTS, LIDAR_OUTPUTS)
    wrong = (TensorSpec("POINTS", "FP32", (-1, 5)),)
    with pytest.raises(ModelContractError, match=r"input POINTS is TYPE_FP32 \[-1, 5\]"):
        check_model_config(_config(wrong, LIDAR_OUTPUTS), LIDAR_INPUTS, LIDAR_OUTPUTS)
    with pytest.raises(ModelContractError, match="max_batch_size must be 0"):
        check_model_config(_config(RADAR_INPUTS, RADAR_OUTPUTS, max_batch_size=8), RADAR_INPUTS, RADAR_OUTPUTS)


def test_parameters_override_numeric_fields() -> None:
    cfg = {"name": "m", "parameters": {"max_range": {"string_value": "55"}, "min_points": {"string_value": "9"}}}
    p = params_from_config(LidarParams(), cfg)
    assert p.max_range == 55.0
    assert p.min_points == 9
    assert isinstance(p.min_points, int)
    assert params_from_config(RadarParams(), {"name": "m"}) == RadarParams()


def test_parameters_reject_typos_and_non_numbers() -> None:
    with pytest.raises(ModelContractError, match="unknown parameter"):
        params_from_config(LidarParams(), {"name": "m", "parameters": {"max_rnage": {"string_value": "5"}}})
    with pytest.raises(ModelContractError, match="must be a number"):
        params_from_config(LidarParams(), {"name": "m", "parameters": {"max_range": {"string_value": "far"}}})


@pytest.mark.parametrize("model", ["lidar_detector", "radar_detector"])
def test_repository_configs_declare_the_contract(model: str) -> None:
    """The committed config.pbtxt files state exactly the contract the classes check (parsed simply)."""
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "models" / model / "config.pbtxt").read_text()
    body = "\n".join(line.split("#", 1)[0] for line in text.splitlines())
    found = {
        (m[0], m[1], tuple(int(d) for d in m[2].replace(" ", "").split(",")))
        for m in re.findall(r'name:\s*"(\w+)",\s*data_type:\s*(\w+),\s*dims:\s*\[([^\]]*)\]', body)
    }
    inputs, outputs = (LIDAR_INPUTS, LIDAR_OUTPUTS) if model == "lidar_detector" else (RADAR_INPUTS, RADAR_OUTPUTS)
    assert found == {(s.name, s.config_dtype, s.dims) for s in (*inputs, *outputs)}
    assert re.search(r"max_batch_size:\s*0\b", body)
    assert "KIND_CPU" in body
