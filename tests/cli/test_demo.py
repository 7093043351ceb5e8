"""``launch/demo.sh``, the README's first command, run as a user runs it: the bundled drive replayed end
to end on its own embedded Triton with the reference models, and its printed summary checked."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
from pathlib import Path

import pytest
from reliability_helpers import REPO_ROOT

from perception.drives import DriveReader

DEMO = REPO_ROOT / "launch" / "demo.sh"
VENV = REPO_ROOT / ".venv"


def _set_up() -> str | None:
    """Why demo.sh would first install things (then this test does not run it), or None."""
    stamp = VENV / ".perception-installed"
    if not (VENV / "bin" / "python").exists() or not stamp.exists():
        return f"{VENV} is not set up: demo.sh would create it and pip-install the project first"
    want = hashlib.sha256((REPO_ROOT / "pyproject.toml").read_bytes()).hexdigest()
    if stamp.read_text().strip() != want:
        return "pyproject.toml changed since .venv was installed: demo.sh would pip-install first"
    if not (VENV / ".perception-kernels").exists():
        return "the fusion kernels are not compiled yet: demo.sh would compile them first"
    return None


@pytest.mark.slow
@pytest.mark.triton  # starts its own embedded server with the reference models
def test_demo_replays_the_bundled_drive_and_prints_its_summary(tmp_path: Path) -> None:
    reason = _set_up()
    if reason is not None:
        pytest.skip(reason)
    (drive,) = sorted((REPO_ROOT / "replay_data").glob("*.mcap"))
    with DriveReader(drive) as reader:
        sweeps = sum(1 for _ in reader.samples(sensors="lidar_top"))  # one frame per lidar sweep
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        ["bash", str(DEMO), "--out", str(out)],  # extra arguments go to perception replay
        capture_output=True,
        text=True,
        timeout=900,
        cwd=tmp_path,
        env=env,
        check=False,
    )
    log = done.stdout + done.stderr[-4000:]
    assert done.returncode == 0, log
    assert "Traceback" not in done.stderr, log
    counts = r"^frames (\d+): ok (\d+), degraded (\d+), dropped (\d+); latency p50 [\d.]+ ms, p99 [\d.]+ ms"
    summary = re.search(counts, done.stdout, re.M)
    assert summary, log
    frames, ok, degraded, dropped = map(int, summary.groups())
    assert frames == sweeps == ok + degraded + dropped
    assert ok > 0, log
    modes = r"^fused mAP ([\d.]+) vs best single sensor ([\d.]+) \((\w+)\): (above|NOT above)"
    fused = re.search(modes, done.stdout, re.M)
    assert fused, log
    assert float(fused.group(1)) >= 0.3, log  # the reference models and fusion find the drive's objects
    assert f"wrote {out / 'detections.jsonl'}" in done.stdout
    report = json.loads((out / "report.json").read_text())
    assert report["frames"] == frames and report["usable"] > 0
    records = (out / "detections.jsonl").read_text().splitlines()
    assert len(records) == frames and (out / "fused.mcap").is_file() and (out / "modes.json").is_file()
