"""``perception server``: run the embedded Triton server on model repositories.

Prints the gRPC/HTTP/metrics endpoints and every model with its state and tensor contract, then serves
until SIGINT/SIGTERM and stops cleanly. A server that crashes is restarted on its ports (``--restarts``
times at most within 10 minutes; then the command exits 1). ``--once`` prints the table and stops (exit 1
when a model is not READY), e.g. to check a model repository.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import re
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio

from perception.cli._args import int_within, output_file, port, positive_float
from perception.config import ServerConfig
from perception.errors import PerceptionError
from perception.kinds import TensorSpec
from perception.server import EmbeddedTriton, ModelStatus, describe_models
from perception.server._locate import package_root

__all__ = ["default_model_repository", "format_model_table", "register", "run"]

log = logging.getLogger(__name__)


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "server",
        help="run the embedded Triton server and list its models",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--models",
        action="append",
        type=Path,
        metavar="DIR",
        help="model repository; repeat for several (default: ./models, else the repo's models/)",
    )
    p.add_argument("--grpc-port", type=port, metavar="P", help="gRPC port (default: a free one)")
    p.add_argument("--http-port", type=port, metavar="P", help="HTTP/REST port (default: a free one)")
    p.add_argument("--metrics-port", type=port, metavar="P", help="Prometheus metrics port (default: a free one)")
    p.add_argument("--log", type=output_file, metavar="FILE", help="server log file (default: a temporary file)")
    p.add_argument(
        "--startup-timeout",
        type=positive_float,
        default=ServerConfig().startup_timeout_s,
        metavar="S",
        help="seconds to wait for readiness (default: %(default)g, a profile's server.startup_timeout_s)",
    )
    p.add_argument(
        "--restarts",
        type=int_within(0),
        default=ServerConfig().restarts,
        metavar="N",
        help="restart a server that crashes, on its ports, at most N times within 10 minutes; "
        "then exit 1 (default: %(default)s)",
    )
    p.add_argument(
        "--once", action="store_true", help="print the model table and stop (exit 1 if a model is not READY)"
    )
    p.set_defaults(func=run)


def default_model_repository() -> Path:
    """``./models`` when it exists, else ``models/`` of the checkout holding :mod:`perception`."""
    cwd_models = Path.cwd() / "models"
    return cwd_models if cwd_models.is_dir() else package_root() / "models"


def _dims(spec: TensorSpec, batched: bool) -> str:
    dims = [*(["B"] if batched else []), *(str(d) for d in spec.dims)]
    return f"{spec.name} {spec.dtype}[{','.join(dims)}]"


def format_model_table(models: Sequence[ModelStatus]) -> str:
    """A plain-text table: model, version, state, inputs, outputs; then why each unready model is not.

    Dims of batched models (``max_batch_size > 0``) start with ``B``; ``-1`` is a variable dim.
    """
    header = ("MODEL", "VERSION", "STATE", "INPUTS", "OUTPUTS")
    rows = [header]
    for m in models:
        batched = m.max_batch_size > 0
        rows.append(
            (
                m.name,
                m.version or "-",
                m.state,
                ", ".join(_dims(t, batched) for t in m.inputs) or "-",
                ", ".join(_dims(t, batched) for t in m.outputs) or "-",
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(header) - 1)]
    lines = ["  ".join([*(c.ljust(w) for c, w in zip(row[:-1], widths, strict=True)), row[-1]]) for row in rows]
    unready = [f"  {m.name}: {m.state}: {m.reason or 'no reason given'}" for m in models if not m.ready]
    if unready:
        lines += ["", "not ready:", *unready]
    return "\n".join(line.rstrip() for line in lines)


def _print(text: str) -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


async def _stop_on_signal(scope: anyio.CancelScope) -> None:
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for signum in signals:
            log.info("received %s, stopping the server", signal.Signals(signum).name)
            scope.cancel()
            return


_GLOG_ERROR = re.compile(r'^E\d{4} [^\]]*\] "?(?P<message>.*?)"?$')


def _reason_from_log(log_path: Path | None, model: str) -> str:
    """The last error line of the server log that names ``model`` (Triton leaves the repository index's
    reason empty when a model's config cannot even be parsed)."""
    if log_path is None:
        return ""
    try:
        text = log_path.read_text(errors="replace")
    except OSError:
        return ""
    reasons = [
        match.group("message")
        for line in text.splitlines()
        if f"'{model}'" in line and (match := _GLOG_ERROR.match(line))
    ]
    return reasons[-1] if reasons else ""


def _with_reasons(models: list[ModelStatus], log_path: Path | None) -> list[ModelStatus]:
    return [
        dataclasses.replace(m, reason=_reason_from_log(log_path, m.name)) if not m.ready and not m.reason else m
        for m in models
    ]


class _Progress:
    """What the serving task reached before it was stopped."""

    ready = False


async def _serve(server: EmbeddedTriton, once: bool, progress: _Progress, restarts: int) -> int:
    async with server:
        progress.ready = True
        _print(
            f"Triton server ready (pid {server.pid})\n"
            f"  gRPC     {server.grpc_url}\n"
            f"  HTTP     http://{server.http_url}\n"
            f"  metrics  {server.metrics_url}\n"
            f"  log      {server.log_path}\n"
        )
        described = await describe_models(server.http_url, headers=server.http_control_headers)
        models = _with_reasons(described, server.log_path)
        _print(format_model_table(models) if models else "(no models in the repository)")
        if not models:
            log.warning("the model repositories hold no model")
        not_ready = [m.name for m in models if not m.ready]
        if once:
            if not_ready:
                log.error("models not ready: %s", ", ".join(not_ready))
            return 1 if not_ready else 0
        _print("\nserving; Ctrl-C to stop")
        await server.supervise(restarts)
        # it crashed and was not restarted (the error says why): the endpoints printed are gone
        return 1


async def _main(args: argparse.Namespace) -> int | None:
    """The command's exit code; None when SIGINT/SIGTERM stopped it before the server was ready."""
    repositories = args.models or [default_model_repository()]
    server = EmbeddedTriton(
        repositories,
        grpc_port=args.grpc_port,
        http_port=args.http_port,
        metrics_port=args.metrics_port,
        log_path=args.log,
        startup_timeout_s=args.startup_timeout,
        require_all_models=False,  # list failing models with their reason instead of refusing to start
    )
    progress = _Progress()
    code: int | None = None
    failure: PerceptionError | OSError | None = None
    async with anyio.create_task_group() as tg:
        tg.start_soon(_stop_on_signal, tg.cancel_scope)
        try:
            code = await _serve(server, args.once, progress, args.restarts)
        except (PerceptionError, OSError) as exc:  # re-raised outside the task group, not as an exception group
            failure = exc
        tg.cancel_scope.cancel()
    if failure is not None:
        raise failure
    if code is not None:
        return code
    if progress.ready:
        return 0  # stopped by SIGINT/SIGTERM after start-up: the normal way to end a server
    return None


def run(args: argparse.Namespace) -> int:
    code = anyio.run(_main, args)
    if code is None:
        # stopped during start-up: 'perception server: interrupted', exit 130, as every command says it (a
        # warning log line, 'interrupted during start-up', with its own 130 was this command's alone)
        raise KeyboardInterrupt
    return code
