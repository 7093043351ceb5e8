"""Readiness probes and model inspection over Triton's HTTP/REST and gRPC endpoints.

HTTP calls use :mod:`urllib` (run in a worker thread, never blocking the event loop) with proxies
disabled: a ``http_proxy`` in the environment must not reroute requests meant for a local server.
"""

from __future__ import annotations

import http.client
import json
import logging
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import anyio
import anyio.to_thread

from perception.errors import ConnectError, ModelContractError, ServerError
from perception.kinds import TensorSpec
from perception.triton import parse_model_config, wait_until_ready

__all__ = [
    "ModelStatus",
    "describe_models",
    "http_get_json",
    "http_ready",
    "wait_for_server",
]

log = logging.getLogger(__name__)

_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _base(url: str) -> str:
    return url if url.startswith(("http://", "https://")) else f"http://{url}"


def _request_json(url: str, *, body: bytes | None, timeout_s: float, headers: Mapping[str, str] | None = None) -> Any:
    request = urllib.request.Request(url, data=body, method="POST" if body is not None else "GET")
    for name, value in (headers or {}).items():
        request.add_header(name, value)
    if body is not None:
        request.add_header("Content-Type", "application/json")
    with _OPENER.open(request, timeout=timeout_s) as response:
        payload = response.read()
    return json.loads(payload) if payload else None


async def http_get_json(
    http_url: str, path: str, *, body: Any = None, timeout_s: float = 5.0, headers: Mapping[str, str] | None = None
) -> Any:
    """GET (or POST ``body`` as JSON) ``path`` on a Triton HTTP endpoint (with ``headers``); decode the JSON answer.

    Raises :class:`ConnectError` when the server cannot be reached or answers with an error status.
    """
    url = _base(http_url).rstrip("/") + path
    data = json.dumps(body).encode() if body is not None else None
    try:
        return await anyio.to_thread.run_sync(
            lambda: _request_json(url, body=data, timeout_s=timeout_s, headers=headers), abandon_on_cancel=True
        )
    except urllib.error.HTTPError as exc:
        detail = exc.read().decode(errors="replace").strip()
        raise ConnectError(f"HTTP {exc.code} from {url}: {detail}") from exc
    except (OSError, ValueError, http.client.HTTPException) as exc:  # HTTPException: not HTTP/1 there
        raise ConnectError(f"cannot reach {url}: {exc}") from exc


def _probe(url: str, timeout_s: float) -> bool:
    try:
        with _OPENER.open(url, timeout=timeout_s) as response:
            return bool(response.status == 200)
    # refused, reset, timeout, HTTP 400 "not ready"; or something else on the port that does not speak
    # HTTP/1 (BadStatusLine: another process's gRPC server took the free port picked for ours before ours
    # bound it, as a busy test run saw; ours then fails to bind and its start is retried on other ports)
    except (OSError, ValueError, http.client.HTTPException):
        return False


async def http_ready(http_url: str, *, timeout_s: float = 1.0) -> bool:
    """One ``/v2/health/ready`` probe: True when the server answers 200."""
    url = _base(http_url).rstrip("/") + "/v2/health/ready"
    return await anyio.to_thread.run_sync(_probe, url, timeout_s, abandon_on_cancel=True)


async def _grpc_ready(url: str, timeout_s: float) -> bool:
    import tritonclient.grpc.aio as grpcclient
    from tritonclient.utils import InferenceServerException

    client = grpcclient.InferenceServerClient(url)
    try:
        return bool(await client.is_server_ready(client_timeout=timeout_s))
    except InferenceServerException:
        return False
    finally:
        with anyio.CancelScope(shield=True):  # also when the wait's deadline cancelled the probe
            await client.close()


async def wait_for_server(
    url: str, *, timeout_s: float = 30.0, protocol: str = "grpc", interval_s: float = 0.1
) -> None:
    """Wait until the Triton server at ``url`` reports ready (gRPC ``ServerReady`` or HTTP
    ``/v2/health/ready``); raise :class:`ServerError` after ``timeout_s``.

    Meant for external servers given by URL; :class:`EmbeddedTriton` already waits on its own.
    """
    if protocol not in ("grpc", "http"):
        raise ValueError(f"protocol must be 'grpc' or 'http', not {protocol!r}")
    probe_timeout = max(0.05, min(1.0, timeout_s))

    async def problem() -> str | None:
        if protocol == "grpc":
            ready = await _grpc_ready(url, probe_timeout)
        else:
            ready = await http_ready(url, timeout_s=probe_timeout)
        return None if ready else "not ready"

    ready, _ = await wait_until_ready(problem, timeout_s, poll_s=interval_s)
    if not ready:
        raise ServerError(f"Triton server at {url} ({protocol}) not ready after {timeout_s:g} s")


@dataclass(frozen=True)
class ModelStatus:
    """A model of the repository: its state (``READY``, ``UNAVAILABLE``...), why, and its tensor contract.

    ``max_batch_size > 0`` means the server prepends a batch dimension to ``dims``.
    """

    name: str
    version: str
    state: str
    reason: str
    max_batch_size: int = 0
    inputs: tuple[TensorSpec, ...] = ()
    outputs: tuple[TensorSpec, ...] = ()

    @property
    def ready(self) -> bool:
        return self.state == "READY"


async def describe_models(
    http_url: str, *, timeout_s: float = 5.0, headers: Mapping[str, str] | None = None
) -> list[ModelStatus]:
    """Every model of the server's repositories with its state and (for loaded models) its contract,
    read from the HTTP repository index and model configuration endpoints (parsed as the transport's
    contract check parses them). The index is a restricted API on the embedded server: ``headers`` is
    its :attr:`~perception.server.EmbeddedTriton.http_control_headers`."""
    index = await http_get_json(http_url, "/v2/repository/index", body={}, timeout_s=timeout_s, headers=headers)
    statuses = []
    for entry in sorted(index or (), key=lambda e: (str(e.get("name")), str(e.get("version", "")))):
        name = str(entry.get("name"))
        state = str(entry.get("state") or "UNAVAILABLE")
        status = ModelStatus(name, str(entry.get("version", "")), state, str(entry.get("reason", "")))
        if state == "READY":
            try:
                config = await http_get_json(
                    http_url, f"/v2/models/{urllib.parse.quote(name)}/config", timeout_s=timeout_s
                )
                contract = parse_model_config(config)
            except (ConnectError, ModelContractError) as exc:
                log.warning("cannot read the configuration of model %s: %s", name, exc)
            else:
                status = ModelStatus(
                    status.name,
                    status.version,
                    status.state,
                    status.reason,
                    max_batch_size=contract.max_batch_size,
                    inputs=contract.inputs,
                    outputs=contract.outputs,
                )
        statuses.append(status)
    return statuses
