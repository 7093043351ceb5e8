"""Model-side records reach the server log only from INFO up (each is a blocking stub-to-server round trip),
and ``finalize`` sends none (a record in flight at unload kept a stub from finalizing). A fake
``pb_utils.Logger`` stands in for the python backend."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest

from perception.modelkit import _triton


class _FakeLogger:
    sent: list[tuple[str, str]] = []  # noqa: RUF012 - reset by the fixture

    @classmethod
    def log_error(cls, msg: str) -> None:
        cls.sent.append(("error", msg))

    @classmethod
    def log_warn(cls, msg: str) -> None:
        cls.sent.append(("warn", msg))

    @classmethod
    def log_info(cls, msg: str) -> None:
        cls.sent.append(("info", msg))

    @classmethod
    def log_verbose(cls, msg: str) -> None:
        cls.sent.append(("verbose", msg))


class _FakePbUtils:
    Logger = _FakeLogger


@pytest.fixture
def package_logger() -> Iterator[logging.Logger]:
    """The ``perception`` logger as a stub would configure it; restored afterwards."""
    pkg = logging.getLogger("perception")
    saved = (pkg.level, pkg.propagate, list(pkg.handlers))
    _FakeLogger.sent = []
    yield pkg
    pkg.setLevel(saved[0])
    pkg.propagate = saved[1]
    pkg.handlers[:] = saved[2]


def _install(monkeypatch: pytest.MonkeyPatch, level: str | None) -> None:
    if level is None:
        monkeypatch.delenv(_triton.LOG_LEVEL_ENV, raising=False)
    else:
        monkeypatch.setenv(_triton.LOG_LEVEL_ENV, level)
    fake: Any = _FakePbUtils
    _triton._install_log_handler(fake)


def test_only_info_and_above_are_forwarded_by_default(
    package_logger: logging.Logger, monkeypatch: pytest.MonkeyPatch
) -> None:
    _install(monkeypatch, None)
    log = logging.getLogger("perception.modelkit")
    log.debug("stage timings")
    log.info("loaded")
    log.warning("odd input")
    log.error("broken")
    assert [kind for kind, _ in _FakeLogger.sent] == ["info", "warn", "error"]


def test_debug_is_forwarded_when_asked_for(package_logger: logging.Logger, monkeypatch: pytest.MonkeyPatch) -> None:
    _install(monkeypatch, "debug")
    logging.getLogger("perception.modelkit").debug("stage timings")
    assert _FakeLogger.sent == [("verbose", "stage timings")]


def test_a_bad_level_falls_back_to_info(package_logger: logging.Logger, monkeypatch: pytest.MonkeyPatch) -> None:
    _install(monkeypatch, "chatty")
    log = logging.getLogger("perception.modelkit")
    log.debug("dropped")
    log.info("kept")
    assert _FakeLogger.sent == [("info", "kept")]


def test_finalize_sends_nothing_to_the_server(package_logger: logging.Logger, monkeypatch: pytest.MonkeyPatch) -> None:
    _install(monkeypatch, "DEBUG")

    class Model(_triton.TritonModel):
        INPUTS = ()
        OUTPUTS = ()

        def run(self, inputs: Any, checkpoint: Any) -> Any:
            return {}

    Model().finalize()
    assert _FakeLogger.sent == []
