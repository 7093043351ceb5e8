"""The sensor-kind registry and the one tensor contract: every committed model config states its kind's."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from perception.config import FusionConfig
from perception.errors import ConfigError, InputError
from perception.fusion import Fuser
from perception.kinds import (
    CAMERA,
    FusionRole,
    KindContract,
    SensorKindDef,
    TensorSpec,
    camera_input_size,
    fusion_role,
    kind_def,
    known_kinds,
    register_kind,
    unregister_kind,
)
from perception.types import ImageSample, SensorKind, SensorSpec, Transform

ROOT = Path(__file__).resolve().parents[2]
#: The committed models and the kind each serves.
MODELS = {"lidar_detector": "lidar", "radar_detector": "radar", "camera_detector": "camera", "yolox_nano": "camera"}


def _config_tensors(text: str, section: str) -> list[TensorSpec]:
    """The tensors of a ``config.pbtxt``'s ``input [...]`` or ``output [...]`` block (comments dropped)."""
    body = "\n".join(line.split("#", 1)[0] for line in text.splitlines())
    start = re.search(rf"^{section}\s*\[", body, re.M)
    assert start, f"no {section} block"
    depth, i = 1, start.end()
    while depth:
        depth += {"[": 1, "]": -1}.get(body[i], 0)
        i += 1
    block = body[start.end() : i - 1]
    return [
        TensorSpec.from_config({"name": m[0], "data_type": m[1], "dims": m[2].replace(" ", "").split(",")})
        for m in re.findall(r'name:\s*"(\w+)"\s*,?\s*data_type:\s*(\w+)\s*,?\s*dims:\s*\[([^\]]*)\]', block)
    ]


def test_built_in_kinds_are_registered() -> None:
    assert set(known_kinds()) >= {"camera", "lidar", "radar"}
    assert kind_def("camera") is CAMERA and CAMERA.contract.batched and CAMERA.is_image


def _test_models_by_kind() -> dict[str, str]:
    """``tests/triton_models`` models that state their kind (``parameters kind``): path -> kind."""
    out = {}
    for config in sorted((ROOT / "tests" / "triton_models").glob("*/config.pbtxt")):
        m = re.search(r'key:\s*"kind",\s*value:\s*\{\s*string_value:\s*"(\w+)"', config.read_text())
        if m:
            out[f"tests/triton_models/{config.parent.name}"] = m.group(1)
    return out


CONFIGS = {**{f"models/{m}": kind for m, kind in MODELS.items()}, **_test_models_by_kind()}


def test_every_committed_model_is_checked() -> None:
    assert sorted(p.name for p in (ROOT / "models").iterdir() if (p / "config.pbtxt").is_file()) == sorted(MODELS)
    assert {"tests/triton_models/sleepy_lidar", "tests/triton_models/sleepy_camera"} <= set(CONFIGS)


@pytest.mark.parametrize("model", sorted(CONFIGS))
def test_model_configs_state_their_kinds_contract(model: str) -> None:
    text = (ROOT / model / "config.pbtxt").read_text()
    contract = kind_def(CONFIGS[model]).contract
    inputs = [TensorSpec(t.name, t.dtype, t.dims) for t in contract.inputs]
    encoded = contract.encoded
    if model.startswith("models/") and encoded is not None:  # the committed camera models also decode
        inputs.append(TensorSpec(encoded.name, encoded.dtype, encoded.dims))
        # a request carries one or the other (decode: client or server): both optional
        block = text[text.index("\ninput [") : text.index("\noutput [")]
        assert block.count("optional: true") == 2, block
    assert _config_tensors(text, "input") == inputs, "inputs"
    have = {t.name: t for t in _config_tensors(text, "output")}
    for want in contract.outputs:
        assert want.name in have, f"{model} lacks output {want.name}"
        assert want.accepts(have[want.name]) is None, (model, want.name)
    batch = int(re.search(r"max_batch_size:\s*(\d+)", text).group(1))  # type: ignore[union-attr]
    assert (batch > 0) == contract.batched


def test_spellings_and_validation() -> None:
    spec = TensorSpec("IMAGE", "UINT16", (-1, -1, 1))
    assert spec.config_dtype == "TYPE_UINT16" and spec.numpy_dtype == np.uint16
    assert TensorSpec.from_config({"name": "IMAGE", "data_type": "TYPE_UINT16", "dims": ["-1", "-1", "1"]}) == spec
    with pytest.raises(InputError, match=r"IMAGE.*UINT16"):
        spec.validate(np.zeros((4, 4, 1), np.uint8))


def test_an_unknown_kind_is_a_clear_error() -> None:
    with pytest.raises(ConfigError, match=r"unknown sensor kind 'sonar' \(known kinds: .*lidar"):
        kind_def("sonar")


def test_fusion_rejects_a_kind_without_a_fusion_rule_at_start() -> None:
    defn = SensorKindDef(
        name="sonar_test",
        sample=ImageSample,
        contract=KindContract(inputs=(TensorSpec("IMAGE", "UINT8", (-1, -1, 1)),), outputs=CAMERA.contract.outputs),
        prepare=CAMERA.prepare,
        warmup=CAMERA.warmup,
    )
    register_kind(defn)
    try:
        rig = {"sonar0": SensorSpec("sonar0", "sonar_test", "sonar0", Transform(), "/sonar0")}
        with pytest.raises(InputError, match=r"sonar0: fusion has no rule for sensor kind 'sonar_test'"):
            Fuser(FusionConfig(), rig)
        with pytest.raises(ConfigError, match="already registered"):
            register_kind(SensorKindDef(**{**{f: getattr(defn, f) for f in defn.__slots__}, "default_model": "x"}))
    finally:
        unregister_kind("sonar_test")
    with pytest.raises(InputError, match="sonar0: unknown sensor kind 'sonar_test'"):
        Fuser(FusionConfig(), rig)


def test_fusion_role_of_a_kind_and_of_one_without_a_role() -> None:
    assert fusion_role("camera") is FusionRole.IMAGE_BOXES
    assert fusion_role(SensorKind.RADAR) is FusionRole.DOPPLER_POINTS
    assert fusion_role("sonar") is None  # not registered
    register_kind(replace(CAMERA, name="plain_camera", fusion=None))
    try:
        assert fusion_role("plain_camera") is None
    finally:
        unregister_kind("plain_camera")


# -------------------------------------------------------------------------------- a camera model's input size


def test_camera_input_size_reads_both_keys_as_triton_serves_them_or_plain() -> None:
    served = {"input_width": {"string_value": "640"}, "input_height": {"string_value": "384"}, "other": {}}
    assert camera_input_size(served) == (640, 384)
    assert camera_input_size({"input_width": 512, "input_height": " 512 "}) == (512, 512)
    assert camera_input_size({}) is None and camera_input_size(None) is None
    assert camera_input_size({"input_width": "640"}) is None  # a partial statement: full-size images
    with pytest.raises(ConfigError, match="input_height is not: state both") as info:
        camera_input_size({"input_width": "640"}, file="m/config.pbtxt", require_both=True)
    assert info.value.key == "input_height" and info.value.file == "m/config.pbtxt"


@pytest.mark.parametrize("bad", ["", "4.5", "0", "-416", "4097", "wide"])
def test_camera_input_size_names_the_bad_key(bad: str) -> None:
    with pytest.raises(ConfigError, match="positive integer") as info:
        camera_input_size({"input_width": "416", "input_height": bad}, file="m/config.pbtxt", model="m")
    assert info.value.key == "input_height" and str(info.value).startswith("m/config.pbtxt: input_height: ")
