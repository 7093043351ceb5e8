"""Tensor contracts: parsing Triton model configs and checking them against each sensor kind."""

from __future__ import annotations

import dataclasses

import anyio
import pytest

from perception.errors import ModelContractError
from perception.kinds import TensorSpec, kind_def
from perception.server import EmbeddedTriton
from perception.triton import ClientOptions, ModelContract, TritonClient, check_contract, parse_model_config


def _served(kind: str, **changes: object) -> ModelContract:
    """A served model that matches ``kind`` exactly (with a realistic max_batch_size), then ``changes``."""
    expected = kind_def(kind).contract
    contract = ModelContract(f"{kind}_model", 8 if expected.batched else 0, expected.inputs, expected.outputs)
    return dataclasses.replace(contract, **changes)  # type: ignore[arg-type]


def _replace_tensor(specs: tuple[TensorSpec, ...], name: str, **changes: object) -> tuple[TensorSpec, ...]:
    return tuple(dataclasses.replace(t, **changes) if t.name == name else t for t in specs)  # type: ignore[arg-type]


def test_the_three_sensor_kinds_contracts() -> None:
    assert kind_def("lidar").contract.input("POINTS") == TensorSpec("POINTS", "FP32", (-1, 4))
    assert kind_def("camera").contract.output("COUNT") == TensorSpec("COUNT", "INT32", (1,))
    assert kind_def("camera").contract.batched and not kind_def("radar").contract.batched


@pytest.mark.parametrize("kind", ["lidar", "radar", "camera"])
def test_matching_contract_passes(kind: str) -> None:
    check_contract(kind, _served(kind))


def test_extra_outputs_and_optional_inputs_are_allowed() -> None:
    served = _served("lidar")
    served = dataclasses.replace(
        served,
        inputs=(*served.inputs, TensorSpec("RING", "INT32", (-1,), optional=True)),
        outputs=(*served.outputs, TensorSpec("VELOCITIES", "FP32", (-1, 2))),
    )
    check_contract("lidar", served)


def test_wildcards_match_either_way() -> None:
    # The model accepts any column count where the runtime sends 4; radar models may fix their columns.
    lidar = _served("lidar")
    check_contract("lidar", dataclasses.replace(lidar, inputs=_replace_tensor(lidar.inputs, "POINTS", dims=(-1, -1))))
    radar = _served("radar")
    check_contract("radar", dataclasses.replace(radar, inputs=_replace_tensor(radar.inputs, "POINTS", dims=(-1, 5))))


@pytest.mark.parametrize(
    ("kind", "mutate", "tensor", "fragment"),
    [
        ("lidar", lambda c: dataclasses.replace(c, inputs=()), "POINTS", "lacks input POINTS"),
        ("lidar", lambda c: dataclasses.replace(c, outputs=c.outputs[:1]), "LABELS", "lacks output LABELS"),
        (
            "lidar",
            lambda c: dataclasses.replace(c, inputs=_replace_tensor(c.inputs, "POINTS", dtype="FP16")),
            "POINTS",
            "dtype is FP16, expected FP32",
        ),
        (
            "lidar",
            lambda c: dataclasses.replace(c, outputs=_replace_tensor(c.outputs, "BOXES", dims=(-1, 9))),
            "BOXES",
            "dim 1 is 9, expected 7",
        ),
        (
            "radar",
            lambda c: dataclasses.replace(c, outputs=_replace_tensor(c.outputs, "VELOCITY", dims=(-1,))),
            "VELOCITY",
            "rank is 1",
        ),
        (
            "camera",
            lambda c: dataclasses.replace(c, inputs=_replace_tensor(c.inputs, "IMAGE", dtype="FP32")),
            "IMAGE",
            "dtype is FP32, expected UINT8",
        ),
        (
            "camera",
            lambda c: dataclasses.replace(c, outputs=_replace_tensor(c.outputs, "BOXES", dims=(50, 4))),
            "BOXES",
            "dim 0 is 50, expected 100",
        ),
        (
            "lidar",
            lambda c: dataclasses.replace(c, inputs=(*c.inputs, TensorSpec("INTENSITY", "FP32", (-1,)))),
            "INTENSITY",
            "does not send: INTENSITY",
        ),
    ],
)
def test_each_mismatch_names_model_tensor_and_reason(kind, mutate, tensor, fragment) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ModelContractError) as info:
        check_contract(kind, mutate(_served(kind)))
    err = info.value
    assert err.model == f"{kind}_model"
    assert err.tensor == tensor
    assert fragment in str(err)
    assert str(err).startswith(f"{kind}_model: ")


