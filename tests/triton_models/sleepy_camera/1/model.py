from __future__ import annotations

from perception.modelkit._testing import KindSleeperModel as TritonPythonModel  # noqa: F401
