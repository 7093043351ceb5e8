from __future__ import annotations

from perception.modelkit._testing import ToldModel as TritonPythonModel  # noqa: F401