def test_batching_must_agree() -> None:
    with pytest.raises(ModelContractError, match="max_batch_size > 0"):
        check_contract("camera", _served("camera", max_batch_size=0))
    with pytest.raises(ModelContractError, match="max_batch_size 0"):
        check_contract("lidar", _served("lidar", max_batch_size=4))


def test_unknown_kind() -> None:
    with pytest.raises(ModelContractError, match="unknown sensor kind 'sonar'"):
        check_contract("sonar", _served("lidar"))


def test_parse_model_config_json_form() -> None:
    # Protobuf's JSON: int64 dims as strings, zero max_batch_size omitted, optional flag, STRING type.
    config = {
        "config": {
            "name": "lidar_pp",
            "input": [{"name": "POINTS", "data_type": "TYPE_FP32", "dims": ["-1", "4"]}],
            "output": [
                {"name": "BOXES", "data_type": "TYPE_FP32", "dims": ["-1", "7"]},
                {"name": "NAMES", "data_type": "TYPE_STRING", "dims": ["-1"]},
                {"name": "EXTRA", "data_type": "TYPE_INT32", "dims": ["1"], "optional": True},
            ],
        }
    }
    contract = parse_model_config(config)
    assert contract == ModelContract(
        "lidar_pp",
        0,
        inputs=(TensorSpec("POINTS", "FP32", (-1, 4)),),
        outputs=(
            TensorSpec("BOXES", "FP32", (-1, 7)),
            TensorSpec("NAMES", "BYTES", (-1,)),
            TensorSpec("EXTRA", "INT32", (1,), optional=True),
        ),
    )
    assert parse_model_config({"name": "cam", "max_batch_size": 8}).max_batch_size == 8


def test_parse_model_config_counts_execution_instances() -> None:
    def instances(groups: object) -> int:
        return parse_model_config({"name": "m", "instance_group": groups}).instances

    assert parse_model_config({"name": "m"}).instances == 1
    assert instances([{"count": 2, "kind": "KIND_CPU"}]) == 2
    # JSON form: counts as strings or absent (1); a GPU group runs ``count`` instances on each listed GPU.
    assert instances([{"count": "2", "kind": "KIND_GPU", "gpus": [0, 1]}, {"kind": "KIND_CPU"}]) == 5
    assert instances([{"count": "many"}]) == 1  # odd, but not a contract matter: one warm-up request


def test_parse_model_config_rejects_malformed_entries() -> None:
    with pytest.raises(ModelContractError, match="malformed tensor entry"):
        parse_model_config({"name": "m", "input": [{"data_type": "TYPE_FP32"}]})
    with pytest.raises(ModelContractError, match="malformed tensor entry"):
        parse_model_config({"name": "m", "input": [{"name": "X", "dims": ["four"]}]})


@pytest.mark.anyio
async def test_contract_of_a_served_model(triton: EmbeddedTriton) -> None:
    with anyio.fail_after(20):
        async with TritonClient(ClientOptions(urls=(triton.grpc_url,))) as client:
            contract = await client.model_contract("echo")
    assert contract == ModelContract(
        "echo", 0, (TensorSpec("INPUT", "FP32", (-1, -1)),), (TensorSpec("OUTPUT", "FP32", (-1, -1)),)
    )
    with pytest.raises(ModelContractError, match="lacks input POINTS"):
        check_contract("lidar", contract)
