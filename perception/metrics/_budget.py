"""Budget verdicts and the latency report (table, markdown, plots) for ``perception budget``."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from perception._paths import safe_output_path
from perception.metrics._latency import LatencyAccumulator, LatencySketch
from perception.metrics._run_report import RunCounters, RunReport, ServerSplit

__all__ = [
    "BUDGET_PERCENTILE",
    "NO_DATA",
    "SENSOR_ROWS",
    "BudgetRow",
    "budget_rows",
    "budget_violations",
    "incomplete_note",
    "markdown_table",
    "render_table",
    "server_rows",
    "server_section",
    "server_split_lines",
    "server_table",
    "status_table",
    "write_markdown",
    "write_plots",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class BudgetRow:
    stage: str
    p50: float
    p95: float
    p99: float
    max: float
    budget_ms: float | None
    verdict: str  # "ok", "FAIL", "no data" (a budget on something not measured) or "-" (no budget)

    def as_dict(self) -> dict[str, Any]:
        return {
            "stage": self.stage,
            "p50": self.p50,
            "p95": self.p95,
            "p99": self.p99,
            "max": self.max,
            "budget_ms": self.budget_ms,
            "verdict": self.verdict,
        }


#: A sensor's rows in the budget table (when measured); any other stage of its tree gets a row when it
#: has a budget.
SENSOR_ROWS = (
    "total",
    "preprocess",
    "serialize",
    "in_flight",
    "server_queue",
    "server_compute",
    "server_total",
    "overhead",
)
NO_DATA = "no data"
#: The percentile a budget is checked at unless one is given (``--percentile`` of ``perception budget`` and
#: ``perception fleet``); a replay's report.md checks its frame budget at it.
BUDGET_PERCENTILE = 99.0


def _row(stage: str, values: LatencySketch, budget_ms: float | None, percentile: float) -> BudgetRow:
    p = values.percentiles()
    verdict = "-"
    if budget_ms is not None:
        if not values:
            verdict = NO_DATA  # a budget on something never measured is not a pass
        else:
            observed = values.quantile(percentile) / 1e6
            verdict = "ok" if observed <= budget_ms else "FAIL"
    return BudgetRow(stage, p["p50"], p["p95"], p["p99"], p["max"], budget_ms, verdict)


def budget_violations(rows: Sequence[BudgetRow]) -> list[str]:
    """The stages whose budget is broken: measured above it, or never measured (not a pass)."""
    return [r.stage for r in rows if r.verdict in ("FAIL", NO_DATA)]


def incomplete_note(counters: RunCounters) -> str | None:
    """What a verdict holds of frames without every sensor's answer, per sensor and status (``cam_front late in
    30 of 100``), or None when every sensor answered ok in every frame processed. A late sensor's time is cut
    at the join deadline: its frames meet a budget the sensor did not, which the verdict alone would hide."""
    parts = [
        f"{sensor} {status} in {n} of {sum(counts.values())}"
        for sensor, counts in counters.sensor_status.items()
        for status in _STATUSES[1:]
        if (n := counts.get(status, 0))
    ]
    if not parts:
        return None
    late = any(counts.get("late", 0) for counts in counters.sensor_status.values())
    cut = " (a late sensor's time is counted only up to the join deadline)" if late else ""
    return "without every sensor: " + ", ".join(parts) + cut


def budget_rows(
    acc: LatencyAccumulator, total_budget_ms: float, stage_budgets: Mapping[str, float], percentile: float
) -> list[BudgetRow]:
    """One row for the total, one per stage, a few per sensor (:data:`SENSOR_ROWS`); a budget on a stage,
    on any stage of a sensor's tree (``<sensor>.<stage>``), on a sensor's total (``<sensor>``) or on
    Triton's time for a model (``server.<model>.<stage>``) is checked at ``percentile``. A budget on
    something this run never measured gets the verdict ``no data``."""
    rows = [_row("total", acc.total_ns, total_budget_ms, percentile)]
    used: set[str] = set()
    for stage, values in sorted(acc.stage_ns.items()):
        used.add(stage)
        rows.append(_row(stage, values, stage_budgets.get(stage), percentile))
    for sensor, stages in sorted(acc.sensor_ns.items()):
        shown = [k for k in SENSOR_ROWS if k in stages]
        if "in_flight" not in stages and "request" in stages:
            shown.append("request")  # a tree without the client's serialisation time
        shown += sorted(k for k in stages if k not in shown and f"{sensor}.{k}" in stage_budgets)
        for stage in shown:
            key = f"{sensor}.{stage}"
            budget = stage_budgets.get(key)
            if budget is None and stage == "total" and sensor in stage_budgets:
                budget = stage_budgets[sensor]
                used.add(sensor)
            used.add(key)
            rows.append(_row(key, stages[stage], budget, percentile))
    for model, stages in sorted(acc.server_ns.items()):
        for stage, values in stages.items():
            key = f"server.{model}.{stage}"
            if key in stage_budgets:
                used.add(key)
                rows.append(_row(key, values, stage_budgets[key], percentile))
    rows += [
        _row(key, LatencySketch(), budget, percentile)
        for key, budget in sorted(stage_budgets.items())
        if key not in used
    ]
    return rows


def server_rows(acc: LatencyAccumulator) -> list[BudgetRow]:
    """Triton's time per frame for each model and stage (queue, compute input/infer/output, total),
    over the frames it could be attributed to (see :class:`perception.metrics.ServerSplitter`)."""
    return [
        _row(f"{model}.{stage}", values, None, 99.0)
        for model, stages in sorted(acc.server_ns.items())
        for stage, values in stages.items()
    ]


def server_split_lines(split: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """One line per model: in how many frames Triton's time was attributed, and why not elsewhere."""
    lines = []
    for model, info in sorted(split.items()):
        why = ", ".join(f"{reason}: {n}" for reason, n in sorted(info.get("unavailable", {}).items()))
        done = f"- {model}: server time attributed in {info.get('frames', 0)} frame(s)"
        lines.append(done + (f"; not in {why}" if why else ""))
    return lines


