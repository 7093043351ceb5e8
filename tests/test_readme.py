"""The README's embedding example runs as written and gives fused detections."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _embedding_example() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text[text.index("### Embedding in a vehicle process") :]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match is not None, "README: no python block under 'Embedding in a vehicle process'"
    return match.group(1)


#: Run before the README block: every result of ``rt.process`` is also written as its record to
#: ``$README_RECORDS``, and the profile's frame budget is a minute. The deadline is the one thing relaxed,
#: as ``--rate lockstep`` relaxes it (every sensor awaited): on a loaded host a late sensor would otherwise
#: change a frame, and what is compared is what the session assembles (models, fusion, ego, frames).
_RECORDING_PRELUDE = """
import json, os
import perception
import perception.scheduler._runtime as _runtime
from perception.config import with_overrides
from perception.metrics import frame_record

_load = perception.load_config
perception.load_config = lambda path: with_overrides(_load(path), budget_ms=60_000)
_process = _runtime.Runtime.process

async def _recorded(self, frame):
    result = await _process(self, frame)
    with open(os.environ["README_RECORDS"], "a", encoding="utf-8") as f:
        f.write(json.dumps(frame_record(result)) + "\\n")
    return result

_runtime.Runtime.process = _recorded
"""


def _detections(path: Path) -> list[list[dict[str, object]]]:
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    return [r["detections"] for r in rows]


@pytest.mark.triton
@pytest.mark.slow
def test_readme_embedding_example_gives_the_replays_detections(tmp_path: Path) -> None:
    """The vehicle path of the README and ``perception replay --rate lockstep`` run one session: the same
    models, fusion settings, ego motion and frames, so the same detections in every frame (issue 27)."""
    records = tmp_path / "readme.jsonl"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        "README_RECORDS": str(records),
    }
    out = tmp_path / "replay"
    readme_argv = [sys.executable, "-c", _RECORDING_PRELUDE + _embedding_example()]
    replay_argv = [sys.executable, "-m", "perception", "replay", "replay_data/urban_seed7_10s.mcap",
                   "--rate", "lockstep", "--out", str(out), "--no-progress", "--no-fused-mcap"]  # fmt: skip

    def run(argv: list[str]) -> subprocess.CompletedProcess[str]:
        # the watchdog: a server start-up plus 100 frames take about a minute here
        return subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=400, check=False)

    # The two runs are independent (each its own embedded server; lockstep, and the README's minute-long
    # budget, make their frames whatever the load): side by side, as most of each is waiting.
    with ThreadPoolExecutor(2) as pool:
        proc_future, replay_future = pool.submit(run, readme_argv), pool.submit(run, replay_argv)
        proc, replay = proc_future.result(), replay_future.result()
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [line.split() for line in proc.stdout.splitlines()]
    assert len(rows) == 100, proc.stdout[-2000:]  # 10 s of 10 Hz lidar sweeps: one result per frame
    assert [int(r[0]) for r in rows] == list(range(100))
    assert {r[1] for r in rows} <= {"ok", "degraded"}
    objects = [int(r[2]) for r in rows]
    assert sum(n > 0 for n in objects) >= 90  # fused objects in (nearly) every frame, not zero detections

    assert replay.returncode == 0, replay.stderr[-3000:]
    # Every record names the model (and version) that served each sensor, and so does the report.
    report = json.loads((out / "report.json").read_text(encoding="utf-8"))
    served = {name: entry["model"] for name, entry in report["models"].items()}
    assert served == {"lidar_top": "lidar_detector", "radar_front": "radar_detector", "radar_rear": "radar_detector",
                      "cam_front": "camera_detector", "cam_back": "camera_detector"}, served  # fmt: skip
    assert all(entry["versions"] == ["1"] for entry in report["models"].values()), report["models"]
    for line in (out / "detections.jsonl").read_text(encoding="utf-8").splitlines():
        sensors = json.loads(line)["sensors"]
        assert {n: (e["model"], e["model_version"]) for n, e in sensors.items()} == {
            n: (m, "1") for n, m in served.items()
        }
    readme, replayed = _detections(records), _detections(out / "detections.jsonl")
    assert len(readme) == len(replayed) == 100
    differ = [i for i, (a, b) in enumerate(zip(readme, replayed, strict=True)) if a != b]
    assert not differ, f"frames {differ[:10]} differ; frame {differ[0]}: {readme[differ[0]]} vs {replayed[differ[0]]}"


def test_readme_lists_every_command() -> None:
    """The "What you get" block lists every subcommand of ``perception --help`` (``fleet`` was missing)."""
    from perception.cli._main import COMMANDS

    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text[text.index("## What you get") :]
    match = re.search(r"```text\n(.*?)```", section, re.S)
    assert match is not None, "README: no command list under 'What you get'"
    listed = re.findall(r"^perception ([a-z0-9-]+)", match.group(1), re.M)
    assert sorted(listed) == sorted(COMMANDS)


def test_readme_api_example_runs_as_written() -> None:
    """The "Embedding the runtime (API)" block: a profile loaded and changed, a bad path's one-line error."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text[text.index("## Embedding the runtime (API)") : text.index("### Embedding in a vehicle process")]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match is not None, "README: no python block under 'Embedding the runtime (API)'"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run(
        [sys.executable, "-c", match.group(1)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.splitlines() == [
        "127.0.0.1:8001 150",
        "launch/no_such_profile.yaml -> launch/no_such_profile.yaml: file not found",
    ]


#: Run after the README's sensor-kind blocks, as a user trying them would: a two-second simulated drive
#: with a thermal camera on the rig, its images the model's 16-bit PNGs with warm road users in them.
_THERMAL_DRIVE = """
import sys, tempfile
from pathlib import Path
from perception.drives import DriveReader
from perception.sim import generate_drive

RIG = '''
sensors:
  - {name: lidar_top, kind: lidar, mount: {xyz: [1.0, 0.0, 1.9]}, rate_hz: 10, lidar: {beams: 16}}
  - {name: thermal_front, kind: thermal, mount: {xyz: [1.6, 0.0, 1.5]}, rate_hz: 10,
     thermal: {width: 160, height: 120, focal_px: 100}}
'''
with tempfile.TemporaryDirectory() as tmp:
    rig, drive = Path(tmp) / "rig.yaml", Path(tmp) / "thermal.mcap"
    rig.write_text(RIG)
    generate_drive(drive, scenario="urban", seed=3, duration_s=2.0, rig=rig)
    with DriveReader(drive) as reader:
        images = [s for s in reader.samples() if s.sensor == "thermal_front"]
        model = kind_def(reader.rig["thermal_front"].kind).default_model
pixels = [np.asarray(Image.open(io.BytesIO(s.data))) for s in images]
print(len(images), model, pixels[0].dtype, sum(int((p == 45000).any()) for p in pixels) > 0)
"""


def test_readme_sensor_kind_examples_run_as_written() -> None:
    """The "Adding a sensor kind" blocks, one after the other as a user follows them: a kind and its
    simulator model registered, then a simulated drive with that kind on its rig."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text[text.index("### Adding a sensor kind") : text.index("### Embedding in a vehicle process")]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert len(blocks) == 2, "README: the kind's block and its simulator model's block"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run(
        [sys.executable, "-c", "\n".join([*blocks, _THERMAL_DRIVE])],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,  # the watchdog: a two-second simulated drive takes seconds
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split() == ["20", "thermal_detector", "uint16", "True"], proc.stdout
