from __future__ import annotations

from perception.modelkit._testing import EchoModel as TritonPythonModel  # noqa: F401
