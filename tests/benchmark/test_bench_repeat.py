"""``perception bench --repeat``: the headline ratios of several runs side by side (pure: no server)."""

from __future__ import annotations

from typing import Any

from perception.benchmark import render_markdown
from perception.benchmark._repeat import compare_runs


def _run(conc_p50: float, ci: list[float], shm: float) -> dict[str, Any]:
    ratios = {"latency_p50": conc_p50, "latency_p50_ci95": ci, "latency_p99": 0.8, "latency_p99_ci95": None,
              "throughput": 1.2, "throughput_ci95": [1.1, 1.3]}  # fmt: skip
    return {
        "dispatch": {"ratios": {"concurrent_over_sequential": ratios}},
        "transport": {
            "cases": [{"points": 1000, "shm_over_grpc_p50": shm, "shm_over_grpc_p50_ci95": [shm - 0.05, shm + 0.05]}]
        },
    }


def test_runs_agree_when_their_intervals_overlap() -> None:
    rows = {r["ratio"]: r for r in compare_runs([_run(0.9, [0.8, 1.0], 0.5), _run(0.95, [0.9, 1.05], 0.8)])}
    p50 = rows["concurrent / sequential, latency p50"]
    assert p50["values"] == [0.9, 0.95] and p50["agree_within_noise"] is True
    assert p50["relative_spread"] == round(0.05 / 0.925, 3)
    assert rows["concurrent / sequential, latency p99"]["agree_within_noise"] is None  # no interval: no verdict
    assert rows["shm / gRPC, 1000 points, p50"]["agree_within_noise"] is False  # 0.45-0.55 vs 0.75-0.85
    report = {"sections": {}, "reproducibility": list(rows.values())}
    md = render_markdown(report)
    assert "## Reproducibility" in md and "2 of 3 ratios agree within noise" in md
