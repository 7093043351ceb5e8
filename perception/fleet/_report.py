"""``OUT/fleet.json`` and ``OUT/fleet.md``: per drive, worst first, then the totals."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from perception.fleet._baseline import BaselineComparison
from perception.fleet._outputs import FLEET_JSON
from perception.fleet._summary import POOLED, STATUSES, DriveSummary, FleetTotals
from perception.metrics import RELATIVE_ERROR, LatencySketch, RunCounters, incomplete_note

__all__ = ["FLEET_JSON", "FLEET_MD", "fleet_totals", "write_report"]

FLEET_MD = "fleet.md"

#: Worst first: a drive that failed, then damaged, interrupted, over budget, then by p99.
_RANK = {s: i for i, s in enumerate(STATUSES)}


def _worst_first(d: DriveSummary) -> tuple[int, int, float]:
    return (_RANK.get(d.status, 0), 0 if d.over_budget else 1, -d.p99_ms)


def totals(drives: Sequence[DriveSummary], total_ns: LatencySketch) -> FleetTotals:
    by_status: dict[str, int] = {}
    for d in drives:
        by_status[d.status] = by_status.get(d.status, 0) + 1
    maps = [d.map for d in drives if d.map is not None]
    scored = [d.modes for d in drives if d.modes]
    modes = list(dict.fromkeys(m for ms in scored for m in ms))
    # the replayed drives' counters added up, per sensor and status too (what the budget verdict states)
    pooled = RunCounters.pooled(d.replayed.counters for d in drives if d.replayed is not None)
    return FleetTotals(
        drives=len(drives),
        by_status=by_status,
        budget_broken=sum(1 for d in drives if d.over_budget),
        retried=sum(1 for d in drives if d.retries),
        **{k: getattr(pooled, k) for k in POOLED},
        # every frame of every drive pooled (not a mean of the drives' percentiles): the drives'
        # latency sketches merged, exact in n/min/max/mean, percentiles within metrics.RELATIVE_ERROR
        latency_ms=total_ns.percentiles(),
        latency_percentile_relative_error=RELATIVE_ERROR,
        # the mean over drives with ground truth, each drive counting once
        mean_drive_mAP=_mean(maps),
        drives_with_mAP=len(maps),
        # replayed drives that have no ground truth to score (not an error: their mAP is None)
        drives_without_ground_truth=tuple(d.name for d in drives if d.ground_truth is False),
        # --eval: each sensor mode's mAP, the mean over the drives scored in it (each counting once)
        mean_mode_mAP={m: _mean([v for ms in scored if (v := ms.get(m)) is not None]) for m in modes} or None,
        # where the time went: the workers' replays, and Ray's share of each task beyond them
        worker_s=round(sum(d.wall_s or 0.0 for d in drives), 3),
        worker_cpu_s=round(sum(d.cpu_s or 0.0 for d in drives), 3),
        ray_overhead_s=round(sum(d.ray_overhead_s or 0.0 for d in drives), 3),
    )


def _mean(values: Sequence[float]) -> float | None:
    return round(sum(values) / len(values), 6) if values else None


def fleet_totals(summaries: Sequence[DriveSummary]) -> FleetTotals:
    """The totals over a fleet run's drives (``fleet.json``'s ``totals``; the CLI prints them)."""
    pooled = LatencySketch()
    for s in summaries:
        if s.total_sketch is not None:
            pooled.merge(LatencySketch.from_dict(dict(s.total_sketch)))
    return totals(sorted(summaries, key=_worst_first), pooled)


def write_report(
    out: Path,
    summaries: Sequence[DriveSummary],
    meta: Mapping[str, Any],
    baseline: BaselineComparison | None = None,
    *,
    fleet: FleetTotals | None = None,
) -> dict[str, Any]:
    """Write ``fleet.json`` and ``fleet.md``; returns what ``fleet.json`` holds. ``fleet``: the totals
    over ``summaries`` when the caller has them (:func:`fleet_totals`)."""
    drives = sorted(summaries, key=_worst_first)
    report: dict[str, Any] = {
        "version": 1,
        **meta,
        "totals": (fleet or fleet_totals(summaries)).to_json(),
        "drives": [d.to_json() for d in drives],
    }
    lines = markdown(report)
    if baseline is not None:
        report["baseline"] = baseline.as_dict()
        lines += ["", *baseline.markdown_lines()]
    (out / FLEET_JSON).write_text(json.dumps(report, indent=2) + "\n")
    (out / FLEET_MD).write_text("\n".join(lines) + "\n")
    return report


def _total_text(d: Mapping[str, Any], key: str) -> str:
    v = d.get("latency_ms", {}).get("total", {}).get(key)
    return "-" if v is None else f"{v:.1f}"


def _note(counts: Mapping[str, Any]) -> str | None:
    """:func:`perception.metrics.incomplete_note` of a drive or of the totals as ``fleet.json`` holds them."""
    return incomplete_note(RunCounters(sensor_status=counts.get("sensor_status") or {}))


def _verdict(d: Mapping[str, Any]) -> str:
    b = d.get("budget")
    if not b:
        return "-"
    verdict = "pass" if b.get("passed") else "FAIL (" + ", ".join(b.get("violations", [])) + ")"
    note = _note(d)  # a late sensor's time is cut at the join deadline: a pass over its frames says so
    return verdict if note is None else f"{verdict}; {note}"


def markdown(report: Mapping[str, Any]) -> list[str]:
    t = report["totals"]
    lat = t["latency_ms"]
    lines = [
        "# Fleet replay",
        "",
        f"{t['drives']} drives on {report.get('workers')} workers ({report.get('address')}), "
        f"servers: {report.get('servers')}; {report.get('wall_s', 0):.1f} s wall.",
        "",
        "## Drives (worst first)",
        "",
        "| drive | status | frames | ok / degraded / dropped | p50 ms | p99 ms | budget | mAP | attempts | error |",
        "|---|---|---:|---|---:|---:|---|---:|---:|---|",
    ]
    for d in report["drives"]:
        err = " ".join(str(d.get("error") or "").split())[:160]
        retries = "; ".join(d.get("retries", []))
        lines.append(
            f"| {d['name']} | {d.get('status')} | {d.get('frames', 0)} | {d.get('ok', 0)} / {d.get('degraded', 0)} / "
            f"{d.get('dropped', 0)} | {_total_text(d, 'p50')} | {_total_text(d, 'p99')} | {_verdict(d)} | "
            f"{_map(d)} | {d.get('attempts', 1)} | {err or retries} |"
        )
    mean_map = t["mean_drive_mAP"]
    without = t.get("drives_without_ground_truth") or []
    lines += [
        "",
        "## Totals",
        "",
        f"- drives: {', '.join(f'{k} {v}' for k, v in sorted(t['by_status'].items()))}; "
        f"over budget {t['budget_broken']}; retried {t['retried']}",
        f"- frames {t['frames']}: ok {t['ok']}, degraded {t['degraded']}, dropped {t['dropped']}; "
        f"deadline misses {t['deadline_misses']}",
        *([f"- frames {note}"] if (note := _note(t)) is not None else []),
        f"- latency over every frame: p50 {lat['p50']:.1f} ms, p99 {lat['p99']:.1f} ms (n {lat['n']})",
        f"- mean mAP over {t['drives_with_mAP']} drives with ground truth: "
        + ("-" if mean_map is None else f"{mean_map:.3f}")
        + (f"; {len(without)} without ground truth ({', '.join(without)})" if without else ""),
    ]
    phase = report.get("drive_phase_s")
    if phase:
        lines.append(
            f"- time: {phase:.1f} s from the first drive sent to the last answered "
            f"({t['frames'] / phase:.1f} frames/s); "
            f"workers replaying {t['worker_s']:.1f} s (CPU {t['worker_cpu_s']:.1f} s), "
            f"Ray task overhead {t['ray_overhead_s']:.2f} s in all"
        )
    return lines + _modes_lines(report)


def _map(d: Mapping[str, Any]) -> str:
    m = d.get("mAP")
    if m is not None:
        return f"{m:.3f}"
    return "no ground truth" if d.get("ground_truth") is False else "-"


def _modes_lines(report: Mapping[str, Any]) -> list[str]:
    """``--eval``: mAP per drive in each sensor mode (modes.json has the rest), then each mode's mean."""
    means = report["totals"].get("mean_mode_mAP")
    evaluated = [d for d in report["drives"] if "modes" in d]
    if not evaluated:
        return []
    modes = list(means or {})
    lines = [
        "",
        "## mAP per sensor mode (--eval; OUT/<drive>/modes.json)",
        "",
        "Each mode re-runs fusion offline on the replay's sensor outputs with the other sensors masked; "
        "the drive table's mAP scores the detections the replay emitted, so `fused` can differ from it slightly.",
        "",
        "| drive | " + " | ".join(modes) + " |" if modes else "| drive | mAP per mode |",
        "|---|" + "---:|" * max(len(modes), 1),
    ]
    for d in sorted(evaluated, key=lambda d: str(d["name"])):
        scored = d.get("modes")
        if scored:
            cells = ["-" if scored.get(m) is None else f"{scored[m]:.3f}" for m in modes]
        else:
            why = "no ground truth" if d.get("ground_truth") is False else f"not scored ({d.get('status')})"
            cells = [why] + [""] * (len(modes) - 1)
        lines.append(f"| {d['name']} | " + " | ".join(cells) + " |")
    if means:
        n = sum(1 for d in evaluated if d.get("modes"))
        cells = ["-" if v is None else f"{v:.3f}" for v in means.values()]
        lines.append(f"| **mean over {n} drive(s)** | " + " | ".join(cells) + " |")
    return lines
