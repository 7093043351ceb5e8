from __future__ import annotations

from perception.modelkit._testing import SleeperModel as TritonPythonModel  # noqa: F401
