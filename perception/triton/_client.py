"""The typed async Triton client: the runtime's only way to talk to a server.

A thin adapter over ``tritonclient.grpc.aio`` (untyped; nothing of it leaks out of this package):

* Inference requests are encoded by :mod:`perception.triton._wire` (the tensors copied once, not four
  times as ``tritonclient``'s ``InferInput`` + protobuf do) and sent as bytes on the same gRPC channels;
  every other call goes through ``tritonclient``.
* ``channels`` gRPC channels per URL, each on its own TCP connection, picked round-robin. Several URLs
  (replicas): each inference goes to the URL with the fewest outstanding inference calls
  (:meth:`TritonClient.outstanding`), ties broken round-robin (equal load alternates). A call counts
  until it has really ended, abandoned ones included, so a slow or hung server that piles up calls
  gets less new work. A URL that fails to connect is skipped for a back-off period
  (:meth:`TritonClient.healthy_urls`), doubling per consecutive failure; once it is over the URL is
  probed by one request at a time and is back in full on the first success. No retries here: the
  scheduler decides (``ConnectError.retryable``).
* Every Triton/gRPC error is translated once, by :func:`perception.triton._errors.translate`, into
  :mod:`perception.errors` with the model, sensor, frame and URL.
* ``timeout_ns`` becomes both the gRPC deadline and Triton's per-request ``timeout`` parameter (µs).
  Triton honours the latter only for models that queue in a scheduler that supports it (dynamic or
  sequence batching, with ``default_queue_policy``/``allow_timeout_override``): it then drops queued
  requests nobody waits for any more. The gRPC deadline is always enforced, client side.
* Cancelling the calling task (anyio cancel scope, ``fail_after``...) cancels the in-flight RPC; Triton
  forwards the cancellation to the model (``request.is_cancelled()``). The caller does not wait for
  grpc to wind the call down (that costs ~1 ms of event-loop time, 3+ ms on a busy host, which a
  scheduler joining at a deadline would add to every late frame): the call is *abandoned* — it keeps
  its shared-memory slot (and its place in the URL's outstanding calls) until it has really ended, is
  counted (:attr:`TritonClient.abandoned_calls`), and ended either by its own gRPC deadline when that
  is due (grpc's timer thread does the work, off the event loop) or by an explicit cancel. ``close()``
  cancels and waits for every abandoned call.
* Inputs of at least ``shm_threshold_bytes`` go through a :class:`SharedMemoryPool` when the server
  shares ``/dev/shm`` (``shm="auto"``: loopback URLs). Any shared-memory trouble (cannot register,
  region vanished, server restarted and forgot it) falls back to plain gRPC for that request: shared
  memory is an optimisation and never fails a request. Outputs always come back over gRPC.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import time
from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Literal

import anyio
import anyio.lowlevel
import grpc  # type: ignore[import-untyped]
import numpy as np
import numpy.typing as npt
import tritonclient.grpc as tgrpc
import tritonclient.grpc.aio as tgrpc_aio
from tritonclient.utils import InferenceServerException, np_to_triton_dtype

from perception._lifetime import Lifetime
from perception.config import first_duplicate, headers_problem, tls_problem
from perception.errors import (
    ConfigError,
    ConnectError,
    DeadlineError,
    InferenceError,
    InputError,
    ModelNotReadyError,
    RuntimeClosedError,
    SharedMemoryError,
    TransportError,
)

from ._contract import ModelContract, parse_model_config
from ._errors import is_shm_registration_lost, translate
from ._ready import wait_until_ready
from ._shm import SharedMemoryPool, ShmSlot, packed_size
from ._wire import WireInput, encode_infer_request, model_infer_call

__all__ = ["ClientOptions", "InferRequest", "InferResult", "ParameterValue", "ShmMode", "TritonClient"]

log = logging.getLogger(__name__)

ShmMode = Literal["auto", "on", "off"]
ParameterValue = str | int | float | bool
Array = npt.NDArray[Any]

_FOREIGN = (InferenceServerException, grpc.RpcError, OSError)
_MAX_MESSAGE = 2**31 - 1
_STAT_KEYS = ("success", "fail", "queue", "compute_input", "compute_infer", "compute_output")
#: How long :meth:`TritonClient.model_statistics` waits, by default, for the counts it is asked for:
#: Triton counts a request a moment after answering it (milliseconds; seconds on a loaded host).
_STATISTICS_SETTLE_S = 5.0
#: After a failed registration, shared memory is not tried again on that URL for this long.
_SHM_RETRY_NS = 30 * 1_000_000_000
#: gRPC reconnect back-off of a channel whose server went away (initial/min, max), in ms.
_RECONNECT_BACKOFF_MS = (100, 1000)
#: How long close() lets grpc finish cancelled calls before the channels' loop may end.
_CANCEL_SETTLE_S = 0.05
#: An abandoned call whose gRPC deadline is at most this far away is left to that deadline (grpc ends
#: it on its own timer thread); one further away is cancelled at once.
_EXPIRE_WITHIN_NS = 5_000_000
#: ... and cancelled explicitly anyway if it is still running this long after its deadline.
_EXPIRE_GRACE_S = 0.05
#: How long close() waits for abandoned calls to end after cancelling them.
_ABANDONED_CLOSE_S = 2.0


@dataclass(frozen=True)
class ClientOptions:
    """How to reach the server(s). Validated on construction (:class:`ConfigError`)."""

    urls: tuple[str, ...] = ("127.0.0.1:8001",)
    #: gRPC channels (TCP connections) per URL; more helps when large tensors share one connection.
    channels: int = 2
    ssl: bool = False
    #: PEM file paths (TLS); read when the client opens.
    root_certificates: str | None = None
    private_key: str | None = None
    certificate_chain: str | None = None
    #: Extra metadata sent with every call (e.g. ``{"authorization": "Bearer ..."}``).
    headers: Mapping[str, str] = field(default_factory=dict)
    #: ``auto``: shared memory for loopback URLs; ``on``: for every URL (the server shares /dev/shm);
    #: ``off``: never. Only inputs totalling at least ``shm_threshold_bytes`` use it.
    shm: ShmMode = "auto"
    shm_threshold_bytes: int = 256 * 1024
    #: Cap on the shared-memory pool (all regions together).
    shm_pool_bytes: int = 256 * 1024 * 1024
    #: Timeout of non-inference calls (readiness, config, statistics, shm registration).
    control_timeout_s: float = 10.0
    #: Timeout of load_model / unload_model.
    load_timeout_s: float = 300.0
    #: A URL that failed to connect is skipped for backoff_s, doubling per consecutive failure.
    backoff_s: float = 0.5
    backoff_max_s: float = 10.0

    def __post_init__(self) -> None:
        def bad(key: str, message: str) -> ConfigError:
            return ConfigError(message, key=f"triton.{key}")

        if isinstance(self.urls, str):
            raise bad("urls", "must be a list of host:port strings, not a single string")
        if not self.urls or not all(isinstance(u, str) and u.strip() for u in self.urls):
            raise bad("urls", f"need at least one non-empty host:port, got {list(self.urls)!r}")
        duplicate = first_duplicate(self.urls)
        if duplicate is not None:
            raise bad("urls", f"duplicate URL {self.urls[duplicate[0]]!r} in {list(self.urls)!r}")
        if any(u.startswith(("http://", "https://")) for u in self.urls):
            raise bad("urls", "gRPC URLs are host:port (no http:// scheme)")
        if self.channels < 1:
            raise bad("channels", f"must be >= 1, got {self.channels}")
        if self.shm not in ("auto", "on", "off"):
            raise bad("shm", f"must be auto, on or off, got {self.shm!r}")
        if self.shm_threshold_bytes < 0:
            raise bad("shm_threshold_bytes", f"must be >= 0, got {self.shm_threshold_bytes}")
        if self.shm_pool_bytes < 64 * 1024:
            raise bad("shm_pool_bytes", f"must be >= 65536, got {self.shm_pool_bytes}")
        for key in ("control_timeout_s", "load_timeout_s", "backoff_s", "backoff_max_s"):
            if not getattr(self, key) > 0:
                raise bad(key, f"must be > 0, got {getattr(self, key)}")
        tls = tls_problem(self.ssl, self.root_certificates, self.private_key, self.certificate_chain, switch="ssl")
        if tls is not None:
            raise bad(*tls)
        header = headers_problem(self.headers)
        if header is not None:
            raise bad(*header)


@dataclass(frozen=True, slots=True)
class InferRequest:
    """One inference: ``inputs`` by tensor name; ``outputs=None`` = every output of the model."""

    model: str
    inputs: Mapping[str, Array]
    outputs: tuple[str, ...] | None = None
    #: Budget of the whole call (gRPC deadline + Triton queue timeout); ``None`` = no deadline.
    timeout_ns: int | None = None
    request_id: str = ""
    sensor: str | None = None
    frame: int | None = None
    parameters: Mapping[str, ParameterValue] | None = None
    #: ``None`` = the client's policy; ``True``/``False`` force shared memory on/off for this request.
    use_shm: bool | None = None


@dataclass(frozen=True, slots=True)
class InferResult:
    """The outputs of one inference (read-only arrays backed by the response) and its timings."""

    model: str
    outputs: Mapping[str, Array]
    url: str
    #: Wall time of the whole call, from entering ``infer`` to the decoded outputs.
    client_ns: int
    #: Part of ``client_ns`` spent preparing the request: serialisation or shared-memory copy (and, the
    #: first time a region is used with a server, its registration).
    prepare_ns: int
    #: Server-side time if the model reports it (response parameter ``server_ns``), else ``None``; see
    #: :meth:`TritonClient.model_statistics` for Triton's own cumulative timings.
    server_ns: int | None
    used_shm: bool
    request_id: str = ""
    #: The version of the model that answered (Triton's response names it).
    model_version: str = ""


def is_loopback(url: str) -> bool:
    """True for URLs on this host: 127.0.0.0/8, ``localhost``, ``::1``, ``unix:`` sockets."""
    if url.startswith("unix:"):
        return True
    host = url.rsplit(":", 1)[0] if url.count(":") == 1 or url.startswith("[") else url
    host = host.strip("[]")
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class _Endpoint:
    """One URL: its channels, its load and its health."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.loopback = is_loopback(url)
        self.clients: list[Any] = []  # tritonclient.grpc.aio.InferenceServerClient
        #: ``ModelInfer`` on each client's channel, taking the request as bytes (see ``_wire``).
        self.infer_calls: list[Any] = []
        self._next = 0
        #: Inference calls sent to this URL that have not ended yet (abandoned ones included).
        self.outstanding = 0
        self.failures = 0
        self.unhealthy_until_ns = 0
        self.shm_blocked_until_ns = 0

    def client(self) -> Any:
        client = self.clients[self._next % len(self.clients)]
        self._next += 1
        return client

    def infer_call(self) -> Any:
        """The next channel's raw ``ModelInfer`` (round-robin with :meth:`client`)."""
        call = self.infer_calls[self._next % len(self.infer_calls)]
        self._next += 1
        return call

    def healthy(self, now_ns: int) -> bool:
        return self.unhealthy_until_ns <= now_ns

    def eligible(self, now_ns: int) -> bool:
        """May take a new inference: healthy and, while it is being probed after a back-off (it failed
        and has not succeeded since), not already busy with a call."""
        return self.healthy(now_ns) and not (self.failures and self.outstanding)

    def failed(self, options: ClientOptions) -> None:
        self.failures += 1
        # The exponent is capped: 2.0 ** 1024 overflows a float after a long outage (~1000 failures).
        backoff_s = min(options.backoff_s * 2.0 ** min(self.failures - 1, 30), options.backoff_max_s)
        self.unhealthy_until_ns = time.monotonic_ns() + int(backoff_s * 1e9)
        level = logging.WARNING if self.failures == 1 else logging.DEBUG
        log.log(
            level, "triton %s unreachable (%d in a row); skipping it for %.1f s", self.url, self.failures, backoff_s
        )

    def succeeded(self) -> None:
        if self.failures:
            log.info("triton %s reachable again", self.url)
        self.failures = 0
        self.unhealthy_until_ns = 0


