"""EmbeddedTriton against the real tritonserver: lifecycle, clean-up, start-up errors, orphans."""

from __future__ import annotations

import functools
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

import anyio
import numpy as np
import pytest
from server_helpers import shm_entries, stubs_with_prefix

from perception.errors import ConfigError, ConnectError, PerceptionError, ServerError
from perception.server import EmbeddedTriton, _embedded, describe_models, wait_for_server
from perception.server._health import http_get_json, http_ready
from perception.server._procs import pid_alive, process_group_members
from perception.triton import ClientOptions, TritonClient


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


@pytest.mark.triton
@pytest.mark.anyio
async def test_start_stop_leaves_no_process_and_no_shared_memory(echo_repo: Path, tmp_path: Path) -> None:
    # A leftover of a crashed earlier run (owner pid dead) must be removed by the next start.
    stale = Path("/dev/shm") / f"perception_{_dead_pid()}_deadbeef_leftover"
    stale.write_bytes(b"x")
    log_path = tmp_path / "out" / "tritonserver.log"
    with anyio.fail_after(90):
        async with EmbeddedTriton([echo_repo], log_path=log_path) as server:
            assert not stale.exists()
            pid = server.pid
            assert pid is not None and pid_alive(pid)
            assert server.grpc_url.startswith("127.0.0.1:")
            assert server.metrics_url.endswith("/metrics")
            prefix = server.shm_prefix
            assert prefix.startswith(f"perception_{os.getpid()}_")
            assert stubs_with_prefix(prefix), "the echo model should run in a python backend stub"
            assert shm_entries(prefix), "the python backend should name its regions with the prefix"
            await wait_for_server(server.grpc_url, timeout_s=5)
            await wait_for_server(server.http_url, timeout_s=5, protocol="http")
        assert server.pid is None
        assert not pid_alive(pid)
        assert process_group_members(pid) == []
        assert stubs_with_prefix(prefix) == []
        assert shm_entries(prefix) == []
        assert "successfully loaded 'echo'" in log_path.read_text()
        with pytest.raises(ServerError, match="not running"):
            _ = server.grpc_url


@pytest.mark.triton
@pytest.mark.anyio
async def test_a_normal_stop_exits_0_without_a_warning(
    echo_repo: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="perception.server")
    with anyio.fail_after(90):
        server = EmbeddedTriton([echo_repo])
        async with server:
            proc = server._proc
            log_path = server.log_path
            await wait_for_server(server.grpc_url, timeout_s=5)
    assert proc is not None and proc.returncode == 0
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []
    assert log_path is not None and not log_path.exists()  # a temporary log goes with a clean stop


