"""perception.modelkit's names are loaded on first use: a model's stub imports what it uses, not every detector."""

from __future__ import annotations

import importlib
import subprocess
import sys

import perception.modelkit as modelkit


def test_every_public_name_comes_from_the_module_the_package_says() -> None:
    assert set(modelkit._sources()) == set(modelkit.__all__)
    for name, module in modelkit._sources().items():
        assert getattr(modelkit, name) is getattr(importlib.import_module(module, "perception.modelkit"), name), name
    assert dir(modelkit) == sorted(modelkit.__all__)


def test_a_test_model_s_import_does_not_load_the_detectors() -> None:
    # The suite's test models (tests/triton_models: sleepers, echo, failer...) import their class from
    # perception.modelkit._testing; the package's import pulled in every detector (scipy, onnxruntime: ~0.6 s of
    # each backend stub's start-up). pb_utils is the backend's own module: a stand-in here.
    code = (
        "import sys, types; sys.modules['triton_python_backend_utils'] = types.ModuleType('pb');"
        "import perception.modelkit._testing;"
        "print(sorted(m for m in ('scipy', 'onnxruntime', 'perception.modelkit._lidar') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout.strip() == "[]", done.stdout + done.stderr
