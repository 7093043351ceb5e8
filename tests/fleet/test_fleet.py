"""``perception fleet`` on a real local Ray cluster, with the real embedded Triton.

Two fleet runs share one set of drives (module fixture): the first has a broken drive, a worker killed
mid-drive and an impossible budget; the second, with a model made slower, is compared with the first
as its baseline. Each run starts and stops its own local cluster and server; after each, nothing of
them may be left running and nothing of theirs in ``/dev/shm``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from perception.cli import main
from perception.fleet import FLEET_JSON, FLEET_MD
from perception.server._procs import pid_alive
from perception.triton import shm_owner_pid

pytestmark = [pytest.mark.triton, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
PROFILE = ROOT / "launch" / "replay.yaml"


def _sim(out: Path, seed: int, duration: float) -> None:
    assert main(["sim", "--seed", str(seed), "--duration", str(duration), "-o", str(out), "--no-progress"]) == 0


@pytest.fixture(scope="module")
def drives(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("drives")
    _sim(d / "a.mcap", 1, 2.0)
    _sim(d / "b.mcap", 2, 2.0)
    good = (d / "b.mcap").read_bytes()
    (d / "broken.mcap").write_bytes(good[: len(good) // 40])  # cut inside the first chunk
    return d


#: In the environment of every process these tests start (the CLI and, inheriting it, Ray's processes,
#: the workers, their Triton servers and backend stubs): what is left running is judged by it, so
#: the clusters and servers of others on a shared machine (and this session's own server) do not count.
MARK = ("PERCEPTION_FLEET_TEST", str(os.getpid()))
_SHM_BEFORE = frozenset(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else frozenset()


def _env() -> dict[str, str]:
    return {**os.environ, MARK[0]: MARK[1]}


def _ours() -> dict[int, str]:
    """Our live processes (pid: command line): those with :data:`MARK` in their environment."""
    mark = f"{MARK[0]}={MARK[1]}".encode()
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            env = (entry / "environ").read_bytes().split(b"\0")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
            argv = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, IndexError):
            continue
        if mark in env and state not in ("Z", "X"):
            found[int(entry.name)] = argv.strip()[:300]
    return found


def _leftovers() -> list[str]:
    """Our processes still running (Ray's, Triton's, workers...) and ``/dev/shm`` entries that appeared
    since this module was loaded and belong to one of them or to a process that is gone."""
    procs = _ours()
    shm = []
    for name in sorted(set(os.listdir("/dev/shm")) - _SHM_BEFORE):
        owner = shm_owner_pid(name)
        if name.startswith("triton_python_backend") or (owner is not None and (owner in procs or not pid_alive(owner))):
            shm.append(f"/dev/shm/{name}")
    return [f"{pid} {cmd}" for pid, cmd in sorted(procs.items())] + shm


def _kill_first_attempt(out: Path, name: str, done: threading.Event, killed: list[int]) -> None:
    """SIGKILL the worker that starts drive ``name`` (its staging dir names the attempt and its pid)."""
    staging = out / ".staging"
    while not done.is_set():
        for entry in staging.glob(f"{name}.1.*") if staging.is_dir() else []:
            pid = int(entry.name.rsplit(".", 1)[1])
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
            return
        time.sleep(0.01)


def _run(argv: list[str], timeout_s: float = 300.0) -> int:
    """``perception fleet ...`` as a user runs it, in its own process; a hang fails the test (timeout)."""
    done = subprocess.run([sys.executable, "-m", "perception", *argv], timeout=timeout_s, check=False, env=_env())
    return done.returncode


def _records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture(scope="module")
def first_run(drives: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int, list[int]]:
    out = tmp_path_factory.mktemp("fleet") / "out"
    out.mkdir()
    done, killed = threading.Event(), list[int]()
    killer = threading.Thread(target=_kill_first_attempt, args=(out, "a", done, killed), daemon=True)
    killer.start()
    try:
        code = _run(["fleet", str(drives), "--out", str(out), "--workers", "2", "--no-progress"])
    finally:
        done.set()
    return out, code, killed


def test_every_drive_is_reported_once_with_one_record_per_frame(first_run: tuple[Path, int, list[int]]) -> None:
    out, _, _ = first_run
    report = json.loads((out / FLEET_JSON).read_text())
    by_name = {d["name"]: d for d in report["drives"]}
    assert set(by_name) == {"a", "b", "broken"}
    for name in ("a", "b"):
        d = by_name[name]
        assert d["status"] == "ok", d
        records = _records(out / name / "detections.jsonl")
        ids = [r["frame_id"] for r in records]
        assert len(ids) == len(set(ids)) == d["frames"] > 0
        assert json.loads((out / name / "report.json").read_text())["frames"] == d["frames"]
        assert (out / name / "fused.mcap").is_file()
    assert not (out / ".staging").exists()
    assert report["totals"]["frames"] == by_name["a"]["frames"] + by_name["b"]["frames"] + by_name["broken"].get(
        "frames", 0
    )
    assert "broken" in (out / FLEET_MD).read_text()
    assert report["drives"][0]["name"] == "broken"  # worst first


def test_a_broken_drive_is_reported_with_its_error(first_run: tuple[Path, int, list[int]]) -> None:
    out, _, _ = first_run
    broken = next(d for d in json.loads((out / FLEET_JSON).read_text())["drives"] if d["name"] == "broken")
    assert broken["status"] in ("failed", "damaged")
    assert "broken.mcap" in broken["error"]
    # worst first: the broken drive heads the report
    assert json.loads((out / FLEET_JSON).read_text())["drives"][0]["name"] == "broken"


def test_a_killed_worker_s_drive_is_retried_without_duplicates(first_run: tuple[Path, int, list[int]]) -> None:
    out, _, killed = first_run
    assert killed, "the worker of drive a was never seen starting it"
    a = next(d for d in json.loads((out / FLEET_JSON).read_text())["drives"] if d["name"] == "a")
    assert a["status"] == "ok"
    assert a["attempts"] == 2 and len(a["retries"]) == 1 and "worker died" in a["retries"][0]
    assert a["pid"] != killed[0]
    ids = [r["frame_id"] for r in _records(out / "a" / "detections.jsonl")]
    assert len(ids) == len(set(ids)) == a["frames"]


def test_a_failed_drive_sets_the_exit_code(first_run: tuple[Path, int, list[int]]) -> None:
    _, code, _ = first_run
    assert code == 1  # the broken drive


def test_the_budget_verdict_sets_the_exit_code(drives: Path, tmp_path: Path) -> None:
    # --budget-ms is also the runtime's frame budget, as in `perception budget`: 1 ms breaks it in any case
    out = tmp_path / "out"
    code = _run(["fleet", str(drives / "a.mcap"), "--out", str(out), "--budget-ms", "1", "--no-progress"])
    assert code == 1
    (a,) = json.loads((out / FLEET_JSON).read_text())["drives"]
    assert a["budget"]["passed"] is False and "total" in a["budget"]["violations"]
    assert json.loads((out / FLEET_JSON).read_text())["totals"]["budget_broken"] == 1
    assert _leftovers() == []


def test_nothing_is_left_running(first_run: tuple[Path, int, list[int]]) -> None:
    assert _leftovers() == []


def test_a_baseline_comparison_catches_a_slower_model(
    drives: Path, first_run: tuple[Path, int, list[int]], tmp_path: Path
) -> None:
    baseline, _, _ = first_run
    slow = tmp_path / "slow.yaml"
    text = PROFILE.read_text().replace("faults: []", "faults: [{model: radar_detector, delay_ms: 60}]")
    slow.write_text(text.replace("models: [models]", f"models: [{ROOT / 'models'}]"))
    out = tmp_path / "out"
    good = [str(drives / "a.mcap"), str(drives / "b.mcap")]
    code = _run(
        ["fleet", *good, "--out", str(out), "--config", str(slow), "--baseline", str(baseline), "--no-progress"]
    )
    assert code == 1
    report = json.loads((out / FLEET_JSON).read_text())
    assert all(d["status"] == "ok" for d in report["drives"])
    regressions = report["baseline"]["regressions"]
    assert any("radar" in r for r in regressions), regressions
    assert "regression" in (out / FLEET_MD).read_text().lower()
    assert _leftovers() == []


def test_a_server_that_cannot_start_is_one_line(drives: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(PROFILE.read_text().replace("models: [models]", f"models: [{tmp_path / 'nowhere'}]"))
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "perception",
            "fleet",
            str(drives / "a.mcap"),
            "--out",
            str(tmp_path / "o"),
            "--config",
            str(bad),
            "--no-progress",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env=_env(),
    )
    assert done.returncode == 2, done.stderr
    assert "nowhere" in done.stderr and "Traceback" not in done.stderr
    assert _leftovers() == []


def test_a_missing_baseline_is_a_usage_error(drives: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["fleet", str(drives), "--out", str(tmp_path / "o"), "--baseline", str(tmp_path / "nope")])
    assert code == 2
    assert "nope" in capsys.readouterr().err


def test_a_directory_without_drives_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "empty").mkdir()
    assert main(["fleet", str(tmp_path / "empty"), "--out", str(tmp_path / "o")]) == 2
    assert "empty" in capsys.readouterr().err


if sys.platform != "linux":  # pragma: no cover
    pytest.skip("fleet tests need Linux (/proc, /dev/shm)", allow_module_level=True)