class _Registrar:
    """Registers shared-memory regions with one endpoint (implements ``ShmRegistrar``)."""

    def __init__(self, owner: TritonClient, endpoint: _Endpoint) -> None:
        self._owner = owner
        self._endpoint = endpoint

    @property
    def url(self) -> str:
        return self._endpoint.url

    async def register(self, name: str, key: str, byte_size: int) -> None:
        await self._owner._call(self._endpoint, "register_system_shared_memory", name, key, byte_size)

    async def unregister(self, name: str) -> None:
        await self._owner._call(self._endpoint, "unregister_system_shared_memory", name)


class TritonClient:
    """Async Triton client over gRPC (use ``async with TritonClient(options) as client``)."""

    def __init__(self, options: ClientOptions | None = None) -> None:
        self._options = options or ClientOptions()
        self._endpoints = [_Endpoint(url) for url in self._options.urls]
        self._headers: dict[str, str] | None = dict(self._options.headers) or None
        #: The same headers as gRPC metadata, for the raw inference calls.
        self._metadata: tuple[tuple[str, str], ...] | None = tuple(self._options.headers.items()) or None
        self._rr = 0
        self._pool: SharedMemoryPool | None = None
        self._registrars = {ep.url: _Registrar(self, ep) for ep in self._endpoints}
        self._state = Lifetime.UNOPENED
        self._inflight = 0
        self._cancelled_rpcs = 0
        #: Inference calls whose caller was cancelled, still winding down: call -> backstop timer.
        self._abandoned: dict[asyncio.Task[InferResult], asyncio.TimerHandle | None] = {}
        self._abandoned_total = 0

    # -- lifecycle ----------------------------------------------------------------------------------

    async def __aenter__(self) -> TritonClient:
        await self.open()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def open(self) -> None:
        """Create the channels (connections are made lazily, on first use). Rolls back on failure."""
        plain = [ep.url for ep in self._endpoints if not ep.loopback]
        if self._options.headers and not self._options.ssl and plain:
            log.warning(
                "sending headers (%s) in plaintext to %s: enable TLS (server.tls) for a server off this host",
                ", ".join(sorted(self._options.headers)),
                ", ".join(plain),
            )
        if self._state is not Lifetime.UNOPENED:
            raise RuntimeClosedError("a TritonClient can be opened once")
        try:
            for ep in self._endpoints:
                for _ in range(self._options.channels):
                    client = self._new_channel(ep.url)
                    ep.clients.append(client)
                    # tritonclient keeps its grpc.aio channel in ``_channel``; inference goes over it
                    # as encoded bytes (``_wire``), everything else through tritonclient.
                    ep.infer_calls.append(model_infer_call(client._channel))
        except BaseException:
            await self._close_channels()
            raise  # still UNOPENED: nothing is held
        self._state = Lifetime.OPENED
        log.debug("triton client open: %s x %d channels", list(self._options.urls), self._options.channels)

    def _new_channel(self, url: str) -> Any:
        opts = self._options
        keepalive = tgrpc.KeepAliveOptions()
        channel_args = [
            ("grpc.max_send_message_length", _MAX_MESSAGE),
            ("grpc.max_receive_message_length", _MAX_MESSAGE),
            ("grpc.keepalive_time_ms", keepalive.keepalive_time_ms),
            ("grpc.keepalive_timeout_ms", keepalive.keepalive_timeout_ms),
            ("grpc.keepalive_permit_without_calls", keepalive.keepalive_permit_without_calls),
            ("grpc.http2.max_pings_without_data", keepalive.http2_max_pings_without_data),
            # A server that restarts must be usable again within about a second: grpc's default
            # reconnect back-off grows to 120 s, so a channel that failed for a while would keep
            # failing fast long after the server is back.
            ("grpc.initial_reconnect_backoff_ms", _RECONNECT_BACKOFF_MS[0]),
            ("grpc.min_reconnect_backoff_ms", _RECONNECT_BACKOFF_MS[0]),
            ("grpc.max_reconnect_backoff_ms", _RECONNECT_BACKOFF_MS[1]),
            # Channels with equal arguments share one TCP connection through grpc's global subchannel
            # pool; a local pool gives each channel its own connection.
            ("grpc.use_local_subchannel_pool", 1),
        ]
        try:
            return tgrpc_aio.InferenceServerClient(
                url,
                ssl=opts.ssl,
                root_certificates=opts.root_certificates,
                private_key=opts.private_key,
                certificate_chain=opts.certificate_chain,
                channel_args=channel_args,
            )
        except OSError as exc:  # certificate files are read here
            raise ConfigError(f"cannot read TLS file: {exc.strerror or exc}", file=exc.filename) from exc

    async def close(self) -> None:
        """Unregister and unlink shared memory, close every channel. Idempotent, safe under cancellation."""
        if self._state.done:
            return
        # CLOSING still serves the calls the close itself makes (unregistering shared memory)
        self._state = Lifetime.CLOSING
        with anyio.CancelScope(shield=True):
            await self._end_abandoned()
            if self._pool is not None:
                await self._pool.close()
            cancelled_calls = self._inflight + self._cancelled_rpcs
            await self._close_channels()
            if cancelled_calls:
                # grpc completes cancelled calls asynchronously, from its poller thread, by scheduling a
                # callback on the loop that started them. Give it time to do so while the loop still
                # runs: if the loop were closed first, grpc would raise "Event loop is closed" into
                # whatever loop runs next in this process (e.g. the next test's).
                await anyio.sleep(_CANCEL_SETTLE_S)
        self._state = Lifetime.CLOSED

    async def _end_abandoned(self) -> None:
        """Cancel every abandoned call now and wait (bounded) until they have ended and released
        their shared-memory slots."""
        if not self._abandoned:
            return
        calls = list(self._abandoned)
        for call in calls:
            call.cancel()
        with anyio.move_on_after(_ABANDONED_CLOSE_S):
            await asyncio.wait(calls)
        if self._abandoned:  # pragma: no cover - grpc did not end a cancelled call within seconds
            log.warning("%d abandoned inference call(s) still running at close", len(self._abandoned))

    async def _close_channels(self) -> None:
        with anyio.CancelScope(shield=True), anyio.move_on_after(5.0):
            for ep in self._endpoints:
                ep.infer_calls.clear()
                while ep.clients:
                    client = ep.clients.pop()
                    try:
                        await client.close()
                    except Exception as exc:  # pragma: no cover - closing must not fail the caller
                        log.debug("closing channel to %s: %s", ep.url, exc)

    async def _rpc(self, call: Awaitable[Any]) -> Any:
        """Await a ``tritonclient.grpc.aio`` call; cancelling the caller cancels the RPC.

        grpc.aio cancels the RPC when the awaiting task is cancelled, but then raises a *new*, bare
        ``CancelledError`` that anyio's cancel scopes do not recognise as theirs (the scope would let it
        escape). anyio cancellation is level-triggered: ``checkpoint_if_cancelled`` re-delivers the
        scope's own cancellation. A native ``Task.cancel()`` (no cancelled anyio scope) propagates as is.
        """
        self._inflight += 1
        try:
            return await call
        except asyncio.CancelledError:
            self._cancelled_rpcs += 1
            await anyio.lowlevel.checkpoint_if_cancelled()
            raise
        finally:
            self._inflight -= 1

    @property
    def state(self) -> Lifetime:
        """Where the client is in its life (:class:`~perception._lifetime.Lifetime`)."""
        return self._state

    def _check_open(self) -> None:
        if self._state is Lifetime.UNOPENED:
            raise RuntimeClosedError("TritonClient is not open")
        if self._state is Lifetime.CLOSED:
            raise RuntimeClosedError("TritonClient is closed")

    # -- endpoints ----------------------------------------------------------------------------------

    @property
    def options(self) -> ClientOptions:
        return self._options

    @property
    def urls(self) -> tuple[str, ...]:
        return self._options.urls

    @property
    def shm_pool(self) -> SharedMemoryPool | None:
        """The shared-memory pool, once a request used shared memory."""
        return self._pool

    def healthy_urls(self) -> tuple[str, ...]:
        """URLs not in a connect-failure back-off period (in configured order)."""
        now = time.monotonic_ns()
        return tuple(ep.url for ep in self._endpoints if ep.healthy(now))

    def outstanding(self) -> dict[str, int]:
        """Inference calls sent to each URL that have not ended yet (abandoned ones included)."""
        return {ep.url: ep.outstanding for ep in self._endpoints}

    def _pick(self) -> _Endpoint:
        """The eligible URL with the fewest outstanding inference calls; among equals, the first one
        from the round-robin position on (which then moves past it)."""
        now = time.monotonic_ns()
        count = len(self._endpoints)
        best: _Endpoint | None = None
        best_i = 0
        for i in range(count):
            ep = self._endpoints[(self._rr + i) % count]
            if ep.eligible(now) and (best is None or ep.outstanding < best.outstanding):
                best, best_i = ep, i
        if best is not None:
            self._rr = (self._rr + best_i + 1) % count
            return best
        # Every URL is backing off (or busy with its probe): try the one whose back-off ends first
        # rather than failing blind.
        return min(self._endpoints, key=lambda e: e.unhealthy_until_ns)

    def _endpoint(self, url: str | None) -> _Endpoint:
        if url is None:
            return self._pick()
        for ep in self._endpoints:
            if ep.url == url:
                return ep
        raise ConfigError(f"unknown URL {url!r}; the client has {list(self.urls)}", key="triton.urls")

    async def _call(
        self,
        ep: _Endpoint,
        method: str,
        *args: Any,
        model: str | None = None,
        timeout_s: float | None = None,
        extra_headers: Mapping[str, str] | None = None,
        **kwargs: Any,
    ) -> Any:
        """One control-plane RPC on ``ep`` with translated errors and health bookkeeping."""
        self._check_open()
        header = headers_problem(extra_headers or {})  # as the options' (gRPC's own error: a traceback)
        if header is not None:
            key, problem = header
            raise ConfigError(problem, key=key)
        headers = {**(self._headers or {}), **extra_headers} if extra_headers else self._headers
        try:
            result = await self._rpc(
                getattr(ep.client(), method)(
                    *args,
                    headers=headers,
                    client_timeout=timeout_s or self._options.control_timeout_s,
                    **kwargs,
                )
            )
        except _FOREIGN as exc:
            err = translate(exc, model=model, url=ep.url)
            if isinstance(err, ConnectError):
                ep.failed(self._options)
            raise err from exc
        ep.succeeded()
        return result

    # -- control plane ------------------------------------------------------------------------------

    async def server_ready(self, url: str | None = None) -> bool:
        """True when the server answers and is ready; False when it is unreachable or not ready."""
        try:
            return bool(await self._call(self._endpoint(url), "is_server_ready"))
        except (ConnectError, DeadlineError):
            return False

    async def wait_ready(
        self,
        models: Sequence[str],
        timeout_s: float,
        *,
        poll_s: float = 0.1,
        connect_timeout_s: float | None = None,
    ) -> None:
        """Wait until every URL is ready and serves every model in ``models``.

        Raises :class:`ConnectError` (server unreachable / not ready) or :class:`ModelNotReadyError`
        naming the model and URL when ``timeout_s`` passes first -- at once for a model that is not in the
        model repository of a server that is ready (it would never be). With ``connect_timeout_s``, a URL
        that has not answered at all (refused, unreachable) for that long fails at once: a server
        that answers may take ``timeout_s`` to load its models, a dead address should not.
        """
        self._check_open()
        silent_since: float | None = None
        logged = False

        async def check() -> TransportError | None:
            nonlocal silent_since, logged
            problem, answered = await self._readiness_problem(models)
            if problem is None:
                return None
            now = anyio.current_time()
            silent_since = None if answered else (now if silent_since is None else silent_since)
            silent_for = None if silent_since is None else now - silent_since
            if silent_for is not None and connect_timeout_s is not None and silent_for >= connect_timeout_s:
                raise type(problem)(
                    f"no answer for {connect_timeout_s:g} s: {problem.message}", **dict(problem.context)
                ) from problem
            if not logged:
                log.info("waiting for Triton at %s: %s", ", ".join(self.urls), problem.message)
                logged = True
            return problem

        ready, problem = await wait_until_ready(check, timeout_s, poll_s=poll_s)
        if ready:
            return
        if problem is None:
            problem = ConnectError(f"no answer from {', '.join(self.urls)}")
        raise type(problem)(f"not ready after {timeout_s:g} s: {problem.message}", **dict(problem.context)) from problem

    async def _readiness_problem(self, models: Sequence[str]) -> tuple[TransportError | None, bool]:
        """What keeps the URLs from being ready (None: nothing), and whether every URL answered."""
        for ep in self._endpoints:
            try:
                server_ok = bool(await self._call(ep, "is_server_ready"))
            except TransportError as exc:
                return exc, False
            unserved: ModelNotReadyError | None = None
            try:
                for model in models:
                    if not await self._call(ep, "is_model_ready", model, model=model):
                        unserved = await self._unserved(ep, model) if server_ok else None
                        if unserved is None:
                            return ModelNotReadyError("model is not ready", model=model, url=ep.url), True
                        break
            except TransportError as exc:
                return exc, True
            if unserved is not None:
                raise unserved  # hopeless: ends the wait (wait_until_ready)
            if not server_ok:
                return ConnectError("server is not ready", url=ep.url), True
        return None, True

    async def _unserved(self, ep: _Endpoint, model: str) -> ModelNotReadyError | None:
        """A ready server whose model repository has no ``model`` will not serve it however long one waits
        (its models are loaded): the error saying so, naming the models it has (None: it has it, or does
        not show its index -- restricted, as the embedded one's -- and is waited for as before)."""
        try:  # not _call: a server that restricts its repository index (the embedded one) is not unhealthy
            index = await self._rpc(
                ep.client().get_model_repository_index(
                    headers=self._headers, client_timeout=self._options.control_timeout_s
                )
            )
        except _FOREIGN:
            log.debug("%s: no repository index (restricted?): waiting for %s", ep.url, model, exc_info=True)
            return None
        names = sorted({m.name for m in index.models})
        if model in names:
            return None
        has = ", ".join(names) if names else "none"
        return ModelNotReadyError(f"not in the server's model repository (it has: {has})", model=model, url=ep.url)

    async def model_contract(self, model: str, url: str | None = None) -> ModelContract:
        """The model's tensor contract, from its configuration on the server."""
        ep = self._endpoint(url)
        config = await self._call(ep, "get_model_config", model, model=model, as_json=True)
        return parse_model_config(config)

    async def model_statistics(
        self,
        model: str,
        url: str | None = None,
        *,
        at_least: Mapping[str, int] | None = None,
        timeout_s: float = _STATISTICS_SETTLE_S,
    ) -> dict[str, int]:
        """Triton's cumulative statistics of ``model``, summed over versions (and over all URLs if
        ``url`` is None).

        Keys: ``inference_count``, ``execution_count``, ``last_inference_ms`` and, for each of
        ``success``, ``fail``, ``queue``, ``compute_input``, ``compute_infer``, ``compute_output``,
        ``<stage>_count`` and ``<stage>_ns`` (cumulative nanoseconds).

        Triton updates a model's statistics a moment *after* it has answered, so a read right after a
        response may not count it yet. ``at_least`` (counter -> value, e.g. ``{"success_count":
        before["success_count"] + 3}``) polls, for at most ``timeout_s``, until every named counter has
        reached its value, and returns that snapshot; at the bound it returns the last snapshot as it is
        (the caller sees the shortfall). This is the one place that waits for the server's accounting.
        """
        settled = await self.models_statistics(
            [model], url, at_least={model: at_least} if at_least else None, timeout_s=timeout_s
        )
        return settled[model]

    async def models_statistics(
        self,
        models: Sequence[str],
        url: str | None = None,
        *,
        at_least: Mapping[str, Mapping[str, int]] | None = None,
        timeout_s: float = _STATISTICS_SETTLE_S,
    ) -> dict[str, dict[str, int]]:
        """:meth:`model_statistics` of several ``models`` at once: one statistics request per URL and poll
        for all of them (Triton's statistics of every model, when there is more than one), where each
        model's own request would cost the client ~0.3 ms of CPU (a lockstep replay's server split reads
        them around every frame). ``at_least``: model -> counter -> value, polled as in :meth:`model_statistics`
        until every model's counters have reached theirs or ``timeout_s`` is over."""
        stats = await self._read_statistics(models, url)
        if not at_least:
            return stats
        unknown = sorted({k for wants in at_least.values() for k in wants} - next(iter(stats.values())).keys())
        if unknown:
            raise ValueError(f"no such statistics counter(s): {', '.join(unknown)}")
        give_up = time.monotonic() + timeout_s
        poll_s = 0.001

        def short() -> bool:
            return any(stats[m][k] < v for m, wants in at_least.items() for k, v in wants.items())

        while short() and time.monotonic() < give_up:
            await anyio.sleep(min(poll_s, max(0.0, give_up - time.monotonic())))
            poll_s = min(poll_s * 2, 0.05)
            stats = await self._read_statistics(models, url)
        return stats

    async def _read_statistics(self, models: Sequence[str], url: str | None) -> dict[str, dict[str, int]]:
        endpoints = [self._endpoint(url)] if url is not None else self._endpoints
        keys = ["inference_count", "execution_count", "last_inference_ms"] + [
            f"{k}_{u}" for k in _STAT_KEYS for u in ("count", "ns")
        ]
        out = {model: dict.fromkeys(keys, 0) for model in models}
        # one model: its own statistics; several: every model's, in one request
        name = models[0] if len(models) == 1 else ""
        for ep in endpoints:
            # The protobuf message as it is: ``as_json`` would print it to indented JSON with the pure-Python
            # encoder and parse it back, ~1 ms of the client's CPU per read.
            stats = await self._call(ep, "get_inference_statistics", name, model=name or None, as_json=False)
            seen = set()
            for entry in stats.model_stats:
                totals = out.get(entry.name)
                if totals is None:
                    continue
                seen.add(entry.name)
                totals["inference_count"] += int(entry.inference_count)
                totals["execution_count"] += int(entry.execution_count)
                totals["last_inference_ms"] = max(totals["last_inference_ms"], int(entry.last_inference))
                inference = entry.inference_stats
                for key in _STAT_KEYS:
                    stage = getattr(inference, key)
                    totals[f"{key}_count"] += int(stage.count)
                    totals[f"{key}_ns"] += int(stage.ns)
            missing = sorted(set(models) - seen)
            if missing:
                raise ModelNotReadyError("no statistics (the model is not loaded)", model=missing[0], url=ep.url)
        return out

    async def load_model(self, name: str, *, headers: Mapping[str, str] | None = None) -> None:
        """Load (or reload) ``name`` on every URL (server in explicit model-control mode). ``headers``:
        added to the client's (the embedded server restricts model control: ``EmbeddedTriton.control_headers``)."""
        for ep in self._endpoints:
            await self._call(
                ep, "load_model", name, model=name, timeout_s=self._options.load_timeout_s, extra_headers=headers
            )

    async def unload_model(self, name: str, *, headers: Mapping[str, str] | None = None) -> None:
        """Unload ``name`` on every URL (``headers``: as for :meth:`load_model`)."""
        for ep in self._endpoints:
            await self._call(
                ep, "unload_model", name, model=name, timeout_s=self._options.load_timeout_s, extra_headers=headers
            )

    async def server_shm_regions(self, url: str | None = None) -> dict[str, str]:
        """System shared-memory regions registered on the server: ``{name: key}`` (all clients')."""
        status = await self._call(self._endpoint(url), "get_system_shared_memory_status", as_json=True)
        regions = status.get("regions", {})
        return {str(name): str(info.get("key", "")) for name, info in regions.items()}

    # -- inference ----------------------------------------------------------------------------------

    async def infer(
        self,
        model: str,
        inputs: Mapping[str, Array],
        *,
        outputs: Sequence[str] | None = None,
        timeout_ns: int | None = None,
        request_id: str = "",
        sensor: str | None = None,
        frame: int | None = None,
        parameters: Mapping[str, ParameterValue] | None = None,
        use_shm: bool | None = None,
    ) -> InferResult:
        """Run one inference; see :class:`InferRequest` for the arguments."""
        return await self.infer_request(
            InferRequest(
                model=model,
                inputs=inputs,
                outputs=tuple(outputs) if outputs is not None else None,
                timeout_ns=timeout_ns,
                request_id=request_id,
                sensor=sensor,
                frame=frame,
                parameters=parameters,
                use_shm=use_shm,
            )
        )

    async def infer_request(self, req: InferRequest) -> InferResult:
        """Run one inference.

        Raises :class:`InputError` (malformed input array), :class:`ConnectError`,
        :class:`DeadlineError`, :class:`InferenceError` / :class:`ModelNotReadyError` with the request's
        model, sensor, frame and the URL. Cancellation of the caller cancels the RPC without waiting
        for it to wind down (see the module docstring: abandoned calls).
        """
        t0 = time.perf_counter_ns()
        self._check_open()
        deadline_ns = t0 + req.timeout_ns if req.timeout_ns is not None else None
        call = asyncio.ensure_future(self._infer(req, t0, deadline_ns))
        try:
            return await asyncio.shield(call)
        except asyncio.CancelledError:
            if not call.done():
                self._abandon(call, deadline_ns)
            await anyio.lowlevel.checkpoint_if_cancelled()  # anyio's own cancellation, if it was one
            raise

    @property
    def abandoned_calls(self) -> int:
        """Inference calls cancelled by their caller so far (ended, or ending: :attr:`abandoned_pending`)."""
        return self._abandoned_total

    @property
    def abandoned_pending(self) -> int:
        """Abandoned inference calls that have not ended yet."""
        return len(self._abandoned)

    async def wait_abandoned(self) -> None:
        """Wait until every abandoned call so far has ended (and given back its shared memory)."""
        if self._abandoned:
            await asyncio.wait(list(self._abandoned))

    def _abandon(self, call: asyncio.Task[InferResult], deadline_ns: int | None) -> None:
        """The caller stopped waiting for ``call``: end it without making the caller wait."""
        self._abandoned_total += 1
        left_ns = deadline_ns - time.perf_counter_ns() if deadline_ns is not None else None
        backstop: asyncio.TimerHandle | None = None
        if left_ns is not None and left_ns <= _EXPIRE_WITHIN_NS:
            # Its gRPC deadline is (about) now: grpc's timer ends the call and resets the stream (the
            # server sees the cancellation) without any event-loop work; cancel it if that fails.
            delay_s = max(0, left_ns) / 1e9 + _EXPIRE_GRACE_S
            backstop = asyncio.get_running_loop().call_later(delay_s, call.cancel)
        else:
            call.cancel()
        self._abandoned[call] = backstop
        call.add_done_callback(self._abandoned_done)

    def _abandoned_done(self, call: asyncio.Task[InferResult]) -> None:
        backstop = self._abandoned.pop(call, None)
        if backstop is not None:
            backstop.cancel()
        if not call.cancelled() and (exc := call.exception()) is not None:
            log.debug("abandoned call ended: %s", exc)

    async def _infer(self, req: InferRequest, t0: int, deadline_ns: int | None) -> InferResult:
        """The inference call itself (a task of its own, so a cancelled caller need not wait for it)."""
        tensors = self._check_inputs(req)
        ep = self._pick()
        ep.outstanding += 1  # until this task really ends, even when its caller has stopped waiting
        slot: ShmSlot | None = None
        try:
            slot = await self._acquire_shm(ep, req, tensors)
            wire_inputs, slot = self._build_inputs(tensors, slot)
            payload = self._encode(req, wire_inputs, deadline_ns)
            prepare_ns = time.perf_counter_ns() - t0
            try:
                response = await self._send(ep, req, payload, deadline_ns)
            except (InferenceServerException, grpc.RpcError) as exc:
                if slot is None or not is_shm_registration_lost(exc):
                    raise
                # The server forgot our regions (it restarted, or someone unregistered them): register
                # again on next use, and send this request's tensors over gRPC.
                log.warning("triton %s lost our shared-memory registrations (%s); re-registering", ep.url, exc)
                self._release(slot, forget_url=ep.url)
                slot = None
                wire_inputs, _ = self._build_inputs(tensors, None)
                response = await self._send(ep, req, self._encode(req, wire_inputs, deadline_ns), deadline_ns)
            used_shm = slot is not None
        except _FOREIGN as exc:
            err = translate(exc, model=req.model, sensor=req.sensor, frame=req.frame, url=ep.url)
            if isinstance(err, ConnectError):
                ep.failed(self._options)
            raise err from exc
        finally:
            ep.outstanding -= 1
            if slot is not None:
                self._release(slot)
        ep.succeeded()
        result_outputs, server_ns = self._read_outputs(req, response, ep.url)
        model_version = str(response.get_response().model_version)
        return InferResult(
            model=req.model,
            outputs=result_outputs,
            url=ep.url,
            client_ns=time.perf_counter_ns() - t0,
            prepare_ns=prepare_ns,
            server_ns=server_ns,
            used_shm=used_shm,
            request_id=req.request_id,
            model_version=model_version,
        )

    def _check_inputs(self, req: InferRequest) -> list[tuple[str, Array, str]]:
        if not req.inputs:
            raise InputError("request has no input tensors", sensor=req.sensor, model=req.model)
        tensors = []
        for name, array in req.inputs.items():
            if not isinstance(array, np.ndarray):
                raise InputError(
                    f"input must be a numpy array, got {type(array).__name__}", sensor=req.sensor, tensor=name
                )
            dtype = np_to_triton_dtype(array.dtype)
            if dtype is None:
                raise InputError(f"numpy dtype {array.dtype} has no Triton equivalent", sensor=req.sensor, tensor=name)
            tensors.append((name, array, str(dtype)))
        return tensors

    def _wants_shm(self, ep: _Endpoint, req: InferRequest, nbytes: int) -> bool:
        if nbytes == 0 or ep.shm_blocked_until_ns > time.monotonic_ns():
            return False
        if req.use_shm is not None:
            return req.use_shm
        mode = self._options.shm
        if mode == "off" or (mode == "auto" and not ep.loopback):
            return False
        return nbytes >= self._options.shm_threshold_bytes

    async def _acquire_shm(
        self, ep: _Endpoint, req: InferRequest, tensors: list[tuple[str, Array, str]]
    ) -> ShmSlot | None:
        arrays = [array for _, array, dtype in tensors if dtype != "BYTES"]
        nbytes = packed_size(arrays)
        if not self._wants_shm(ep, req, nbytes):
            return None
        if self._pool is None:
            self._pool = SharedMemoryPool(max_total_bytes=self._options.shm_pool_bytes)
        try:
            return await self._pool.acquire(nbytes, self._registrars[ep.url])
        except SharedMemoryError as exc:
            ep.shm_blocked_until_ns = time.monotonic_ns() + _SHM_RETRY_NS
            log.warning(
                "shared memory unusable with %s, sending tensors over gRPC for %d s: %s",
                ep.url,
                _SHM_RETRY_NS // 1_000_000_000,
                exc,
            )
        except TransportError as exc:
            log.debug("shared-memory registration with %s failed (%s); sending over gRPC", ep.url, exc)
        return None

    def _release(self, slot: ShmSlot, *, forget_url: str | None = None) -> None:
        if self._pool is not None:
            if forget_url is not None:
                self._pool.forget_registrations(forget_url)
            self._pool.release(slot)

    def _build_inputs(
        self, tensors: list[tuple[str, Array, str]], slot: ShmSlot | None
    ) -> tuple[list[WireInput], ShmSlot | None]:
        """The request's inputs: in ``slot`` (copied there) or inline; returns the slot used."""
        offsets: list[int] = []
        if slot is not None:
            try:
                offsets = slot.write([array for _, array, dtype in tensors if dtype != "BYTES"])
            except SharedMemoryError as exc:
                log.warning("cannot write to shared memory (%s); sending over gRPC", exc)
                self._release(slot)
                slot = None
        next_offset = iter(offsets)
        wire_inputs = []
        for name, array, dtype in tensors:
            shape = tuple(int(d) for d in array.shape)
            if slot is not None and dtype != "BYTES":
                offset = next(next_offset)
                wire_inputs.append(
                    WireInput(name, dtype, shape, shm_region=slot.name, shm_byte_size=array.nbytes, shm_offset=offset)
                )
            else:
                wire_inputs.append(WireInput(name, dtype, shape, array=array))
        return wire_inputs, slot

    def _encode(self, req: InferRequest, wire_inputs: list[WireInput], deadline_ns: int | None) -> bytes:
        """The serialised request; its ``timeout`` parameter is what is left of the deadline (µs)."""
        server_timeout_us: int | None = None
        if deadline_ns is not None:
            server_timeout_us = max(1, (deadline_ns - time.perf_counter_ns()) // 1000)
        try:
            return encode_infer_request(
                req.model,
                wire_inputs,
                outputs=req.outputs,
                request_id=req.request_id,
                timeout_us=server_timeout_us,
                parameters=req.parameters,
            )
        except (ValueError, TypeError) as exc:
            raise InputError(str(exc), model=req.model, sensor=req.sensor, frame=req.frame) from exc

    async def _send(self, ep: _Endpoint, req: InferRequest, payload: bytes, deadline_ns: int | None) -> Any:
        """One ``ModelInfer`` RPC of an encoded request (``grpc.RpcError`` on failure)."""
        client_timeout: float | None = None
        if deadline_ns is not None:
            remaining = deadline_ns - time.perf_counter_ns()
            if remaining <= 0:
                raise DeadlineError(
                    "deadline passed before the request was sent",
                    model=req.model,
                    sensor=req.sensor,
                    frame=req.frame,
                    url=ep.url,
                )
            client_timeout = remaining / 1e9
        return await self._rpc(ep.infer_call()(payload, timeout=client_timeout, metadata=self._metadata))

    def _read_outputs(self, req: InferRequest, response: Any, url: str) -> tuple[dict[str, Array], int | None]:
        proto = response.get_response()
        names = req.outputs if req.outputs is not None else tuple(o.name for o in proto.outputs)
        outputs: dict[str, Array] = {}
        for name in names:
            array = response.as_numpy(name)
            if array is None:
                raise InferenceError(
                    "server response lacks this output",
                    model=req.model,
                    sensor=req.sensor,
                    frame=req.frame,
                    tensor=name,
                    url=url,
                )
            outputs[name] = array
        server_ns: int | None = None
        if "server_ns" in proto.parameters:
            server_ns = int(proto.parameters["server_ns"].int64_param)
        return outputs, server_ns
