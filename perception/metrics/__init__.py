"""Latency accounting: per-frame records and latency trees (client/server split per request), percentile
aggregation, budget verdicts and reports; a run's report (report.json) as one typed object, :class:`RunReport`."""

from __future__ import annotations

from perception.metrics._budget import (
    BUDGET_PERCENTILE,
    BudgetRow,
    budget_rows,
    budget_violations,
    incomplete_note,
    markdown_table,
    render_table,
    server_rows,
    server_section,
    server_split_lines,
    server_table,
    status_table,
    write_markdown,
    write_plots,
)
from perception.metrics._latency import RELATIVE_ERROR, LatencyAccumulator, LatencySketch, percentiles
from perception.metrics._prometheus import PrometheusExporter
from perception.metrics._records import FrameRecord, frame_record, read_frame_records
from perception.metrics._run_report import (
    BudgetVerdict,
    LatencyStats,
    ModelServed,
    RunCounters,
    RunReport,
    ServerSplit,
)
from perception.metrics._saturation import late_causes, late_lines
from perception.metrics._server_split import ServerSplitter, TraceSplitter, with_in_flight
from perception.metrics._timeline import ChromeTrace, timeline_sink

__all__ = [
    "BUDGET_PERCENTILE",
    "RELATIVE_ERROR",
    "BudgetRow",
    "BudgetVerdict",
    "ChromeTrace",
    "FrameRecord",
    "LatencyAccumulator",
    "LatencySketch",
    "LatencyStats",
    "ModelServed",
    "PrometheusExporter",
    "RunCounters",
    "RunReport",
    "ServerSplit",
    "ServerSplitter",
    "TraceSplitter",
    "budget_rows",
    "budget_violations",
    "frame_record",
    "incomplete_note",
    "late_causes",
    "late_lines",
    "markdown_table",
    "percentiles",
    "read_frame_records",
    "render_table",
    "server_rows",
    "server_section",
    "server_split_lines",
    "server_table",
    "status_table",
    "timeline_sink",
    "with_in_flight",
    "write_markdown",
    "write_plots",
]
