"""Fixtures for the server tests: small model repositories built in tmp_path."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from server_helpers import TEST_MODELS

BROKEN_CONFIG = """\
backend: "python"
max_batch_size: 0
input [ { name: "INPUT", data_type: TYPE_FP32, dims: [ -1 ] } ]
output [ { name: "OUTPUT", data_type: TYPE_BOGUS, dims: [ 1 ] } ]
"""


@pytest.fixture
def echo_repo(tmp_path: Path) -> Path:
    """A repository with one python-backend model (``echo``): one stub process, fast to load."""
    repo = tmp_path / "echo_repo"
    repo.mkdir()
    shutil.copytree(TEST_MODELS / "echo", repo / "echo", ignore=shutil.ignore_patterns("__pycache__"))
    return repo


@pytest.fixture
def broken_repo(tmp_path: Path) -> Path:
    """A repository whose only model has an invalid config (unknown datatype)."""
    repo = tmp_path / "broken_repo"
    (repo / "broken" / "1").mkdir(parents=True)
    (repo / "broken" / "config.pbtxt").write_text(BROKEN_CONFIG)
    return repo


HUNG_FINALIZE_MODEL = """\
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT", np.zeros(1, np.float32))]) for _ in requests]

    def finalize(self):
        time.sleep(120)  # never finishes unloading: the server's exit timeout expires
"""


@pytest.fixture
def hung_finalize_repo(tmp_path: Path) -> Path:
    """A repository whose only model never finishes ``finalize``: a stop that cannot be clean."""
    repo = tmp_path / "hung_finalize_repo"
    (repo / "hung" / "1").mkdir(parents=True)
    (repo / "hung" / "config.pbtxt").write_text(BROKEN_CONFIG.replace("TYPE_BOGUS", "TYPE_FP32"))
    (repo / "hung" / "1" / "model.py").write_text(HUNG_FINALIZE_MODEL)
    return repo
