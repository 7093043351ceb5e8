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


def test_a_model_not_in_the_repository_is_refused_before_the_bench_server_starts(tmp_path: Path) -> None:
    # The bench's embedded server started, then the first variant waited the profile's start-up timeout
    # (90 s by default) for a model its repository lacks. Now refused first (no server is spawned: this
    # test is not marked 'triton', so a spawn would fail it).
    from perception.benchmark._run import bench_server
    from perception.config import RuntimeConfig, from_data
    from perception.errors import ConfigError

    repo = tmp_path / "models"
    (repo / "sleepy_radar").mkdir(parents=True)
    sensors = [
        {"name": "lidar_top", "kind": "lidar", "model": "no_such_lidar"},
        {"name": "radar_front", "kind": "radar", "model": "sleepy_radar"},
    ]
    data = {"server": {"url": "embedded", "models": [str(repo)]}, "sensors": sensors}
    config = from_data(RuntimeConfig, data)

    async def start() -> None:
        async with bench_server(config):
            raise AssertionError("the server started")

    with pytest.raises(ConfigError, match=r"model 'no_such_lidar' of sensor 'lidar_top' is not in this model"):
        anyio.run(start)
