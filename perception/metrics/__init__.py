"""Latency accounting: per-frame records and latency trees (client/server split per request), percentile
aggregation, budget verdicts and reports."""

from __future__ import annotations

from perception.metrics._budget import (
    BudgetRow,
    budget_rows,
    budget_violations,
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
from perception.metrics._records import frame_record
from perception.metrics._saturation import late_causes, late_lines
from perception.metrics._server_split import ServerSplitter, with_in_flight

__all__ = [
    "RELATIVE_ERROR",
    "BudgetRow",
    "LatencyAccumulator",
    "LatencySketch",
    "PrometheusExporter",
    "ServerSplitter",
    "budget_rows",
    "budget_violations",
    "frame_record",
    "late_causes",
    "late_lines",
    "markdown_table",
    "percentiles",
    "render_table",
    "server_rows",
    "server_section",
    "server_split_lines",
    "server_table",
    "status_table",
    "with_in_flight",
    "write_markdown",
    "write_plots",
]
