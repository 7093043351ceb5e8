"""``parse_rate``: the text form of a replay :data:`~perception.replay.Rate` (``--rate``)."""

from __future__ import annotations

import pytest

from perception.errors import ConfigError
from perception.replay import parse_rate


def test_names_and_multipliers() -> None:
    assert parse_rate("max") == "max"
    assert parse_rate("lockstep") == "lockstep"
    assert parse_rate("1.0") == 1.0 and parse_rate("1000") == 1000.0 and parse_rate("0.25") == 0.25
    assert parse_rate("0.01") == 0.01


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("fast", "must be a number, 'max' or 'lockstep', got 'fast'"),
        ("0", r"must be within \[0.01, 1000\], got 0"),
        ("-1", r"must be within \[0.01, 1000\]"),
        ("1001", r"must be within \[0.01, 1000\]"),
        ("nan", r"must be within \[0.01, 1000\]"),
        ("inf", r"must be within \[0.01, 1000\]"),
        # a 10 s drive would have taken centuries: refused (a hundred times slower than recorded at most)
        ("1e-9", r"must be within \[0.01, 1000\], got 1e-9"),
        ("0.0099", r"must be within \[0.01, 1000\]"),
    ],
)
def test_bad_rates_are_config_errors(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as exc:
        parse_rate(text)
    assert exc.value.key == "rate"
