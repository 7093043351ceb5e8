"""Deterministic random streams.

Every consumer draws from its own ``numpy.random.Generator(PCG64(...))`` whose seed is a child of
``SeedSequence(seed)`` identified by a fixed *spawn key* (a stream id, then e.g. a tile or frame
index): the same key always yields the same stream, whatever else was drawn before, so a sensor's
frame ``k`` does not depend on other sensors, on the drive duration or on evaluation order. This is
``SeedSequence.spawn`` with explicit, stable child indices.
"""

from __future__ import annotations

import zlib

import numpy as np

__all__ = ["Stream", "name_key", "stream"]


class Stream:
    """Stream ids (first element of the spawn key)."""

    ROAD_FORWARD = 1
    ROAD_BACKWARD = 2
    EGO = 3
    LIGHT = 4
    GROUP = 10  # + group index, then tile index
    SCENERY = 40  # + side, then tile index
    CROSSWALK = 60  # then crosswalk index
    CLOCK = 100  # then sensor key: capture-time jitter
    SENSOR = 101  # then sensor key, frame index: measurement noise


#: Tile/frame indices may be negative; shift them into the non-negative range SeedSequence wants.
_OFFSET = 1 << 30


def name_key(name: str) -> int:
    """Stable integer key of a sensor name (CRC-32, independent of the rig's order)."""
    return zlib.crc32(name.encode("utf-8"))


def stream(seed: int, *key: int) -> np.random.Generator:
    """The generator of child stream ``key`` of ``seed``."""
    seq = np.random.SeedSequence(int(seed), spawn_key=tuple(int(k) + _OFFSET for k in key))
    return np.random.Generator(np.random.PCG64(seq))
