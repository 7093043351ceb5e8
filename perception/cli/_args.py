"""The argparse value types of every command, defined once.

Each is a ``type=`` for :meth:`argparse.ArgumentParser.add_argument`: it turns the option's text into
its value or raises :class:`argparse.ArgumentTypeError`, so a bad value is argparse's usage error
naming the option (``argument --seed: must be >= 0, got -1``, exit code 2), never a traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import math
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from perception.errors import ConfigError

if TYPE_CHECKING:
    from perception.replay import Rate

__all__ = [
    "int_within",
    "non_negative_float",
    "non_negative_int",
    "output_dir",
    "output_file",
    "percentile",
    "port",
    "port_or_zero",
    "positive_float",
    "positive_int",
    "rate",
    "speed",
    "within",
]


def int_within(low: int, high: int | None = None) -> Callable[[str], int]:
    """An integer ``>= low`` (and ``<= high`` when given)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
        if high is None and value < low:
            raise argparse.ArgumentTypeError(f"must be >= {low}, got {value}")
        if high is not None and not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be within {low}..{high}, got {value}")
        return value

    return parse


def within(low: float, high: float | None = None, *, low_open: bool = True) -> Callable[[str], float]:
    """A finite number ``> low`` (``>= low`` when not ``low_open``), and ``<= high`` when given."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        above = value > low if low_open else value >= low
        if not (math.isfinite(value) and above and (high is None or value <= high)):
            if high is None:
                raise argparse.ArgumentTypeError(f"must be {'>' if low_open else '>='} {low:g}, got {text}")
            bracket = "(" if low_open else "["
            raise argparse.ArgumentTypeError(f"must be within {bracket}{low:g}, {high:g}], got {text}")
        return value

    return parse


def output_dir(text: str) -> Path:
    """An output directory (``--out``): made when it does not exist, so neither it nor the nearest of its
    parents that exists may be a file (refused while parsing, not after the run that writes into it)."""
    path = Path(text)
    with _said(text):
        _made_under(text, path)
    return path


def output_file(text: str) -> Path:
    """An output file (``--trace-out``, ``--record``): not a directory; its directory made when it does not
    exist, so the nearest of its parents that exists may not be a file (refused while parsing)."""
    path = Path(text)
    with _said(text):
        if path.is_dir():
            raise argparse.ArgumentTypeError(f"{text} is a directory")
        _made_under(text, path.parent)
    return path


@contextlib.contextmanager
def _said(text: str) -> Iterator[None]:
    """A path the file system refuses to look at (a name too long...): the option's usage error."""
    try:
        yield
    except OSError as exc:
        raise argparse.ArgumentTypeError(f"{text}: {exc.strerror or exc}") from None


def _made_under(text: str, folder: Path) -> None:
    for at in (folder, *folder.parents):
        if at.exists():
            if not at.is_dir():
                raise argparse.ArgumentTypeError(
                    f"{text} exists and is not a directory" if str(at) == text else f"{text}: {at} is not a directory"
                )
            return


#: ``N >= 1``: counts (frames, workers, requests in flight...).
positive_int = int_within(1)
#: ``N >= 0``: seeds, retries, allowed changes.
non_negative_int = int_within(0)
#: ``X > 0``: durations, timeouts, budgets.
positive_float = within(0.0)
#: ``X >= 0``: tolerances, jitter.
non_negative_float = within(0.0, low_open=False)
#: A percentile in (0, 100].
percentile = within(0.0, 100.0)
#: A TCP port to listen on or connect to.
port = int_within(1, 65535)
#: A TCP port to listen on, 0 = pick a free one.
port_or_zero = int_within(0, 65535)


def rate(text: str) -> Rate:
    """A ``--rate``: :func:`perception.replay.parse_rate`."""
    from perception.replay import parse_rate  # on use: light commands do not import the replay

    try:
        return parse_rate(text)
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(exc.message) from None


def speed(text: str) -> float:
    """A playback speed factor (``ros play --rate``): a multiplier within :func:`rate`'s bounds, no name."""
    value = rate(text)
    if isinstance(value, str):
        raise argparse.ArgumentTypeError(f"must be a number, got {text!r}")
    return value
