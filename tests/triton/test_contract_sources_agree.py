"""The client-side contracts (checked at runtime start) and the model-side ones (checked by the
reference models) are declared in two places so the client never imports the model stack; they
must state the same tensors."""

from __future__ import annotations

import pytest

from perception.modelkit import _contracts as kit
from perception.scheduler import OUTPUTS
from perception.triton import CONTRACTS

SIDES = {
    "lidar": (kit.LIDAR_INPUTS, kit.LIDAR_OUTPUTS),
    "radar": (kit.RADAR_INPUTS, kit.RADAR_OUTPUTS),
    "camera": (kit.CAMERA_INPUTS, kit.CAMERA_OUTPUTS),
}


@pytest.mark.parametrize("kind", sorted(SIDES))
def test_client_and_model_contracts_agree(kind: str) -> None:
    inputs, outputs = SIDES[kind]
    client = CONTRACTS[kind]
    as_client = lambda specs: [(s.name, s.data_type.removeprefix("TYPE_"), tuple(s.dims)) for s in specs]  # noqa: E731
    assert as_client(inputs) == [(t.name, t.dtype, tuple(t.dims)) for t in client.inputs]
    assert as_client(outputs) == [(t.name, t.dtype, tuple(t.dims)) for t in client.outputs]
    assert sorted(OUTPUTS[kind]) == sorted(t.name for t in client.outputs)


def test_camera_input_size_keys_agree() -> None:
    from perception.triton import CAMERA_INPUT_SIZE_KEYS

    assert CAMERA_INPUT_SIZE_KEYS == kit.CAMERA_INPUT_SIZE_KEYS
