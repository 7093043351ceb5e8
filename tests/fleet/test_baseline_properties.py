"""Properties of the baseline gate: it is never less strict than it says.

* Tighter tolerances never let through what looser ones stop: a run that passes at tolerances T
  passes at any looser T', with no more regressions.
* A worse run never passes where a better one fails: a slower lidar model, or a camera failing in
  more frames, against the same baseline and tolerances.
* It flags exactly what exceeds its tolerances: a latency percentile, a class's AP, the mAP or the
  frames turned worse beyond what is allowed is a regression, and nothing within it is (checked
  against the values computed here and the evaluator's own reports, not the comparison's).
* An unchanged rerun passes even at zero tolerance.

The runs are written with the producers of ``test_baseline.py`` (no Triton): each example writes its
own small runs into a temporary directory.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from perception.fleet._baseline import Tolerances, compare_runs

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_baseline import FRAMES, write_drive

#: Latency percentiles come from fixed-size summaries (0.5 % relative error): the oracle leaves them
#: a margin either side of a tolerance; AP values are compared exactly (both sides read the same report).
MARGIN_MS, MARGIN_PCT = 0.5, 1.5

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])

tolerances = st.builds(
    Tolerances,
    map_drop=st.sampled_from([0.0, 0.005, 0.01, 0.05, 0.2, 1.0]),
    latency_pct=st.sampled_from([0.0, 1.0, 5.0, 10.0, 30.0, 100.0]),
    latency_ms=st.sampled_from([0.0, 0.5, 1.0, 5.0, 20.0]),
    status_changes=st.integers(0, FRAMES),
)
slowness = st.sampled_from([0.8, 1.0, 1.02, 1.1, 1.3, 2.0])
failing = st.sets(st.integers(0, FRAMES - 1), max_size=FRAMES)


def _looser(t: Tolerances, extra: tuple[float, float, float, int]) -> Tolerances:
    return Tolerances(
        map_drop=t.map_drop + extra[0],
        latency_pct=t.latency_pct + extra[1],
        latency_ms=t.latency_ms + extra[2],
        status_changes=t.status_changes + extra[3],
    )


@SETTINGS
@given(
    tol=tolerances,
    extra=st.tuples(
        st.sampled_from([0.0, 0.01, 0.5]),
        st.sampled_from([0.0, 5.0, 50.0]),
        st.sampled_from([0.0, 1.0, 10.0]),
        st.integers(0, 5),
    ),
    slow=slowness,
    cam_error=failing,
)
def test_looser_tolerances_never_add_a_regression(
    tol: Tolerances, extra: tuple[float, float, float, int], slow: float, cam_error: set[int]
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        write_drive(root / "base", "drive")
        write_drive(root / "cur", "drive", slow=slow, cam_error=cam_error)
        strict = compare_runs(root / "cur", root / "base", tol)
        loose = compare_runs(root / "cur", root / "base", _looser(tol, extra))
    assert len(loose.regressions) <= len(strict.regressions), (strict.regressions, loose.regressions)
    assert not strict.ok or loose.ok


@SETTINGS
@given(
    tol=tolerances,
    slow=slowness,
    more_slow=st.sampled_from([0.0, 0.05, 0.3, 1.0]),
    cam_error=failing,
    more_errors=failing,
)
def test_a_worse_run_never_passes_where_a_better_one_fails(
    tol: Tolerances, slow: float, more_slow: float, cam_error: set[int], more_errors: set[int]
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        write_drive(root / "base", "drive")
        write_drive(root / "better", "drive", slow=slow, cam_error=cam_error)
        write_drive(root / "worse", "drive", slow=slow + more_slow, cam_error=cam_error | more_errors)
        better = compare_runs(root / "better", root / "base", tol)
        worse = compare_runs(root / "worse", root / "base", tol)
    assert better.ok or not worse.ok, (better.regressions, worse.regressions)


@SETTINGS
@given(slow=slowness, cam_error=failing)
def test_an_unchanged_rerun_passes_at_zero_tolerance(slow: float, cam_error: set[int]) -> None:
    zero = Tolerances(map_drop=0.0, latency_pct=0.0, latency_ms=0.0, status_changes=0)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for run in ("base", "cur"):
            write_drive(root / run, "drive", slow=slow, cam_error=cam_error)
        cmp = compare_runs(root / "cur", root / "base", zero)
    assert cmp.ok, cmp.regressions


def _lidar_p50_ms(slow: float) -> float:
    """The lidar model's p50 in a run written by ``write_drive`` (its formula, computed here)."""
    return float(np.percentile([(40.0 + fid % 7) * slow for fid in range(FRAMES)], 50))


#: A tolerance as a multiple of the actual change: the oracle test puts tolerances on both sides of it.
around = st.sampled_from([0.0, 0.5, 0.9, 1.1, 2.0])


@settings(SETTINGS, max_examples=150)
@given(
    slow=slowness,
    cam_error=failing,
    f_ms=around,
    f_pct=around,
    f_map=around,
    status_offset=st.sampled_from([-1, 0, 1, 3]),
)
def test_the_gate_flags_exactly_what_exceeds_its_tolerances(
    slow: float, cam_error: set[int], f_ms: float, f_pct: float, f_map: float, status_offset: int
) -> None:
    base_ms, cur_ms = _lidar_p50_ms(1.0), _lidar_p50_ms(slow)
    d_ms, d_pct = cur_ms - base_ms, 100.0 * (cur_ms - base_ms) / base_ms
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        write_drive(root / "base", "drive")
        write_drive(root / "cur", "drive", slow=slow, cam_error=cam_error)
        bq, cq = (json.loads((root / run / "drive" / "report.json").read_text())["quality"] for run in ("base", "cur"))
        tol = Tolerances(
            map_drop=max(0.0, f_map * (bq["mAP"] - cq["mAP"])),
            latency_pct=max(0.0, f_pct * d_pct),
            latency_ms=max(0.0, f_ms * d_ms),
            status_changes=max(0, len(cam_error) + status_offset),
        )
        regs = compare_runs(root / "cur", root / "base", tol).drive("drive").regressions

    def flagged(prefix: str) -> bool:
        return any(r.startswith(f"drive: {prefix}") for r in regs)

    # latency: the lidar's p50, beyond both tolerances or within one
    if d_ms > tol.latency_ms + MARGIN_MS and d_pct > tol.latency_pct + MARGIN_PCT:
        assert flagged("sensor lidar_top p50"), (d_ms, d_pct, tol, regs)
    if d_ms < tol.latency_ms - MARGIN_MS or d_pct < tol.latency_pct - MARGIN_PCT:
        assert not flagged("sensor lidar_top p50"), (d_ms, d_pct, tol, regs)
    # quality: every class's AP and the mAP, as the evaluator reported them
    for label, ap in bq["per_class_ap"].items():
        if ap is None or cq["per_class_ap"].get(label) is None:
            continue
        drop = ap - cq["per_class_ap"][label]
        if abs(drop - tol.map_drop) > 1e-9:
            assert flagged(f"class {label} AP") == (drop > tol.map_drop), (label, drop, tol, regs)
    map_drop = bq["mAP"] - cq["mAP"]
    if abs(map_drop - tol.map_drop) > 1e-9:
        assert flagged("mAP") == (map_drop > tol.map_drop), (map_drop, tol, regs)
    # status: every frame with a failing camera turned ok -> degraded
    assert any("frames turned worse" in r for r in regs) == (len(cam_error) > tol.status_changes), (cam_error, regs)
