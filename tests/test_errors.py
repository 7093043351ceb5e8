"""The error hierarchy: context attributes are declared on the classes that carry them."""

from __future__ import annotations

import pickle

import pytest

import perception.errors as errors
from perception.errors import ConfigError, DriveDamagedError, InputError, PerceptionError, TransportError

ALL = [getattr(errors, name) for name in errors.__all__]


def test_a_misspelt_attribute_raises() -> None:
    err = InputError("bad tensor", sensor="cam_front", tensor="IMAGE")
    assert (err.sensor, err.tensor, err.model, err.frame) == ("cam_front", "IMAGE", None, None)
    with pytest.raises(AttributeError):
        err.sensr  # type: ignore[attr-defined]  # noqa: B018
    with pytest.raises(AttributeError):
        ConfigError("bad", file="a.yaml").topic  # type: ignore[attr-defined]  # noqa: B018


def test_a_context_keyword_the_class_does_not_carry_is_refused() -> None:
    with pytest.raises(TypeError, match="sensr"):
        InputError("bad tensor", sensr="cam_front")
    with pytest.raises(TypeError, match="offset"):
        errors.DriveError("bad", offset=3)  # only the damaged-drive error carries an offset


def test_subclasses_carry_their_bases_context() -> None:
    err = DriveDamagedError("truncated", file="d.mcap", offset=12)
    assert (err.file, err.offset, err.topic) == ("d.mcap", 12, None)
    assert set(TransportError._CONTEXT_KEYS) <= set(errors.SharedMemoryError._CONTEXT_KEYS)
    assert str(err) == "d.mcap: truncated (offset=12)"


@pytest.mark.parametrize("cls", ALL, ids=lambda c: c.__name__)
def test_every_declared_attribute_is_set_and_survives_pickling(cls: type[PerceptionError]) -> None:
    context = {key: f"v_{key}" for key in cls._CONTEXT_KEYS}
    err = cls("message", **context)
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is cls and str(back) == str(err)
    for key in cls._CONTEXT_KEYS:
        assert getattr(err, key) == getattr(back, key) == f"v_{key}"
    assert not hasattr(PerceptionError("bare"), "sensor")
