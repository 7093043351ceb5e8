"""Why requests were late: the servers' queue (too many frames in flight for them) or their compute.

A late request is either a model that computes too slowly for the budget, or a server that had more work
than it could start (frames in flight, other workers, other clients): then the request waited in Triton's
queue inside its frame's deadline. Triton's own statistics tell the two apart (``server_ms``: mean queue
and compute per request over the run), so the run names the cause instead of blaming the model. Faults
(a model that errors or never answers) are reported as faults, not here: they have no answered requests.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from perception.metrics._run_report import ModelServed, RunCounters

__all__ = ["QUEUE_SHARE", "late_causes", "late_lines"]

#: A model whose requests spent at least this share of Triton's time queued was saturated.
QUEUE_SHARE = 0.3


def late_causes(
    counters: RunCounters, models: Mapping[str, ModelServed], server_ms: Mapping[str, Mapping[str, Any]]
) -> dict[str, dict[str, Any]]:
    """Per model with late requests: how many, Triton's mean time per request and its queue share, and
    the verdict (``saturated`` or ``compute``). Reads a run's sensor statuses, the model that served each
    sensor and Triton's time per model (``server_ms``); empty when nothing was late."""
    late: dict[str, int] = {}
    for sensor, counts in counters.sensor_status.items():
        n = int(counts.get("late", 0))
        served = models.get(sensor)
        if n and served is not None and served.model:
            late[served.model] = late.get(served.model, 0) + n
    out: dict[str, dict[str, Any]] = {}
    for model, n in sorted(late.items()):
        server = server_ms.get(model)
        if not server or not server.get("requests"):
            continue  # no answered request to learn from: a fault, reported as such
        total, queue = float(server["total_ms"]), float(server["queue_ms"])
        out[model] = {
            "late": n,
            "server_ms": total,
            "queue_ms": queue,
            "cause": "saturated" if total > 0 and queue >= QUEUE_SHARE * total else "compute",
        }
    return out


def late_lines(causes: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """One line per model with late requests, naming the cause (see :func:`late_causes`)."""
    lines = []
    for model, c in causes.items():
        if c["cause"] == "saturated":
            lines.append(
                f"host saturated: {model} queued {c['queue_ms']:.1f} ms of {c['server_ms']:.1f} ms per request "
                f"({c['late']} late); lower --workers/--in-flight or use --rate lockstep"
            )
        else:
            lines.append(
                f"late: {model} {c['late']} late; Triton's time {c['server_ms']:.1f} ms per request, of which "
                f"{c['queue_ms']:.1f} ms queued: its compute, not queueing, outran the deadline"
            )
    return lines
