"""``perception fleet --baseline`` end to end: the gate's verdict through the command, on real fleet outputs.

One real fleet run of two drives (the same simulated drive under two names, reference models on the
session's Triton and its Ray head, a frame deadline of seconds so that every frame is ok on a busy host) is the
baseline material. A rerun of the same drives is compared with it as it is, and with copies of it edited
so that the current run is worse by a known amount: within the ``--tolerance-*`` flags for one drive, far
beyond them for the other. Unit tests of the comparison itself are in ``test_baseline.py``.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from fleet_helpers import RayHead, RayHeads

from perception.cli import main
from perception.fleet import FLEET_JSON
from perception.server import EmbeddedTriton

pytestmark = [pytest.mark.triton, pytest.mark.slow]

FRAMES = 5


def _fleet(argv: list[str], url: str, head: RayHead) -> subprocess.CompletedProcess[str]:
    """``perception fleet`` as a user runs it, in its own process, on the session's server and Ray head."""
    args = [*argv, *head.join(url), "--workers", "1", "--rate", "lockstep", "--budget-ms", "20000"]
    return subprocess.run(
        [sys.executable, "-m", "perception", "fleet", *args, "--no-report-md", "--no-fused-mcap", "--no-progress"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env=head.env,
    )


@pytest.fixture(scope="module")
def head(ray_heads: RayHeads) -> RayHead:
    return ray_heads.current()


@pytest.fixture(scope="module")
def drives(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    d = tmp_path_factory.mktemp("baseline_drives")
    assert main(["sim", "--seed", "7", "--duration", "0.5", "-o", str(d / "d1.mcap"), "--no-progress"]) == 0
    shutil.copyfile(d / "d1.mcap", d / "d2.mcap")
    return [str(d / "d1.mcap"), str(d / "d2.mcap")]


@pytest.fixture(scope="module")
def base(drives: list[str], triton: EmbeddedTriton, head: RayHead, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("baseline_run") / "base"
    done = _fleet([*drives, "--out", str(out)], triton.grpc_url, head)
    assert done.returncode == 0, done.stdout + done.stderr + head.logs_tail()
    for name in ("d1", "d2"):
        report = json.loads((out / name / "report.json").read_text())
        assert report["frames"] == report["ok"] == FRAMES, report  # nothing late: the runs compare exactly
        assert report["quality"]["mAP"] > 0.3, report["quality"]
    return out


def _edit_report(drive: Path, edit: Any) -> None:
    path = drive / "report.json"
    report = json.loads(path.read_text())
    edit(report)
    path.write_text(json.dumps(report))


def _scale_latency(value: Any, factor: float, floor: float = 0.0) -> Any:
    """Every number of a ``latency_ms`` tree times ``factor``, at least ``floor`` (counts ``n`` kept)."""
    if isinstance(value, dict):
        return {k: v if k == "n" else _scale_latency(v, factor, floor) for k, v in value.items()}
    if isinstance(value, list):
        return [_scale_latency(v, factor, floor) for v in value]
    return max(value * factor, floor) if isinstance(value, int | float) and not isinstance(value, bool) else value


def _faster_baseline(drive: Path, factor: float, floor: float = 0.0) -> None:
    """The baseline drive as if every latency had been ``factor`` times what was measured (at least ``floor``)."""
    _edit_report(drive, lambda r: r.update(latency_ms=_scale_latency(r["latency_ms"], factor, floor)))
    path = drive / "detections.jsonl"
    records = [json.loads(line) for line in path.read_text().splitlines()]
    for r in records:
        r["latency_ms"] = _scale_latency(r["latency_ms"], factor, floor)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def _better_quality(drive: Path, by: float) -> None:
    """The baseline drive as if its mAP had been ``by`` higher."""

    def edit(r: dict[str, Any]) -> None:
        r["quality"]["mAP"] += by

    _edit_report(drive, edit)


def _more_frames(drive: Path, extra: int) -> None:
    """The baseline drive with ``extra`` more ok frames at its end: frames the current run lacks."""
    path = drive / "detections.jsonl"
    records = [json.loads(line) for line in path.read_text().splitlines()]
    last = records[-1]
    for i in range(1, extra + 1):
        records.append({**last, "frame_id": last["frame_id"] + i})
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def test_an_unchanged_rerun_passes_the_gate(
    drives: list[str], base: Path, triton: EmbeddedTriton, head: RayHead, tmp_path: Path
) -> None:
    # The same drives, models and profile again. Latency differs run to run on a shared host (its gate is
    # exercised below with a baseline made faster by a known factor); quality and frame statuses may not.
    out = tmp_path / "rerun"
    argv = [*drives, "--out", str(out), "--baseline", str(base)]
    done = _fleet([*argv, "--tolerance-latency-pct", "1000", "--tolerance-latency-ms", "1000"], triton.grpc_url, head)
    assert done.returncode == 0, done.stdout + done.stderr + head.logs_tail()
    assert f"baseline {base}: no regression" in done.stdout
    cmp = json.loads((out / FLEET_JSON).read_text())["baseline"]
    assert cmp["ok"] is True and cmp["regressions"] == []
    assert cmp["tolerances"]["map_drop"] == 0.01 and cmp["tolerances"]["status_changes"] == 0  # the defaults
    for name in ("d1", "d2"):
        drive = cmp["drives"][name]
        assert drive["state"] == "compared"
        assert drive["quality"]["delta"] == pytest.approx(0.0, abs=1e-9), drive["quality"]  # the same detections
        assert drive["status"]["compared"] == FRAMES and drive["status"]["worse"] == drive["status"]["better"] == 0


def test_tolerance_flags_decide_the_verdict(
    drives: list[str], base: Path, triton: EmbeddedTriton, head: RayHead, tmp_path: Path
) -> None:
    # The baseline edited so that the current run is worse: d1 within every tolerance given below, d2
    # far beyond each (none of these changes is anywhere near run-to-run noise).
    edited = tmp_path / "edited"
    shutil.copytree(base, edited)
    _better_quality(edited / "d1", 0.2)  # within --tolerance-map 0.3
    _better_quality(edited / "d2", 0.5)
    _more_frames(edited / "d1", 2)  # within --tolerance-status 2
    _more_frames(edited / "d2", 4)
    _faster_baseline(edited / "d2", 0.01)  # the current run 100 times slower: beyond +1000 % and 5 ms
    # d1's latencies: the current run cannot be slower than every stage at 1 s or more, so d1 stays within the
    # latency tolerances whatever the host's load (a busy host turned join_wait p99 0.5 -> 18 ms, past +5 ms)
    _faster_baseline(edited / "d1", 1.0, floor=1000.0)
    out = tmp_path / "current"
    flags = ["--tolerance-map", "0.3", "--tolerance-status", "2"]
    flags += ["--tolerance-latency-pct", "1000", "--tolerance-latency-ms", "5"]
    done = _fleet([*drives, "--out", str(out), "--baseline", str(edited), *flags], triton.grpc_url, head)
    assert done.returncode == 1, done.stdout + done.stderr
    cmp = json.loads((out / FLEET_JSON).read_text())["baseline"]
    assert cmp["tolerances"] == {"map_drop": 0.3, "latency_pct": 1000.0, "latency_ms": 5.0, "status_changes": 2}
    d1, d2 = cmp["drives"]["d1"], cmp["drives"]["d2"]
    assert d1["quality"]["delta"] == pytest.approx(-0.2) and d1["status"]["worse"] == 2
    assert d1["regressions"] == [], d1["regressions"]  # every change within its tolerance
    regs = d2["regressions"]
    assert any(r.startswith("d2: mAP") for r in regs), regs
    assert any(r.startswith("d2: 4 of") and "at most 2 allowed" in r for r in regs), regs
    assert any(r.startswith("d2: total p50") for r in regs), regs
    assert set(cmp["regressions"]) >= set(regs)
    assert f"baseline {edited}: {len(cmp['regressions'])} regression(s)" in done.stdout
