"""``perception bench``'s own model (the ``sink``) ships inside the package: an installed package needs no
``tests/`` folder. No server is started (the embedded server is replaced by a recorder)."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import pytest

import perception
import perception.server
from perception.benchmark import SINK_MODEL, bench_model_repository
from perception.benchmark._run import bench_server
from perception.config import RuntimeConfig, from_data

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    tomllib = pytest.importorskip("tomli")

PACKAGE = Path(perception.__file__).resolve().parent
REPO_ROOT = PACKAGE.parent
TESTS = REPO_ROOT / "tests"


def _model_files(repository: Path) -> list[Path]:
    return sorted(p for p in repository.rglob("*") if p.is_file() and "__pycache__" not in p.parts)


def test_the_bench_repository_lies_inside_the_package() -> None:
    repository = bench_model_repository()
    assert repository.is_relative_to(PACKAGE), repository
    assert not repository.is_relative_to(TESTS)
    assert (repository / SINK_MODEL / "config.pbtxt").is_file()
    assert (repository / SINK_MODEL / "1" / "model.py").is_file()


def test_pyproject_ships_every_file_of_the_bench_repository_as_package_data() -> None:
    pyproject = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
    patterns = pyproject["tool"]["setuptools"]["package-data"]["perception.benchmark"]
    package_dir = PACKAGE / "benchmark"
    shipped = {p for pattern in patterns for p in package_dir.glob(pattern) if p.is_file()}
    files = _model_files(bench_model_repository())
    assert files, "the bench model repository is empty"
    assert set(files) <= shipped, sorted(str(f) for f in set(files) - shipped)


def test_the_test_suite_serves_the_same_sink() -> None:
    """One definition: the test repository's ``sink`` is the package's, not a copy."""
    assert (TESTS / "triton_models" / SINK_MODEL).resolve() == (bench_model_repository() / SINK_MODEL).resolve()


class _RecordingServer:
    """Stands in for :class:`EmbeddedTriton`: records the repositories it would serve."""

    started: list[list[Path]] = []  # noqa: RUF012 - per-test record, reset by the test

    def __init__(self, repositories: Sequence[Path], **_: Any) -> None:
        self.repositories = [Path(p) for p in repositories]
        self.grpc_url = "127.0.0.1:1"

    async def __aenter__(self) -> _RecordingServer:
        # what Triton would see: every model directory of every repository, links resolved
        type(self).started.append([m.resolve() for repo in self.repositories for m in sorted(repo.iterdir())])
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None


@pytest.mark.anyio
async def test_bench_server_takes_the_sink_from_the_package(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    profile_models = tmp_path / "models"
    (profile_models / "lidar").mkdir(parents=True)
    config = from_data(
        RuntimeConfig,
        {
            "server": {"url": "embedded", "models": [str(profile_models)]},
            "sensors": [{"name": "lidar_top", "kind": "lidar", "model": "lidar"}],
            "trigger": {"sensor": "lidar_top"},
        },
    )
    _RecordingServer.started = []
    monkeypatch.setattr(perception.server, "EmbeddedTriton", _RecordingServer)

    with anyio.fail_after(30):
        async with bench_server(config) as server:
            assert server.embedded
            assert str(bench_model_repository() / SINK_MODEL) in server.repositories
    [served] = _RecordingServer.started
    sink = next(p for p in served if p.name == SINK_MODEL)
    assert sink == (bench_model_repository() / SINK_MODEL).resolve()
    assert sink.is_relative_to(PACKAGE) and not sink.is_relative_to(TESTS)