def render_table(rows: Sequence[BudgetRow]) -> str:
    head = ("stage", "p50", "p95", "p99", "max", "budget", "verdict")
    body = [
        (
            r.stage,
            f"{r.p50:.2f}",
            f"{r.p95:.2f}",
            f"{r.p99:.2f}",
            f"{r.max:.2f}",
            "-" if r.budget_ms is None else f"{r.budget_ms:g}",
            r.verdict,
        )
        for r in rows
    ]
    widths = [max(len(str(x)) for x in col) for col in zip(head, *body, strict=True)]

    def line(cells: Sequence[str]) -> str:
        padded = [c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=True))]
        return "  ".join(padded)

    return "\n".join([line(head), line(["-" * w for w in widths]), *(line(b) for b in body)]) + "\n"


def server_table(server_ms: Mapping[str, Mapping[str, float]]) -> list[str]:
    """Markdown table of Triton's server-side time per model (mean ms per request), from the replay
    report's ``server_ms``; client time minus this is network, serialisation and client overhead."""
    if not server_ms:
        return []
    lines = [
        "| model | requests | queue | compute input | compute infer | compute output | server total |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for model, r in sorted(server_ms.items()):
        cells = [f"{r.get(k, 0.0):.2f}" for k in ("queue_ms", "compute_input_ms", "compute_infer_ms")]
        cells += [f"{r.get(k, 0.0):.2f}" for k in ("compute_output_ms", "total_ms")]
        lines.append(f"| {model} | {int(r.get('requests', 0))} | " + " | ".join(cells) + " |")
    return lines


_SPLIT_SOURCE = {
    "trace": "Per request, from Triton's trace (every request's own timestamps, at any number of frames in flight)",
    "statistics": "Per frame, from Triton's statistics read between frames (one frame in flight)",
}


def server_section(report: RunReport, acc: LatencyAccumulator | None) -> list[str]:
    """Markdown: Triton's own time -- per frame (percentiles) when it was split per frame, else the
    run's mean per request -- with how many frames it covers and why not the others."""
    split = report.server_split or ServerSplit(per_frame=False)
    per_frame = server_rows(acc) if acc is not None else []
    means = server_table(report.server_ms or {})
    if not per_frame and not means:
        return []
    lines = ["## Triton server side", ""]
    if per_frame:
        lines += [
            _SPLIT_SOURCE.get(split.source or "statistics", _SPLIT_SOURCE["statistics"])
            + " (ms; a model's requests of the frame summed). Each sensor's `in_flight` minus its "
            "`server_total` is its `overhead`: network, gRPC (de)serialisation and client scheduling; its "
            "`server_queue` vs `server_compute` is in the budget table.",
            "",
            *markdown_table(per_frame),
            "",
            *server_split_lines(split.models),
        ]
    else:
        why = split.why_not
        lines += [
            "Mean ms per request over the run"
            + (f" (no per-frame split: {why})" if why else "")
            + "; client time minus server total is network, serialisation and client overhead.",
            "",
            *means,
        ]
    return [*lines, ""]


def markdown_table(rows: Sequence[BudgetRow]) -> list[str]:
    """The rows as a markdown table (milliseconds), one line per list item."""
    lines = ["| stage | p50 | p95 | p99 | max | budget | verdict |", "|---|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        budget = "-" if r.budget_ms is None else f"{r.budget_ms:g}"
        lines.append(f"| {r.stage} | {r.p50:.2f} | {r.p95:.2f} | {r.p99:.2f} | {r.max:.2f} | {budget} | {r.verdict} |")
    return lines


def status_table(sensor_status: Mapping[str, Mapping[str, int]]) -> list[str]:
    """Per-sensor status counts (a report's ``sensor_status``) as a markdown table."""
    lines = ["| sensor | " + " | ".join(_STATUSES) + " |", "|---|" + "---:|" * len(_STATUSES)]
    for sensor, counts in sensor_status.items():
        lines.append(f"| {sensor} | " + " | ".join(str(counts.get(s, 0)) for s in _STATUSES) + " |")
    return lines


def write_markdown(
    path: Path,
    rows: Sequence[BudgetRow],
    report: RunReport,
    plots: Sequence[str],
    percentile: float,
    *,
    append: bool = False,
) -> None:
    """The budget report; with ``append`` and an existing report (the replay's ``report.md``, which has
    the sensor status counts and the same plots already) it is added to it as a section instead."""
    section = append and path.exists()
    c = report.counters
    lines = [
        "## Latency budget" if section else "# Latency budget report",
        "",
        f"Drive: `{report.drive}` — frames {c.frames}: ok {c.ok}, "
        f"degraded {c.degraded}, dropped {c.dropped}; deadline misses "
        f"{c.deadline_misses} (budget {c.deadline_ms:g} ms, checked at p{percentile:g}).",
        "",
        "All times in milliseconds.",
        "",
        *markdown_table(rows),
    ]
    note = incomplete_note(c)
    if note is not None:
        lines += ["", f"Frames {note}."]
    status = c.sensor_status
    if status and not section:
        lines += ["", "## Sensor status counts", "", *status_table(status)]
    if plots and not section:
        lines += ["", "## Plots", ""]
        lines += [f"![{Path(p).stem}]({Path(p).name})" for p in plots]
    text = "\n".join(lines) + "\n"
    if section:
        with path.open("a", encoding="utf-8") as f:
            f.write("\n" + text)
    else:
        path.write_text(text, encoding="utf-8")


_STATUSES = ("ok", "late", "error", "missing", "skipped")


def write_plots(out_dir: Path, acc: LatencyAccumulator, budget_ms: float) -> list[str]:
    """latency_over_time.png, breakdown.png, histogram.png (matplotlib, headless Agg backend)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written: list[str] = []
    if not acc.series:
        return written
    frames = np.array([s[0] for s in acc.series])
    totals = np.array([s[1] for s in acc.series]) / 1e6
    stages = sorted({k for s in acc.series for k in s[2]})
    per_stage = {k: np.array([s[2].get(k, 0) for s in acc.series]) / 1e6 for k in stages}

    fig, ax = plt.subplots(figsize=(10, 4))
    ax.plot(frames, totals, label="total", color="black", linewidth=1.2)
    for k in stages:
        ax.plot(frames, per_stage[k], label=k, linewidth=0.8)
    ax.axhline(budget_ms, color="red", linestyle="--", label=f"budget {budget_ms:g} ms")
    ax.set_xlabel("frame")
    ax.set_ylabel("ms")
    ax.set_title("Latency per stage over the drive")
    ax.legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    written.append(_save(fig, safe_output_path(out_dir, "latency_over_time.png")))

    fig, ax = plt.subplots(figsize=(10, 4))
    bottom = np.zeros_like(totals)
    for k in stages:
        ax.bar(frames, per_stage[k], bottom=bottom, label=k, width=1.0)
        bottom = bottom + per_stage[k]
    ax.axhline(budget_ms, color="red", linestyle="--", label=f"budget {budget_ms:g} ms")
    ax.set_xlabel("frame")
    ax.set_ylabel("ms")
    ax.set_title("Stacked latency breakdown")
    ax.legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    written.append(_save(fig, safe_output_path(out_dir, "breakdown.png")))

    fig, ax = plt.subplots(figsize=(7, 4))
    ax.hist(totals, bins=min(50, max(5, len(totals) // 3)), color="steelblue")
    ax.axvline(budget_ms, color="red", linestyle="--", label=f"budget {budget_ms:g} ms")
    ax.set_xlabel("frame latency (ms)")
    ax.set_ylabel("frames")
    ax.set_title("Frame latency histogram")
    ax.legend()
    fig.tight_layout()
    written.append(_save(fig, safe_output_path(out_dir, "histogram.png")))
    return written


def _save(fig: Any, path: Path) -> str:
    import matplotlib.pyplot as plt

    fig.savefig(path, dpi=100)
    plt.close(fig)
    return str(path)