@pytest.mark.triton
@pytest.mark.anyio
async def test_a_normal_stop_unloads_the_models_before_the_signal(
    echo_repo: Path, broken_repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Triton checks for live models once a second after a SIGTERM: with the models unloaded first, its
    first check finds none and it exits then, instead of a second later (judged from the server's own
    log, not the clock). A model that never loaded (listed without a state) is not waited for."""
    log_path = tmp_path / "server.log"
    monkeypatch.setattr(_embedded, "_UNLOAD_WAIT_S", 60.0)  # a wait held by the broken model would be plain
    with anyio.fail_after(150):
        server = EmbeddedTriton(
            [echo_repo, broken_repo],
            log_path=log_path,
            extra_args=["--log-verbose=1"],
            require_all_models=False,
            stop_timeout_s=120.0,
        )
        async with server:
            await wait_for_server(server.grpc_url, timeout_s=5)
            unloading = anyio.current_time()
        stopped = anyio.current_time()
    text = log_path.read_text()
    signalled = text.index("Signal (15) received")
    assert "/v2/repository/models/echo/unload" in text[:signalled]
    assert re.findall(r"Found (\d+) live models", text[signalled:])[:1] == ["0"], text[signalled:][-3000:]
    # the broken model did not hold the stop for the whole unload wait (a minute: not a speed check)
    assert stopped - unloading < 60.0, stopped - unloading


@pytest.mark.triton
@pytest.mark.anyio
async def test_a_refused_unload_still_stops_the_server_normally(
    echo_repo: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Unloading first is best effort: a model whose unload is refused is left to the SIGTERM."""
    real = _embedded.http_get_json

    async def refuse_unload(http_url: str, path: str, **kwargs: Any) -> Any:
        if path.endswith("/unload"):
            raise ConnectError(f"HTTP 400 from {path}: refused")
        return await real(http_url, path, **kwargs)

    monkeypatch.setattr(_embedded, "http_get_json", refuse_unload)
    caplog.set_level(logging.INFO, logger="perception.server")
    with anyio.fail_after(90):
        server = EmbeddedTriton([echo_repo], stop_timeout_s=4.0)  # the unload wait: 2 s
        async with server:
            proc = server._proc
            prefix = server.shm_prefix
    assert proc is not None and proc.returncode == 0
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []
    assert stubs_with_prefix(prefix) == [] and shm_entries(prefix) == []


@pytest.mark.triton
@pytest.mark.slow  # waits out the (short) exit timeout
@pytest.mark.anyio
async def test_a_stop_that_times_out_warns_with_the_log_tail_and_keeps_the_log(
    hung_finalize_repo: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="perception.server")
    with anyio.fail_after(120):
        server = EmbeddedTriton([hung_finalize_repo], stop_timeout_s=3.0)  # --exit-timeout-secs=1
        async with server:
            prefix = server.shm_prefix
            pid = server.pid
            log_path = server.log_path
    assert pid is not None and not pid_alive(pid)
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    stopped = [w for w in warnings if f"tritonserver pid {pid} stopped with exit code 1" in w]
    assert stopped, warnings
    assert "Exit timeout expired" in stopped[0]  # the log tail says why
    assert log_path is not None and log_path.exists()  # kept for the post-mortem
    assert str(log_path) in stopped[0]
    assert process_group_members(pid) == [] and stubs_with_prefix(prefix) == []
    assert shm_entries(prefix) == []
    log_path.unlink()


@pytest.mark.triton
@pytest.mark.anyio
async def test_broken_model_fails_start_with_the_log_excerpt(broken_repo: Path) -> None:
    with anyio.fail_after(90):
        server = EmbeddedTriton([broken_repo])
        with pytest.raises(ServerError) as info:
            await server.__aenter__()
    message = str(info.value)
    assert "exited during start-up" in message
    assert "TYPE_BOGUS" in message  # the parse error, not Triton's option tables
    assert "'broken'" in message
    assert server.pid is None
    assert stubs_with_prefix(server.shm_prefix) == []
    assert server.log_path is not None and server.log_path.exists()  # kept for the post-mortem
    server.log_path.unlink()


@pytest.mark.triton
@pytest.mark.anyio
async def test_a_port_in_use_is_named_or_retried(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    empty_repo = tmp_path / "empty"
    empty_repo.mkdir()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        # A port the caller chose: reported, not retried.
        with anyio.fail_after(60), pytest.raises(ServerError, match=f"port {port} already in use"):
            async with EmbeddedTriton([empty_repo], http_port=port, log_path=tmp_path / "failed.log"):
                pass
        # A free port picked by the server manager but grabbed by someone else first: retried.
        picks = iter([port])
        real_free_port = _embedded.free_port
        monkeypatch.setattr(_embedded, "free_port", lambda: next(picks, None) or real_free_port())
        with anyio.fail_after(60):
            async with EmbeddedTriton([empty_repo]) as server:
                assert str(port) not in server.grpc_url


_IPC_CRASH = "terminate called after throwing an instance of 'boost::interprocess::lock_exception'"


@pytest.mark.triton
@pytest.mark.anyio
@pytest.mark.parametrize(
    ("message", "abort", "retried"),
    [
        (_IPC_CRASH, True, True),  # the python backend's shared-memory IPC aborted: the server's crash
        ("terminate called after throwing an instance of 'std::bad_alloc'", True, False),  # another abort
        (_IPC_CRASH, False, False),  # the words without the abort
    ],
)
async def test_a_start_aborted_in_the_python_backend_s_shared_memory_is_retried_and_no_other_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, message: str, abort: bool, retried: bool
) -> None:
    """Seen once in a busy CI run: tritonserver aborted with ``boost::interprocess::lock_exception`` while its
    models loaded. The first attempt here is a process that writes those words into the server log and
    aborts (or exits); only that crash is retried, with fresh ports and shared-memory names."""
    empty_repo = tmp_path / "empty"
    empty_repo.mkdir()
    spawned: list[str] = []
    real_spawn = EmbeddedTriton._spawn

    def spawn(self: EmbeddedTriton, args: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
        spawned.append(self.shm_prefix)
        if len(spawned) == 1:
            ending = "os.abort()" if abort else "sys.exit(1)"
            args = [sys.executable, "-c", f"import os, sys; print({message!r}, flush=True); {ending}"]
        return real_spawn(self, args, env)

    monkeypatch.setattr(EmbeddedTriton, "_spawn", spawn)
    with anyio.fail_after(60):  # watchdog
        if retried:
            async with EmbeddedTriton([empty_repo]) as server:
                assert server.pid is not None
            assert len(spawned) == 2 and spawned[0] != spawned[1]
        else:
            with pytest.raises(ServerError, match="exited during start-up") as info:
                async with EmbeddedTriton([empty_repo], log_path=tmp_path / "failed.log"):
                    pass
            assert message in str(info.value)  # the log's words are in the error
            assert len(spawned) == 1


async def _echo_until_answered(client: TritonClient, data: np.ndarray) -> np.ndarray:
    """The echo model's answer, asking again while the server (restarting) cannot answer yet."""
    while True:
        try:
            result = await client.infer("echo", {"INPUT": data})
        except PerceptionError:
            await anyio.sleep(0.1)
            continue
        return np.asarray(result.outputs["OUTPUT"])


@pytest.mark.triton
@pytest.mark.anyio
async def test_a_server_that_crashes_is_restarted_on_its_ports_and_serves_its_clients_again(
    echo_repo: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Triton's python backend crashes now and then under load (upstream issue 8882; a SIGSEGV failed a
    busy test run here). The supervisor restarts a server that died on its own, on its ports: a client
    opened before the crash is answered again. What the dead server left (stubs, shared memory) is
    removed; a crash after the restarts allowed within the window (a crash loop) leaves it down, said."""
    caplog.set_level(logging.INFO, logger="perception.server")
    log_path = tmp_path / "tritonserver.log"
    data = np.arange(12, dtype=np.float32).reshape(3, 4)
    with anyio.fail_after(180):  # watchdog
        async with EmbeddedTriton([echo_repo], log_path=log_path) as server:
            async with TritonClient(ClientOptions(urls=(server.grpc_url,))) as client, anyio.create_task_group() as tg:
                first = await client.infer("echo", {"INPUT": data})
                np.testing.assert_array_equal(first.outputs["OUTPUT"], 2 * data)
                tg.start_soon(server.supervise, 1)
                url, pid, prefix = server.grpc_url, server.pid, server.shm_prefix
                assert pid is not None and stubs_with_prefix(prefix) and shm_entries(prefix)
                os.kill(pid, signal.SIGSEGV)  # as the crash seen
                while True:  # the supervisor restarts it
                    if server.restarts:
                        break
                    await anyio.sleep(0.05)
                assert server.crashes == 1 and server.running
                assert server.grpc_url == url and server.pid != pid
                assert not pid_alive(pid) and process_group_members(pid) == []
                assert stubs_with_prefix(prefix) == [] and shm_entries(prefix) == []
                assert server.shm_prefix != prefix
                np.testing.assert_array_equal(await _echo_until_answered(client, data), 2 * data)
                # the restart allowed within 10 minutes is used: the next crash leaves the server down, and
                # the watch ends
                pid = server.pid
                assert pid is not None
                prefix = server.shm_prefix
                os.kill(pid, signal.SIGKILL)
            assert server.crashes == 2 and server.restarts == 1 and not server.running
            assert process_group_members(pid) == [] and shm_entries(prefix) == []
        assert server.crash_logs == (log_path,)
    text = log_path.read_text()
    assert text.count("successfully loaded 'echo'") == 2  # both servers' output kept in the one log
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert any("died with signal SIGSEGV while serving (crash 1)" in m and str(log_path) in m for m in errors)
    assert any("died with signal SIGKILL while serving (crash 2)" in m for m in errors)
    assert any("not restarted: 1 restart(s) allowed within 600 s, 1 used (a crash loop)" in m for m in errors)
    assert any("restarted after its crash" in r.getMessage() for r in caplog.records)


@pytest.mark.triton
@pytest.mark.anyio
async def test_restarts_are_limited_within_their_window_only(echo_repo: Path) -> None:
    """A shift lasts hours: ``restarts`` bounds a crash loop (restarts within the window), not a rare crash.
    With a window of 0 s every restart is outside it, so one allowed restart serves every crash."""
    with anyio.fail_after(120):
        async with EmbeddedTriton([echo_repo]) as server, anyio.create_task_group() as tg:
            tg.start_soon(functools.partial(server.supervise, 1, window_s=0.0))
            for n in (1, 2, 3):
                pid = server.pid
                assert pid is not None
                os.kill(pid, signal.SIGKILL)
                while True:  # the supervisor restarts it
                    if server.restarts == n:
                        break
                    await anyio.sleep(0.05)
                assert server.running and server.crashes == n
            tg.cancel_scope.cancel()


@pytest.mark.triton  # enters EmbeddedTriton (no server: the spawn fails)
@pytest.mark.anyio
async def test_a_start_that_cannot_spawn_leaves_no_trace_folder_log_or_ports(
    echo_repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Popen failing (fork's EAGAIN, ENOMEM) left the trace folder and the temporary log behind, and
    # grpc_url answered the ports of a server that never ran. No server is started here.
    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))

    def no_fork(*args: Any, **kwargs: Any) -> subprocess.Popen[bytes]:
        raise OSError(11, "Resource temporarily unavailable")

    monkeypatch.setattr(subprocess, "Popen", no_fork)
    server = EmbeddedTriton([echo_repo], trace=True)
    with anyio.fail_after(60), pytest.raises(ServerError, match="cannot start tritonserver"):
        async with server:
            pass
    assert sorted(temp.iterdir()) == [] and server.trace_dir is None
    with pytest.raises(ServerError, match="not running"):
        server.grpc_url  # noqa: B018
    with anyio.fail_after(10):  # watchdog
        await server.stop()  # nothing to stop


@pytest.mark.triton
@pytest.mark.anyio
async def test_a_restart_that_fails_leaves_the_server_down_and_says_why(
    echo_repo: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="perception.server")
    with anyio.fail_after(90):
        async with EmbeddedTriton([echo_repo]) as server, anyio.create_task_group() as tg:
            pid, prefix = server.pid, server.shm_prefix
            assert pid is not None

            def no_spawn(self: EmbeddedTriton, args: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
                raise ServerError("cannot start tritonserver: [Errno 12] Cannot allocate memory", file=args[0])

            monkeypatch.setattr(EmbeddedTriton, "_spawn", no_spawn)
            tg.start_soon(server.supervise, 3)
            os.kill(pid, signal.SIGKILL)
        # the watch ended by itself (the task group did not wait out the watchdog)
        assert server.crashes == 1 and server.restarts == 0 and not server.running
    assert process_group_members(pid) == [] and shm_entries(prefix) == []
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert any("could not be restarted after its crash: cannot start tritonserver" in m for m in errors), errors


@pytest.mark.triton
@pytest.mark.anyio
async def test_a_stopped_server_is_no_crash_for_its_supervisor(
    echo_repo: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="perception.server")
    with anyio.fail_after(90):
        # the server stops first (exit 0), then the task group waits for the watch to end without a restart
        async with anyio.create_task_group() as tg, EmbeddedTriton([echo_repo]) as server:
            tg.start_soon(server.supervise, 3)
            await anyio.sleep(2 * _embedded._WATCH_INTERVAL_S)
    assert server.crashes == 0 and server.restarts == 0 and not server.running
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []


@pytest.mark.anyio
async def test_a_grpc_server_on_the_http_port_is_not_ready_and_no_traceback(triton: EmbeddedTriton) -> None:
    """A free port picked for the HTTP endpoint can be taken by another process's gRPC server before ours
    binds it (a busy test run saw ``BadStatusLine`` fail a start): the probe says not ready, ours then
    fails to bind and the start is retried on other ports."""
    with anyio.fail_after(30):
        assert await http_ready(triton.grpc_url) is False  # HTTP/2 frames, not an HTTP/1 status line
        with pytest.raises(ConnectError, match="cannot reach"):
            await http_get_json(triton.grpc_url, "/v2/health/ready")


@pytest.mark.anyio
async def test_wait_for_server_times_out_on_a_closed_port() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with anyio.fail_after(10):
        for protocol in ("grpc", "http"):
            with pytest.raises(ServerError, match="not ready after"):
                await wait_for_server(f"127.0.0.1:{port}", timeout_s=0.3, protocol=protocol)


@pytest.mark.anyio
@pytest.mark.parametrize("problem", ["missing", "file", "hidden"])
async def test_bad_repository_is_rejected_before_starting(tmp_path: Path, problem: str) -> None:
    with anyio.fail_after(10):  # watchdog
        repo = tmp_path / "repo"
        if problem == "file":
            repo.write_text("not a directory")
        elif problem == "hidden":
            (repo / ".ipynb_checkpoints").mkdir(parents=True)
        with pytest.raises(ConfigError) as info:
            async with EmbeddedTriton([repo]):
                pytest.fail("must not start")
        message = str(info.value)
        assert str(repo) in message
        assert "\n" not in message
        if problem == "hidden":
            assert ".ipynb_checkpoints" in message


_CHILD = textwrap.dedent(
    """
    import sys
    from pathlib import Path

    import anyio

    from perception.server import EmbeddedTriton

    async def main() -> None:
        async with EmbeddedTriton([Path(sys.argv[1])]) as server:
            print(server.pid, server.shm_prefix, flush=True)
            await anyio.sleep_forever()

    anyio.run(main)
    """
)


@pytest.mark.triton
def test_server_dies_with_its_sigkilled_owner_and_next_start_cleans_up(echo_repo: Path) -> None:
    owner = subprocess.Popen([sys.executable, "-c", _CHILD, str(echo_repo)], stdout=subprocess.PIPE, text=True)
    try:
        line = owner.stdout.readline() if owner.stdout else ""
        assert line, "the owner process failed to start its server"
        server_pid, prefix = int(line.split()[0]), line.split()[1]
        assert pid_alive(server_pid) and stubs_with_prefix(prefix)
        os.kill(owner.pid, signal.SIGKILL)
        owner.wait(10)
        deadline = time.monotonic() + 30
        while (pid_alive(server_pid) or stubs_with_prefix(prefix)) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not pid_alive(server_pid), "PDEATHSIG should have stopped the orphaned server"
        assert stubs_with_prefix(prefix) == []
    finally:
        if owner.poll() is None:
            owner.kill()
            owner.wait()
    # Whatever the orphan left (its own regions, or a client's) is removed by the next start.
    leftover = Path("/dev/shm") / f"perception_{owner.pid}_client_region"
    leftover.write_bytes(b"x")

    empty_repo = echo_repo.parent / "empty"
    empty_repo.mkdir()

    async def next_start() -> None:
        with anyio.fail_after(90):
            async with EmbeddedTriton([empty_repo]):
                assert shm_entries(f"perception_{owner.pid}_") == []

    anyio.run(next_start)


def test_ports_must_differ(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="must differ"):
        EmbeddedTriton([tmp_path], grpc_port=8001, http_port=8001)
    server = EmbeddedTriton([tmp_path], grpc_port=8001)
    with pytest.raises(ServerError, match="not running"):
        _ = server.grpc_url
    assert not server.running and server.pid is None


_SELF_DESCRIBING_MODEL = """\
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    @staticmethod
    def auto_complete_config(config):
        config.add_input({"name": "INPUT", "data_type": "TYPE_FP32", "dims": [-1]})
        config.add_output({"name": "OUTPUT", "data_type": "TYPE_FP32", "dims": [-1]})
        return config

    def execute(self, requests):
        out = []
        for r in requests:
            x = pb_utils.get_input_tensor_by_name(r, "INPUT").as_numpy()
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT", x)]))
        return out
"""


def test_auto_completion_is_kept_only_for_repositories_that_may_need_it(echo_repo: Path, tmp_path: Path) -> None:
    """Triton completes a model's configuration in a stub process of its own, one per model: the server
    skips it unless a model has no ``config.pbtxt`` or code that defines ``auto_complete_config``."""
    assert not _embedded._may_auto_complete(echo_repo)
    assert not _embedded._may_auto_complete(Path(__file__).resolve().parents[2] / "models")
    bare = tmp_path / "bare"
    (bare / "m" / "1").mkdir(parents=True)
    assert _embedded._may_auto_complete(bare)  # no config.pbtxt
    describing = tmp_path / "describing"
    (describing / "m" / "1").mkdir(parents=True)
    (describing / "m" / "config.pbtxt").write_text('backend: "python"\n')
    (describing / "m" / "1" / "model.py").write_text(_SELF_DESCRIBING_MODEL)
    assert _embedded._may_auto_complete(describing)


@pytest.mark.triton
@pytest.mark.anyio
async def test_a_model_that_describes_itself_is_served_with_its_own_contract(echo_repo: Path, tmp_path: Path) -> None:
    repo = tmp_path / "describing"
    (repo / "self_described" / "1").mkdir(parents=True)
    (repo / "self_described" / "config.pbtxt").write_text('backend: "python"\n')
    (repo / "self_described" / "1" / "model.py").write_text(_SELF_DESCRIBING_MODEL)
    with anyio.fail_after(90):
        async with EmbeddedTriton([echo_repo, repo]) as server:
            models = await describe_models(server.http_url, headers=server.http_control_headers)
    (model,) = [m for m in models if m.name == "self_described"]
    assert model.state == "READY", model
    assert [(t.name, t.dtype, t.dims) for t in model.inputs] == [("INPUT", "FP32", (-1,))]
    assert [(t.name, t.dtype, t.dims) for t in model.outputs] == [("OUTPUT", "FP32", (-1,))]
