"""Latency accounting: per-frame records, percentile aggregation, reports."""

from __future__ import annotations

from perception.metrics._records import detection_json, frame_record
from perception.metrics._stats import LatencyAccumulator, percentiles

__all__ = ["LatencyAccumulator", "detection_json", "frame_record", "percentiles"]
