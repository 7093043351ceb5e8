"""``perception bench`` assembles the session once, against the drive, and every variant runs it."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import anyio
import pytest

from perception.benchmark import _suite
from perception.benchmark._suite import variant_config
from perception.config import load_config
from perception.drives import DriveReader
from perception.scheduler import Session

ROOT = Path(__file__).resolve().parents[2]
DRIVE = ROOT / "replay_data" / "urban_seed7_10s.mcap"


class _Recorded:
    """Stands in for :class:`Runtime` in the suite: records what each variant's runtime is given."""

    given: ClassVar[list[tuple[Any, dict[str, Any]]]] = []

    def __init__(self, config: Any, **kwargs: Any) -> None:
        self.given.append((config, kwargs))

    async def __aenter__(self) -> _Recorded:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None


def test_every_variant_runs_the_session_assembled_against_the_drive(monkeypatch: pytest.MonkeyPatch) -> None:
    # The suite's runtimes were built as Runtime(config, rig=rig): the resolved config assembled again,
    # against a live vehicle's source (another metadata, the rig re-matched) instead of the drive's.
    with DriveReader(DRIVE, strict=False) as reader:
        session = Session.assemble(load_config(ROOT / "launch" / "replay.yaml"), reader.source)
    variants = {"fixed_2": variant_config(session.config, in_flight=2), "grpc": variant_config(session.config)}
    monkeypatch.setattr(_suite, "Runtime", _Recorded)
    _Recorded.given = []

    async def main() -> None:
        runtimes: Any = _suite._runtimes  # its signature changed: the old one took the rig
        with anyio.fail_after(30):  # watchdog
            async with runtimes(variants, session) as rts:
                assert set(rts) == set(variants)

    anyio.run(main)
    assert len(_Recorded.given) == 2
    for (given, kwargs), cfg in zip(_Recorded.given, variants.values(), strict=True):
        assert isinstance(given, Session), given
        assert given.source is session.source and given.rig == session.rig and given.config is cfg
        assert "rig" not in kwargs and "source" not in kwargs
        assert kwargs["fusion"] is None
