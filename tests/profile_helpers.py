"""The live profile of the latency-bound test models (they wait instead of computing: a test of the live path,
not of the reference models' speed on a shared host), for the tests of several packages."""

from __future__ import annotations

from pathlib import Path


def sleepy_profile(tmp_path: Path, pipeline: str = "{queue_size: 100}") -> Path:
    """The profile written to ``tmp_path / "live.yaml"``, with margins a loaded host cannot break: samples may be
    2 s in transit, a frame's budget is seconds. ``pipeline``: its ``pipeline`` section (YAML flow mapping)."""
    profile = tmp_path / "live.yaml"
    profile.write_text(
        "sensor_defaults:\n"
        "  lidar: {model: sleepy_lidar, sync_window_ms: 60, max_staleness_ms: 150}\n"
        "  camera: {model: sleepy_camera, sync_window_ms: 50, max_staleness_ms: 150}\n"
        "  radar: {model: sleepy_radar, transport: grpc, sync_window_ms: 50, max_staleness_ms: 150}\n"
        "live: {transit_ms: 2000, trigger_tolerance_ms: 1000}\n"
        "budget: {total_ms: 5000, fusion_reserve_ms: 15}\n"
        f"pipeline: {pipeline}\n"
    )
    return profile
