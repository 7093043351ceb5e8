from __future__ import annotations

from perception.scheduler import server_time_breakdown


def test_breakdown_is_the_mean_per_request_between_snapshots() -> None:
    before = {"m": {"success_count": 10, "queue_count": 10, "queue_ns": 50_000_000, "compute_infer_count": 10,
                    "compute_infer_ns": 200_000_000}}  # fmt: skip
    after = {"m": {"success_count": 14, "queue_count": 14, "queue_ns": 58_000_000, "compute_infer_count": 14,
                   "compute_infer_ns": 240_000_000}}  # fmt: skip
    out = server_time_breakdown(before, after)
    assert out["m"]["requests"] == 4
    assert out["m"]["queue_ms"] == 2.0
    assert out["m"]["compute_infer_ms"] == 10.0
    assert out["m"]["compute_input_ms"] == 0.0  # no requests counted for that stage
    assert out["m"]["total_ms"] == 12.0
    assert server_time_breakdown(before, {}) == {}
