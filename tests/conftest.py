"""Shared fixtures: one real embedded Triton server for the whole session.

``triton`` serves the repository's ``models/`` (when it holds any model) and ``tests/triton_models/``
(sleeper_20/30/40, failer, echo; see :mod:`perception.modelkit._testing`). It is started lazily by the
first test that asks for it and stopped at session end. Tests using it are marked ``triton``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn

import pytest
from anyio.from_thread import start_blocking_portal

from perception.server import EmbeddedTriton

REPO_ROOT = Path(__file__).resolve().parents[1]
TEST_MODELS = Path(__file__).resolve().parent / "triton_models"
PRODUCTION_MODELS = REPO_ROOT / "models"


def _has_models(repository: Path) -> bool:
    return repository.is_dir() and any(p.is_dir() for p in repository.iterdir())


def model_repositories() -> list[Path]:
    """The repositories the session server serves: production models (if any) and the test models."""
    return [*([PRODUCTION_MODELS] if _has_models(PRODUCTION_MODELS) else []), TEST_MODELS]


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    return "asyncio"


#: The session servers started, for the terminal summary's word on their crashes.
_SESSION_SERVERS: list[EmbeddedTriton] = []


@pytest.fixture(scope="session")
def triton(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedTriton]:
    """The session's embedded Triton server (use ``triton.grpc_url``).

    Triton itself crashes now and then under load (its python backend: upstream issue 8882; a SIGSEGV
    once took the session's server, and 27 later tests with it). As the runtime does, the server is
    restarted on its ports (:meth:`EmbeddedTriton.supervise`): a test in flight at the crash still fails,
    the later ones run on the new server, and the terminal summary names every crash and its log."""
    log_path = tmp_path_factory.mktemp("triton") / "tritonserver.log"
    server = EmbeddedTriton(model_repositories(), log_path=log_path, startup_timeout_s=120.0)
    # The portal's event-loop thread spawns the server and lives until the session ends, so the
    # server's PDEATHSIG (tied to the spawning thread) only fires if this process dies; a restart is
    # spawned from the same thread.
    with start_blocking_portal(backend="asyncio") as portal, portal.wrap_async_context_manager(server):
        _SESSION_SERVERS.append(server)
        supervision = portal.start_task_soon(server.supervise, 3)
        try:
            yield server
        finally:
            supervision.cancel()  # before the stop, which is no crash


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    for server in _SESSION_SERVERS:
        if server.crashes:
            logs = ", ".join(str(p) for p in server.crash_logs)
            terminalreporter.write_line(
                f"the session's Triton server crashed {server.crashes} time(s) and was restarted "
                f"{server.restarts} time(s); its log: {logs}",
                yellow=True,
            )


@pytest.fixture(autouse=True)
def _servers_only_in_triton_tests(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """A test that starts an embedded server in this process must be marked ``triton`` (so that
    ``-m "not triton"`` really starts none); tests that start one in a subprocess are marked by hand."""
    if request.node.get_closest_marker("triton") is not None:
        return

    def refuse(self: EmbeddedTriton, *args: object, **kwargs: object) -> NoReturn:
        raise AssertionError(f"{request.node.nodeid} starts an embedded Triton but is not marked 'triton'")

    # the spawn itself: checks that fail before starting a process (bad repository, ports) still run
    monkeypatch.setattr(EmbeddedTriton, "_spawn", refuse)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "triton" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.triton)
