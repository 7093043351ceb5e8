"""``DIR/report.md``: a replay's latency tables, detection quality and a few rendered frames on one page."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from perception._paths import REPORT_MD_FILE, safe_output_path
from perception.errors import PerceptionError
from perception.metrics import (
    BUDGET_PERCENTILE,
    BudgetRow,
    LatencyAccumulator,
    LatencyStats,
    RunReport,
    budget_rows,
    markdown_table,
    server_section,
    status_table,
    write_plots,
)
from perception.viz._load import frame_ids, load_frame_views
from perception.viz._render import render_frame

__all__ = ["write_replay_report"]

log = logging.getLogger(__name__)

FRAMES_DIR = "frames"


def _rows_from_report(report: RunReport) -> list[BudgetRow]:
    """Latency rows from the report's percentiles (no verdicts: the per-frame values are gone)."""
    lat = report.latency

    def row(stage: str, p: LatencyStats) -> BudgetRow:
        return BudgetRow(stage, p.p50, p.p95, p.p99, p.max, None, "-")

    rows = [row("total", lat.total or LatencyStats())]
    rows += [row(stage, p) for stage, p in lat.stages.items()]
    rows += [row(f"{s}.{stage}", p) for s, st in lat.sensors.items() for stage, p in st.items()]
    return rows


def _f(v: Any, fmt: str = ".3f") -> str:
    return "-" if v is None else format(v, fmt)


def _quality(q: Mapping[str, Any]) -> list[str]:
    lines = [
        "## Detection quality",
        "",
        f"Against ground truth within {_f(q.get('max_range_m'), 'g')} m, matched by centre distance "
        f"({', '.join(f'{t:g}' for t in q.get('thresholds_m', []))} m): mAP **{_f(q.get('mAP'))}**, "
        f"mean translation error {_f(q.get('ate'))} m, mean velocity error {_f(q.get('ave'))} m/s, "
        f"{q.get('id_switches', 0)} id switches over {q.get('frames', 0)} frames.",
        "",
        "| class | AP | ATE (m) | AVE (m/s) | ground truth | detections |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for label, ap in q.get("per_class_ap", {}).items():
        lines.append(
            f"| {label} | {_f(ap)} | {_f(q.get('per_class_ate', {}).get(label))} | "
            f"{_f(q.get('per_class_ave', {}).get(label))} | {q.get('num_ground_truth', {}).get(label, 0)} | "
            f"{q.get('num_detections', {}).get(label, 0)} |"
        )
    return lines


def _pick(ids: Sequence[int], n: int) -> list[int]:
    """``n`` frames spread over the replay (skipping the first, often still warming up)."""
    if not ids or n <= 0:
        return []
    if len(ids) <= n:
        return list(ids)
    return sorted({ids[round((i + 1) * (len(ids) - 1) / (n + 1))] for i in range(n)})


def _frames_section(out_dir: Path, frames: Sequence[int] | None, n_frames: int, range_m: float) -> list[str]:
    try:
        chosen = list(frames) if frames is not None else _pick(frame_ids(out_dir), n_frames)
        if not chosen:
            return ["## Frames", "", f"None rendered here: `perception render {out_dir} --frame N` draws any frame."]
        views = load_frame_views(out_dir, chosen)
    except PerceptionError as exc:
        log.warning("report.md: frames not rendered: %s", exc)
        return ["## Frames", "", f"Not rendered: {exc}"]
    lines = [
        "## Frames",
        "",
        "Bird's-eye view: lidar (grey), radar returns with their radial velocity (pink, 1 s of travel), "
        "ground truth (white, dashed), fused boxes coloured by the sensors that saw them. Cameras: fused "
        "boxes projected into the image, the camera model's own 2D detections dashed white.",
        "",
    ]
    for view in views:
        rendered = render_frame(view, out_dir / FRAMES_DIR, range_m=range_m)
        lines += [f"### Frame {view.frame_id} (t = {view.t_ns / 1e9:.3f} s, {view.status})", ""]
        lines += [f"![{r.name}]({FRAMES_DIR}/{r.path.name})" for r in rendered]
        lines.append("")
    return lines


def write_replay_report(
    out_dir: str | Path,
    report: RunReport,
    *,
    latency: LatencyAccumulator | None = None,
    frames: Sequence[int] | None = None,
    n_frames: int = 3,
    range_m: float = 60.0,
) -> Path:
    """Write ``out_dir/report.md`` for a replay whose outputs are in ``out_dir``; returns its path.

    ``report`` is the replay's report (``report.json``). With ``latency`` (the replay's accumulator) the
    total is checked against the frame deadline at :data:`perception.metrics.BUDGET_PERCENTILE` (p99) and the
    latency plots are added. ``frames`` (ids) are rendered under ``out_dir/frames/`` (default: ``n_frames``
    spread over the replay); a frame that cannot be rendered is noted in the report, not raised.
    """
    out = Path(out_dir)
    c = report.counters
    deadline = c.deadline_ms
    rows = budget_rows(latency, deadline, {}, BUDGET_PERCENTILE) if latency is not None else _rows_from_report(report)
    lines = [
        "# Replay report",
        "",
        f"Drive `{report.drive}` at rate `{report.rate}`: {c.frames} frames — "
        f"ok {c.ok}, degraded {c.degraded}, dropped {c.dropped}; "
        f"{c.deadline_misses} deadline misses (frame budget {deadline:g} ms).",
        "",
    ]
    if report.drive_truncated:
        lines += [f"**The drive is truncated**: {report.drive_truncated}", ""]
    if c.drop_reasons:
        reasons = ", ".join(f"{k} ({v})" for k, v in c.drop_reasons.items())
        lines += [f"Dropped frames: {reasons}.", ""]
    checked = f"the total is checked at p{BUDGET_PERCENTILE:g} against the frame budget"
    lines += ["## Latency", "", f"Milliseconds per frame; {checked}.", ""]
    lines += [*markdown_table(rows), ""]
    lines += server_section(report, latency)
    if c.sensor_status:
        lines += ["## Sensor status counts", "", *status_table(c.sensor_status), ""]
    if report.quality:
        lines += [*_quality(report.quality), ""]
    if latency is not None:
        plots = write_plots(out, latency, deadline)
        if plots:
            lines += ["## Latency plots", "", *(f"![{Path(p).stem}]({Path(p).name})" for p in plots), ""]
    lines += _frames_section(out, frames, n_frames, range_m)
    lines += ["", *report.damage_markdown()]
    path = safe_output_path(out, REPORT_MD_FILE)
    path.write_text("\n".join(lines).rstrip("\n") + "\n", encoding="utf-8")
    return path
