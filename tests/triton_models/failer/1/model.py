from __future__ import annotations

from perception.modelkit._testing import FailerModel as TritonPythonModel  # noqa: F401
