"""The embedded Triton server: the real ``tritonserver`` of the nvidia-pytriton wheel as a child process.

Lifecycle guarantees:

* the server runs in its own session/process group, so stopping signals the server *and* its python
  backend stubs, and terminal Ctrl-C reaches only the owner, which then stops the server in order;
* ``PR_SET_PDEATHSIG`` makes the server receive SIGTERM if the owner dies (even by SIGKILL). The kernel
  ties this to the *spawning thread*, so the server is spawned from the event-loop thread that owns the
  context manager, never from a worker thread;
* the python backend's ``/dev/shm`` regions carry the prefix ``perception_<owner-pid>_<random>_``:
  they are removed at stop, and regions of owners that died are removed at the next start;
* a stop whose server exits 0 is silent. Any other exit status (the exit timeout expired, a crash,
  SIGKILL after ``stop_timeout_s``) is a warning quoting the end of the server log, which is then kept;
* :meth:`EmbeddedTriton.supervise` restarts a server that dies on its own (Triton's python backend
  crashes now and then under concurrent load: upstream issue triton-inference-server/server#8882) on the
  same ports, so its clients reconnect; the crash is an error quoting the log, which is kept.

Why a SIGTERM'd server sometimes exits 1 (Triton 2.51, the newest any nvidia-pytriton wheel ships): on
SIGTERM Triton waits for in-flight requests, unloads every model and gives up after
``--exit-timeout-secs`` with status 1 ("failed to stop server: Exit timeout expired"); the python stubs,
their server gone, then log "Non-graceful termination detected". Caught with gdb in that state (a
stress of start, requests with 20-300 ms deadlines, stop): the model left "live" had an idle, healthy
stub (waiting for its next command) and no server thread was unloading it -- something still held the
model. This matches the gRPC frontend's cancellation races fixed upstream after 2.51 (server PRs 7840,
8078, 8220): a client cancellation (or deadline) arriving while the response is being completed leaks the
response, which holds its model, so the model can never be unloaded. The runtime cancels late requests
by design, so at ``--rate max`` it meets that race now and then. What this class guarantees around it:
the stop is bounded (``stop_timeout_s``), nothing is left behind (processes, ``/dev/shm``), and the
warning quotes the log ("Exit timeout expired") so the failure is not silent.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType

import anyio

from perception.errors import ConfigError, ConnectError, ServerError
from perception.server._health import http_get_json, http_ready
from perception.server._locate import (
    TritonInstall,
    locate_triton,
    package_root,
    prepare_backend_dir,
    server_env,
)
from perception.server._procs import (
    cleanup_stale_shm,
    kill_orphaned_stubs,
    pdeathsig_preexec,
    process_group_members,
    remove_shm_prefix,
    signal_group,
)
from perception.triton import make_shm_prefix, trace_flags, wait_until_ready

__all__ = ["EmbeddedTriton", "check_model_repository", "check_models_held", "free_port", "read_log_tail"]

log = logging.getLogger(__name__)

_HOST = "127.0.0.1"
#: The header restricted Triton protocols need (:attr:`EmbeddedTriton.control_headers`), and those protocols.
CONTROL_HEADER = "perception-control"
_RESTRICTED = "model-repository,trace,logging"
_LOG_TAIL_LINES = 20
#: How much of a server log's end is read for why a start failed.
_LOG_END_BYTES = 256 * 1024
_ADDRESS_IN_USE = re.compile(r"already in use|address in use|failed to bind", re.IGNORECASE)
_START_ATTEMPTS = 3
#: Triton's python backend aborting in its shared-memory IPC while the models load: a crash of the server,
#: not the caller's to fix (seen once, in a test suite run beside two busy loops on a 2-core host, as
#: ``terminate called after throwing an instance of 'boost::interprocess::lock_exception'``).
#: A start that ends so is retried, as one whose free port was taken.
_IPC_ABORT = re.compile(r"terminate called after throwing an instance of '[^']*boost::interprocess::")
#: How often :meth:`EmbeddedTriton.supervise` looks at the server process.
_WATCH_INTERVAL_S = 0.25
#: :meth:`EmbeddedTriton.supervise` restarts a server at most ``restarts`` times within this long: a rare
#: crash is restarted however long the shift, a crash loop is left down.
RESTART_WINDOW_S = 600.0
#: Exit statuses of a normal stop (SIGTERM handled: 0; SIGTERM before Triton installed its handler).
_NORMAL_EXIT = (0, -signal.SIGTERM)
#: At most this long (and half the stop timeout) unloading the models before the SIGTERM (:meth:`_unload_models`).
_UNLOAD_WAIT_S = 5.0
#: States of a model in the repository index that a stop has to wait for.
_LIVE_STATES = frozenset({"READY", "LOADING", "UNLOADING"})


def free_port() -> int:
    """A TCP port that was free on 127.0.0.1 a moment ago (another process may still take it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((_HOST, 0))
        return int(sock.getsockname()[1])


def check_model_repository(path: Path) -> Path:
    """Validate a model repository before handing it to Triton; return its absolute path.

    Triton treats every subdirectory as a model, so hidden directories and ``__pycache__`` (which would
    fail to load and, with ``--exit-on-error``, stop the server) are rejected here with a clear message.
    """
    resolved = Path(path).expanduser().resolve()
    if not resolved.exists():
        raise ConfigError("model repository does not exist", file=path)
    if not resolved.is_dir():
        raise ConfigError("model repository is not a directory", file=path)
    if (resolved / "config.pbtxt").is_file():  # its version folders were served as models ('1': not ready)
        raise ConfigError(
            "is a model (it holds config.pbtxt), not a model repository: give the folder holding it, "
            f"{resolved.parent}",
            file=path,
        )
    strays = sorted(
        p.name for p in resolved.iterdir() if p.is_dir() and (p.name.startswith(".") or p.name == "__pycache__")
    )
    if strays:
        raise ConfigError(
            f"model repository holds non-model directories {strays}; Triton loads every subdirectory "
            "as a model, remove them",
            file=path,
        )
    return resolved


def check_models_held(repositories: Sequence[Path], models: Mapping[str, str]) -> None:
    """Refuse, before a server is started on ``repositories``, models (model -> the sensor that needs it)
    that none of them holds: Triton serves each subdirectory as a model, so such a model would never be
    ready and the start-up would wait out its whole timeout. A :class:`ConfigError` naming the model, its
    sensor and the repositories, with the models they hold."""
    held: set[str] = set()
    for repo in repositories:
        path = Path(repo).expanduser()
        if path.is_dir():
            held.update(p.name for p in path.iterdir() if p.is_dir() and not p.name.startswith("."))
    missing = [(model, sensor) for model, sensor in models.items() if model not in held]
    if missing:
        model, sensor = missing[0]
        more = f" (and {', '.join(repr(m) for m, _ in missing[1:])})" if len(missing) > 1 else ""
        which = "this model repository" if len(repositories) == 1 else "these model repositories"
        raise ConfigError(
            f"model {model!r}{more} of sensor {sensor!r} is not in {which} "
            f"(models there: {', '.join(sorted(held)) or 'none'})",
            file=", ".join(str(r) for r in repositories),
        )


#: Log lines that say nothing about why a start failed: CPU-only CUDA notices, table art, table headers.
_NOISE = re.compile(
    r"^\s*$|^[|+]|\] $|CudaDriverHelper|pinned memory pool|CUDA memory pool|CUDA driver|NVML|DCGM"
    r"|Collecting CPU metrics"
)
#: glog error lines (``E1202 10:30:40.038511 ...``), library errors and the final ``error: ...``.
_ERROR = re.compile(r"^E\d{4} |ERROR|^error:")


def read_log_tail(path: Path, lines: int = _LOG_TAIL_LINES, max_bytes: int = _LOG_END_BYTES) -> str:
    """Why a server failed, from its log: its error lines, then its last meaningful lines (Triton's
    option/backend tables and CPU-only CUDA notices skipped), ``lines`` lines at most."""
    try:
        text = _log_end(path, max_bytes)
    except OSError as exc:
        return f"<cannot read {path}: {exc}>"
    kept = [line for line in text.splitlines() if not _NOISE.search(line)]
    if not kept:
        return "<empty log>"
    errors = [line for line in kept if _ERROR.search(line)][-(lines // 2) :]
    tail = [line for line in kept[-lines:] if line not in errors][-(lines - len(errors)) :]
    return "\n".join([*errors, *(["..."] if errors and tail else []), *tail])


def _log_end(path: Path, max_bytes: int = _LOG_END_BYTES) -> str:
    """The last ``max_bytes`` of the log at ``path``, decoded (undecodable bytes replaced)."""
    with path.open("rb") as fh:
        fh.seek(0, os.SEEK_END)
        fh.seek(max(0, fh.tell() - max_bytes))
        return fh.read().decode(errors="replace")


def _log_matches(path: Path | None, pattern: re.Pattern[str]) -> bool:
    """Whether the end of the log at ``path`` (:func:`_log_end`) matches ``pattern``; False when unreadable."""
    if path is None:
        return False
    try:
        return pattern.search(_log_end(path)) is not None
    except OSError:
        return False


class _Exited(Exception):
    """Internal: the server process exited while its start was awaited (ends the readiness wait)."""


class _StartFailed(ServerError):
    """Internal: one start attempt failed; ``ports_in_use`` are the ports another process held;
    ``ipc_abort``: the server aborted in the python backend's shared-memory IPC (:data:`_IPC_ABORT`)."""

    def __init__(
        self, message: str, *, address_in_use: bool, ports_in_use: Sequence[int], ipc_abort: bool = False
    ) -> None:
        super().__init__(message)
        self.address_in_use = address_in_use
        self.ports_in_use = tuple(ports_in_use)
        self.ipc_abort = ipc_abort


class EmbeddedTriton:
    """Run the nvidia-pytriton ``tritonserver`` for the duration of an ``async with`` block.

    ``__aenter__`` starts the server on the given model repositories and returns once it is ready (all
    models loaded); a failure raises :class:`ServerError` quoting the end of the server log. With
    ``require_all_models=False`` a model that fails to load does not fail the start (the server is ready
    once every model was tried; see :func:`describe_models` for the failures). Models are
    served in explicit control mode (all loaded at start), so they can be (un)loaded at runtime through
    the repository API. Ports left ``None`` are picked free (with a retry if another process grabs one
    first; a start that Triton's python backend aborts is retried too: :data:`_IPC_ABORT`). ``__aexit__``
    stops the server (SIGTERM, then SIGKILL after ``stop_timeout_s``), waits until every process of its
    group (the python backend stubs) is gone and removes its shared memory.

    The server listens on 127.0.0.1 only. ``grpc_url`` / ``http_url`` are ``host:port`` strings as
    tritonclient expects them; ``metrics_url`` is the full Prometheus URL.
    """

    def __init__(
        self,
        model_repositories: Sequence[Path],
        *,
        grpc_port: int | None = None,
        http_port: int | None = None,
        metrics_port: int | None = None,
        log_path: Path | None = None,
        startup_timeout_s: float = 60.0,
        extra_args: Sequence[str] = (),
        stop_timeout_s: float = 15.0,
        require_all_models: bool = True,
        trace: bool = False,
    ) -> None:
        if isinstance(model_repositories, (str, Path)):
            model_repositories = [Path(model_repositories)]
        self._repositories = tuple(Path(p) for p in model_repositories)
        self._requested_ports = (grpc_port, http_port, metrics_port)
        chosen = [p for p in self._requested_ports if p is not None]
        if len(set(chosen)) != len(chosen):
            raise ConfigError(f"the gRPC, HTTP and metrics ports must differ, got {chosen}", key="ports")
        self._ports: tuple[int, int, int] | None = None
        self._user_log_path = Path(log_path) if log_path is not None else None
        self._log_path: Path | None = self._user_log_path
        self._startup_timeout_s = startup_timeout_s
        self._stop_timeout_s = stop_timeout_s
        self._extra_args = tuple(extra_args)
        self._require_all_models = require_all_models
        self._shm_prefix = make_shm_prefix()
        self._control_secret = secrets.token_hex(16)
        self._proc: subprocess.Popen[bytes] | None = None
        self._trace = trace
        self._trace_dir: Path | None = None
        #: What a restart needs: the install, backend directory, repositories and environment of the start.
        self._launch: tuple[TritonInstall, Path, list[Path], dict[str, str]] | None = None
        self._stopping = False
        self._crash_logs: list[Path | None] = []  # one per crash: its server's log, kept
        self._reaped: subprocess.Popen[bytes] | None = None  # the last crashed server, handled
        self._restarts = 0

    # ------------------------------------------------------------------ properties

    def _require_ports(self) -> tuple[int, int, int]:
        if self._ports is None:
            raise ServerError("the embedded Triton server is not running")
        return self._ports

    @property
    def grpc_url(self) -> str:
        """``127.0.0.1:PORT`` of the gRPC endpoint."""
        return f"{_HOST}:{self._require_ports()[0]}"

    @property
    def http_url(self) -> str:
        """``127.0.0.1:PORT`` of the HTTP/REST endpoint (no scheme, as tritonclient.http expects)."""
        return f"{_HOST}:{self._require_ports()[1]}"

    @property
    def metrics_url(self) -> str:
        """``http://127.0.0.1:PORT/metrics``: the Prometheus endpoint."""
        return f"http://{_HOST}:{self._require_ports()[2]}/metrics"

    @property
    def log_path(self) -> Path | None:
        """The server log (stdout + stderr of ``tritonserver``)."""
        return self._log_path

    @property
    def pid(self) -> int | None:
        """Pid of the running ``tritonserver`` (also its process-group id), ``None`` when stopped."""
        return self._proc.pid if self._proc is not None and self._proc.poll() is None else None

    @property
    def running(self) -> bool:
        """True while the server process is alive (False before start, after stop, or if it died)."""
        return self.pid is not None

    @property
    def control_headers(self) -> dict[str, str]:
        """The gRPC header that model control (load/unload), trace and logging calls need on this server
        (``TritonClient.load_model(name, headers=...)``; over HTTP the header is ``perception-control``):
        a secret of this process, so other local users cannot load a model (which runs code as this user)."""
        return {f"triton-grpc-protocol-{CONTROL_HEADER}": self._control_secret}  # gRPC's form of the header

    @property
    def http_control_headers(self) -> dict[str, str]:
        """:attr:`control_headers` for the HTTP endpoint (the repository index, model control)."""
        return {CONTROL_HEADER: self._control_secret}

    @property
    def shm_prefix(self) -> str:
        """Name prefix of every ``/dev/shm`` region the server's python backend creates."""
        return self._shm_prefix

    @property
    def trace_dir(self) -> Path | None:
        """With ``trace=True``, the directory of Triton's per-request trace files while the server runs
        (:class:`perception.triton.TraceReader` reads it); removed at stop."""
        return self._trace_dir

    @property
    def model_repositories(self) -> tuple[Path, ...]:
        return self._repositories

    @property
    def crashes(self) -> int:
        """How many times the server died on its own: the deaths :meth:`supervise` handled, and one it has
        not seen yet (or that nothing supervises)."""
        return len(self._crash_logs) + self._unseen_crash()

    @property
    def crash_logs(self) -> tuple[Path, ...]:
        """The logs of the servers that crashed (kept; a log given at construction holds them all)."""
        logs = [*self._crash_logs, *([self._log_path] if self._unseen_crash() else [])]
        return tuple(dict.fromkeys(p for p in logs if p is not None))

    def _unseen_crash(self) -> bool:
        proc = self._proc
        return proc is not None and proc is not self._reaped and not self._stopping and proc.poll() is not None

    @property
    def restarts(self) -> int:
        """How many times :meth:`supervise` restarted it (Triton's statistics start again from 0 each time)."""
        return self._restarts

    # ------------------------------------------------------------------ lifecycle

    async def __aenter__(self) -> EmbeddedTriton:
        if self._proc is not None:
            raise ServerError("the embedded Triton server is already running")
        if not self._repositories:
            raise ConfigError("no model repository given")
        repositories = [check_model_repository(p) for p in self._repositories]
        install = locate_triton()
        backend_dir = await anyio.to_thread.run_sync(prepare_backend_dir, install)
        await anyio.to_thread.run_sync(kill_orphaned_stubs)  # before their regions go
        await anyio.to_thread.run_sync(cleanup_stale_shm)
        env = server_env(install)
        self._stopping, self._restarts = False, 0
        self._crash_logs.clear()
        self._launch = (install, backend_dir, repositories, env)
        await self._start_attempts(None, "starting")
        return self

    async def _start_attempts(self, ports: tuple[int, int, int] | None, doing: str) -> None:
        """:meth:`_start`, retried (:data:`_START_ATTEMPTS` in all, fresh shared-memory names each time) after
        Triton's python backend aborted (:data:`_IPC_ABORT`) and, for ports picked free here, after one
        was taken before the server bound it. ``ports``: those of a restart, kept (its clients' URLs)."""
        assert self._launch is not None
        install, backend_dir, repositories, env = self._launch
        requested = self._requested_ports if ports is None else ports
        for attempt in range(1, _START_ATTEMPTS + 1):
            self._shm_prefix = make_shm_prefix()
            self._ports = self._pick_ports() if ports is None else ports
            try:
                await self._start(install, backend_dir, repositories, env)
            except _StartFailed as exc:
                # A free port picked here can be taken by another process before the server binds it:
                # retry with new ones. A port the caller chose (or a restart's) is not for us to change.
                chosen = [p for p in exc.ports_in_use if p in requested]
                unknown = not exc.ports_in_use and None not in requested
                port_taken = exc.address_in_use and not chosen and not unknown
                if not (port_taken or exc.ipc_abort) or attempt == _START_ATTEMPTS:
                    busy = ", ".join(str(p) for p in exc.ports_in_use)
                    prefix = f"port {busy} already in use; " if exc.ports_in_use else ""
                    raise ServerError(prefix + exc.message) from None
                if exc.ipc_abort:
                    log.warning("tritonserver aborted in the python backend's shared memory while %s, retrying", doing)
                else:
                    log.warning("port %s was taken before tritonserver bound it, retrying", exc.ports_in_use)
                if self._user_log_path is None and self._log_path is not None:
                    self._log_path.unlink(missing_ok=True)
            else:
                return
        raise AssertionError("unreachable")

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    def _pick_ports(self) -> tuple[int, int, int]:
        picked: list[int] = []
        for requested in self._requested_ports:
            port = requested
            while port is None or (requested is None and (port in picked or port in self._requested_ports)):
                port = free_port()
            picked.append(port)
        return picked[0], picked[1], picked[2]

    def _args(self, install: TritonInstall, backend_dir: Path, repositories: Sequence[Path]) -> list[str]:
        grpc_port, http_port, metrics_port = self._require_ports()
        args = [str(install.binary)]
        args += [f"--model-repository={repo}" for repo in repositories]
        args += [
            f"--backend-directory={backend_dir}",
            "--model-control-mode=explicit",
            "--load-model=*",
            # Model control (load/unload: a model runs code as this user), tracing and logging settings
            # need this server's own header: the runtime never uses them, any other local user cannot.
            f"--grpc-restricted-protocol={_RESTRICTED}:{CONTROL_HEADER}={self._control_secret}",
            f"--http-restricted-api={_RESTRICTED}:{CONTROL_HEADER}={self._control_secret}",
            f"--grpc-address={_HOST}",
            f"--grpc-port={grpc_port}",
            f"--http-address={_HOST}",
            f"--http-port={http_port}",
            f"--metrics-address={_HOST}",
            f"--metrics-port={metrics_port}",
            "--allow-gpu-metrics=false",
            f"--backend-config=python,shm-region-prefix-name={self._shm_prefix}",
            *(
                ("--exit-on-error=true",)
                if self._require_all_models
                else ("--exit-on-error=false", "--strict-readiness=false")
            ),
            f"--exit-timeout-secs={max(1, int(self._stop_timeout_s) - 2)}",
            "--log-verbose=0",
            *(() if any(map(_may_auto_complete, repositories)) else ("--disable-auto-complete-config",)),
        ]
        if self._trace:  # every request's timestamps, one file per request (perception.triton.TraceReader)
            if self._trace_dir is None:  # a restarted server traces into its predecessor's directory
                self._trace_dir = Path(tempfile.mkdtemp(prefix="perception-triton-trace-"))
            args += trace_flags(self._trace_dir / "trace.json")
        return [*args, *self._extra_args]

    def _open_log(self) -> int:
        if self._user_log_path is not None:
            self._user_log_path.parent.mkdir(parents=True, exist_ok=True)
            self._log_path = self._user_log_path
            # a restarted server writes after its crashed predecessor: the crash stays in the log
            mode = os.O_APPEND if self._crash_logs else os.O_TRUNC
            return os.open(self._log_path, os.O_WRONLY | os.O_CREAT | mode, 0o644)
        fd, name = tempfile.mkstemp(prefix="perception-tritonserver-", suffix=".log")
        self._log_path = Path(name)
        return fd

    def _spawn(self, args: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
        # Deliberately synchronous and called on the event-loop thread: PDEATHSIG follows this thread.
        log_fd = self._open_log()
        try:
            return subprocess.Popen(
                args,
                stdin=subprocess.DEVNULL,
                stdout=log_fd,
                stderr=subprocess.STDOUT,
                env=env,
                # The stub's sys.path starts with its cwd: make that the root of the running `perception`
                # so model.py imports the same perception.modelkit as this process.
                cwd=package_root(),
                start_new_session=True,
                umask=0o077,  # files it creates: owner-only (the python backend sets its /dev/shm regions 0644)
                preexec_fn=pdeathsig_preexec(signal.SIGTERM),  # noqa: PLW1509  # prctl only, no locks
                close_fds=True,
            )
        except OSError as exc:
            if self._user_log_path is None and self._log_path is not None:
                self._log_path.unlink(missing_ok=True)  # empty: the error does not point to it
                self._log_path = None
            raise ServerError(f"cannot start tritonserver: {exc}", file=args[0]) from exc
        finally:
            os.close(log_fd)

    async def _start(
        self,
        install: TritonInstall,
        backend_dir: Path,
        repositories: Sequence[Path],
        env: dict[str, str],
    ) -> None:
        args = self._args(install, backend_dir, repositories)
        log.debug("starting %s", " ".join(args))
        try:
            self._proc = proc = self._spawn(args, env)
        except ServerError:
            if self._proc is None:  # no server ran (a restart's are its supervisor's): nothing of it stays
                self._ports = None
                self._remove_trace_dir()
            raise
        log.info("tritonserver pid %d starting (log: %s)", proc.pid, self._log_path)
        try:
            failure = await self._wait_ready(proc)
        except BaseException:
            await self.stop()
            raise
        if failure is not None:
            ports = self._require_ports()
            await self._shutdown(failed_start=True)
            tail = read_log_tail(self._log_path) if self._log_path else ""
            in_use_lines = [line for line in tail.splitlines() if _ADDRESS_IN_USE.search(line)]
            raise _StartFailed(
                f"{failure}; from {self._log_path}:\n{tail}",
                address_in_use=bool(in_use_lines),
                ports_in_use=[p for p in ports if any(re.search(rf":{p}\b", line) for line in in_use_lines)],
                ipc_abort=proc.returncode == -signal.SIGABRT and _log_matches(self._log_path, _IPC_ABORT),
            )
        log.info("tritonserver ready: grpc %s, http %s, metrics %s", self.grpc_url, self.http_url, self.metrics_url)

    async def _wait_ready(self, proc: subprocess.Popen[bytes]) -> str | None:
        """None when ready; otherwise why the server is not."""

        async def problem() -> str | None:
            code = proc.poll()
            if code is not None:
                raise _Exited(f"tritonserver exited during start-up with {_describe_exit(code)}")
            return None if await http_ready(self.http_url, timeout_s=1.0) else "not ready"

        try:
            ready, _ = await wait_until_ready(problem, self._startup_timeout_s)
        except _Exited as exc:
            return str(exc)
        return None if ready else f"tritonserver not ready after {self._startup_timeout_s:g} s"

    async def stop(self) -> None:
        """Stop the server and clean up after it (processes, shared memory, temporary log); idempotent.
        Shielded from cancellation: the server never outlives a cancelled owner."""
        self._stopping = True
        await self._shutdown(failed_start=False)

    async def supervise(self, restarts: int, *, window_s: float = RESTART_WINDOW_S) -> None:
        """Watch the running server until cancelled or stopped; when it dies on its own, restart it, at
        most ``restarts`` times within any ``window_s`` (10 minutes by default).

        A server that dies on its own is a crash of Triton: its python backend is known to crash now and
        then under concurrent load (``boost::interprocess::lock_exception``, ``std::bad_alloc`` or a
        segmentation fault: upstream issue triton-inference-server/server#8882, open). Each crash is an
        error quoting the end of the server log, which is kept. The dead server's remaining processes
        (its python backend stubs) are killed and its shared memory removed, then a new server starts on
        the **same ports**, so every client reconnects by itself (the python backend gets a new
        shared-memory prefix, the log goes on in the same file when one was given). Triton's statistics
        start again from 0 in a restarted server (:attr:`restarts`).

        Returns (leaving the server down) when it crashes again after ``restarts`` restarts within the
        window (a crash loop: restarting it again would only crash it again) or when a restart fails,
        with an error saying so; a client then finds no server, as after any crash. Run it in a task of
        the server's owner and cancel that task before the server is stopped."""
        recent: collections.deque[float] = collections.deque()  # times of the restarts within the window
        while True:
            proc = self._proc
            if proc is None or self._stopping:
                return
            if proc.poll() is None:
                await anyio.sleep(_WATCH_INTERVAL_S)
                continue
            await self._reap_crashed(proc)
            now = anyio.current_time()
            while recent and now - recent[0] > window_s:
                recent.popleft()
            if len(recent) >= restarts:
                log.error(
                    "tritonserver is not restarted: %d restart(s) allowed within %g s, %d used (a crash loop)",
                    restarts, window_s, len(recent),
                )  # fmt: skip
                await self._shutdown(failed_start=True)
                return
            recent.append(now)
            try:
                await self._restart()
            except (ServerError, OSError) as exc:  # OSError: its log could not be opened
                log.error("tritonserver could not be restarted after its crash: %s", exc)
                await self._shutdown(failed_start=True)  # what a failed attempt left (nothing, mostly)
                return

    async def _reap_crashed(self, proc: subprocess.Popen[bytes]) -> None:
        """After the server died on its own: say so (the log is kept), kill what is left of its process
        group (its stubs) and remove its shared memory; the ports stay this server's, for the restart."""
        self._crash_logs.append(self._log_path)
        self._reaped = proc
        where = f"; its log is kept at {self._log_path}" if self._log_path is not None else ""
        tail = f":\n{read_log_tail(self._log_path)}" if self._log_path is not None else ""
        log.error(
            "tritonserver pid %d died with %s while serving (crash %d)%s%s",
            proc.pid, _describe_exit(proc.returncode), self.crashes, where, tail,
        )  # fmt: skip
        with anyio.CancelScope(shield=True):
            signal_group(proc.pid, signal.SIGKILL)  # the stubs of a dead server serve nobody
            if not await _wait_group_gone(proc.pid, 5.0):
                log.error("processes of the crashed tritonserver group %d survive SIGKILL", proc.pid)
            removed = remove_shm_prefix(self._shm_prefix)
            if removed:
                log.debug("removed shared memory left by the crashed server: %s", removed)
        if self._user_log_path is None:
            self._log_path = None  # the crash's temporary log is kept; the restart opens a new one

    async def _restart(self) -> None:
        """Start a new server on the ports of the one that crashed (retried as a start is)."""
        assert self._ports is not None
        await self._start_attempts(self._ports, "restarting")
        self._restarts += 1
        log.warning(
            "tritonserver restarted after its crash: pid %d on %s (restart %d)", self.pid, self.grpc_url, self._restarts
        )

    async def _shutdown(self, *, failed_start: bool) -> None:
        # After a failed start the log is kept (the error points to it) and the exit status is expected.
        keep_log = failed_start
        proc = self._proc
        if proc is None:
            return
        with anyio.CancelScope(shield=True):
            try:
                code = await self._terminate(proc, unload_first=not failed_start)
                if code not in _NORMAL_EXIT and not failed_start:
                    # A real failure: say why, from the log, and keep the log for the post-mortem.
                    keep_log = True
                    where = f"; from {self._log_path}" if self._log_path is not None else ""
                    tail = f":\n{read_log_tail(self._log_path)}" if self._log_path is not None else ""
                    log.warning("tritonserver pid %d stopped with %s%s%s", proc.pid, _describe_exit(code), where, tail)
            finally:
                self._proc = None
                self._ports = None
                self._remove_trace_dir()
                removed = remove_shm_prefix(self._shm_prefix)
                if removed:
                    log.debug("removed shared memory left by the python backend: %s", removed)
                if self._user_log_path is None and not keep_log and self._log_path is not None:
                    with contextlib.suppress(OSError):
                        self._log_path.unlink()

    def _remove_trace_dir(self) -> None:
        if self._trace_dir is not None:
            shutil.rmtree(self._trace_dir, ignore_errors=True)
            self._trace_dir = None

    async def _terminate(self, proc: subprocess.Popen[bytes], *, unload_first: bool) -> int | None:
        """Stop the server and every process of its group; its exit status."""
        pgid = proc.pid  # start_new_session: the server leads its own process group
        if proc.poll() is None:
            if unload_first:
                await self._unload_models()
            signal_group(pgid, signal.SIGTERM)
            if not await _wait_exit(proc, self._stop_timeout_s):
                log.warning("tritonserver pid %d ignored SIGTERM for %g s, killing it", pgid, self._stop_timeout_s)
                signal_group(pgid, signal.SIGKILL)
                await _wait_exit(proc, 5.0)
        # Stubs exit after the server unloads their models; kill any that linger.
        if not await _wait_group_gone(pgid, 5.0):
            log.warning("python backend stubs of tritonserver pid %d still alive, killing them", pgid)
            signal_group(pgid, signal.SIGKILL)
            if not await _wait_group_gone(pgid, 5.0):
                raise ServerError(f"processes of tritonserver group {pgid} survive SIGKILL")
        return proc.returncode

    async def _unload_models(self) -> None:
        """Unload every model and wait (bounded) until none is left, before the SIGTERM.

        On SIGTERM Triton unloads its models itself, but it checks for live models once a second, and a
        python-backend model takes ~1.4 s to unload (its stub takes its finalize message on a 1 s poll):
        the server then exits only at the second check, ~2.9 s after the signal. Unloaded first (all at
        once), its first check finds none and it exits at once: ~1.9 s in all (2 cores, load 4). Best
        effort: a server that does not answer, or a model that cannot be unloaded (a request it never
        finishes, a refused unload), ends the wait after :data:`_UNLOAD_WAIT_S` (or half
        ``stop_timeout_s``), and the SIGTERM does the rest as before."""
        headers = self.http_control_headers
        with anyio.move_on_after(min(_UNLOAD_WAIT_S, self._stop_timeout_s / 2)):
            try:
                index = await http_get_json(self.http_url, "/v2/repository/index", body={}, headers=headers)
                async with anyio.create_task_group() as tg:
                    for name in sorted({str(entry["name"]) for entry in index}):
                        tg.start_soon(self._unload, name)
                # a model that never loaded is listed without a state
                while any(entry.get("state") in _LIVE_STATES for entry in index):
                    await anyio.sleep(0.05)
                    index = await http_get_json(self.http_url, "/v2/repository/index", body={}, headers=headers)
            except (ConnectError, KeyError, TypeError, AttributeError) as exc:
                log.debug("tritonserver pid %s: unloading its models before the stop failed: %s", self.pid, exc)

    async def _unload(self, name: str) -> None:
        try:
            await http_get_json(
                self.http_url, f"/v2/repository/models/{name}/unload", body={}, headers=self.http_control_headers
            )
        except ConnectError as exc:  # the wait above ends at its bound; the SIGTERM unloads it
            log.debug("tritonserver pid %s: unloading %s before the stop failed: %s", self.pid, name, exc)


def _may_auto_complete(repository: Path) -> bool:
    """Whether a model of ``repository`` may rely on Triton completing its configuration: one without a
    ``config.pbtxt``, or python code that defines ``auto_complete_config``.

    Otherwise the server starts with ``--disable-auto-complete-config``. With it on, the python backend
    starts a stub process per model only to ask it for its configuration, then the instance's own: the
    start-up of this repository's four models took 2.9-4.4 s with it, 0.8-2.0 s without (2 cores), of
    the tests' session server's eighteen 15.5 s and 6.9 s."""
    if not repository.is_dir():
        return False  # named by the start-up's own check
    for model in (d for d in repository.iterdir() if d.is_dir() and not d.name.startswith(".")):
        if not (model / "config.pbtxt").is_file():
            return True
        for code in model.rglob("*.py"):
            with contextlib.suppress(OSError):
                if "auto_complete_config" in code.read_text(encoding="utf-8", errors="replace"):
                    return True
    return False


def _describe_exit(code: int | None) -> str:
    if code is None:
        return "no exit status"
    if code < 0:
        return f"signal {signal.Signals(-code).name}"
    return f"exit code {code}"


async def _wait_exit(proc: subprocess.Popen[bytes], timeout_s: float) -> bool:
    """Wait (in a worker thread) for the process to exit; False on timeout."""

    def wait() -> bool:
        try:
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            return False
        return True

    return await anyio.to_thread.run_sync(wait)


async def _wait_group_gone(pgid: int, timeout_s: float) -> bool:
    """Poll ``/proc`` until no process of group ``pgid`` is left; False on timeout."""
    deadline = anyio.current_time() + timeout_s
    while True:
        if not await anyio.to_thread.run_sync(process_group_members, pgid):
            return True
        if anyio.current_time() >= deadline:
            return False
        await anyio.sleep(0.05)
