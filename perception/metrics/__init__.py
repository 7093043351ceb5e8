"""Latency accounting: per-frame records, percentile aggregation, budget verdicts and reports."""

from __future__ import annotations

from perception.metrics._budget import (
    BudgetRow,
    budget_rows,
    markdown_table,
    render_table,
    server_table,
    status_table,
    write_markdown,
    write_plots,
)
from perception.metrics._prometheus import PrometheusExporter
from perception.metrics._records import detection_json, frame_record
from perception.metrics._stats import LatencyAccumulator, percentiles

__all__ = [
    "BudgetRow",
    "LatencyAccumulator",
    "PrometheusExporter",
    "budget_rows",
    "detection_json",
    "frame_record",
    "markdown_table",
    "percentiles",
    "render_table",
    "server_table",
    "status_table",
    "write_markdown",
    "write_plots",
]
