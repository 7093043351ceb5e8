"""Fixtures for the importer tests (builders live in ``import_fixtures``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from import_fixtures import Bag, NuScenes, write_bag, write_nuscenes

from perception.importers import ImportSummary, import_nuscenes, import_ros2


@pytest.fixture(scope="module")
def bag(tmp_path_factory: pytest.TempPathFactory) -> Bag:
    return write_bag(tmp_path_factory.mktemp("ros2"))


@pytest.fixture(scope="module")
def ros2_drive(bag: Bag) -> tuple[Path, ImportSummary]:
    out = bag.path.parent / "drive.mcap"
    return out, import_ros2(bag.path, bag.topic_map, out)


@pytest.fixture(scope="module")
def nuscenes(tmp_path_factory: pytest.TempPathFactory) -> NuScenes:
    return write_nuscenes(tmp_path_factory.mktemp("nuscenes"))


@pytest.fixture(scope="module")
def nuscenes_drive(nuscenes: NuScenes) -> tuple[Path, ImportSummary]:
    out = nuscenes.root.parent / "nuscenes.mcap"
    return out, import_nuscenes(nuscenes.root, nuscenes.scene, out, version=nuscenes.version)
