"""The runtime's own CPU per frame beside the Triton server's, in one run (issue 44).

One external ``perception server`` process serves every scenario, so a client process holds no Triton.
Each scenario runs in a client process of its own (this script with ``--client``), against that server:

* ``replay lockstep`` and ``replay max``: :func:`perception.replay.replay_drive` as ``perception replay``
  runs it (records, the ground-truth evaluation, the metrics sink), with and without the fused recording
  (``fused.mcap``); ``replay lockstep (--server-split)`` with Triton's split per frame from its
  statistics as well (a statistics request after every frame: ``perception replay --server-split``,
  ``perception budget``'s default; a plain replay against an external server does without);
* ``live``: :func:`perception.live.live_session` as ``perception live`` runs it (a publisher process plays
  the drive at its recorded timing into a :class:`~perception.live.LiveRuntime`; the publisher stands for
  the vehicle's drivers and is not counted).

Start-up is cancelled by counting from the :data:`WARM_FRAMES`-th frame result to the last one: the
client's process CPU (``os.times``, every thread) and the server's (``/proc``: ``perception server``,
``tritonserver`` and its python-backend stubs) are read at both instants, and the differences divided by
the frames in between (the "N-frame minus short run" of issue 44, in one run). A long drive is cut at
``--frames``. The split by stage comes from thread CPU (``time.thread_time_ns`` around the stages'
functions, exclusive of nested stages, in whatever thread runs them); what no stage covers is the event
loop, the hand-offs and the rest, per thread (``/proc/self/task``).

``--baseline DIR`` runs every scenario a second time with another checkout's ``perception`` (e.g. the
main branch before this change) against the same server, interleaved, so before and after are compared
within one run on a shared host.

Targets (issue 44): replay lockstep on the bundled drive, client <= 0.2 x server; on the nuScenes scene
<= 0.3 x; ``perception live`` on the bundled drive <= 0.2 x.

    .venv/bin/python bench/bench_client_cpu.py [--datasets sim,nuscenes] [--baseline /work/main]

Writes ``bench/results/client_cpu.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import json
import logging
import os
import re
import resource
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

log = logging.getLogger("bench_client_cpu")

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results" / "client_cpu.json"
BUNDLED = ROOT / "replay_data" / "urban_seed7_10s.mcap"
WARM_FRAMES = 5
TARGETS = {("sim", "replay lockstep"): 0.2, ("nuscenes", "replay lockstep"): 0.3, ("sim", "live"): 0.2}
SCENARIOS: dict[str, dict[str, Any]] = {
    "replay lockstep": {"mode": "replay", "rate": "lockstep", "record": False},
    "replay lockstep + fused.mcap": {"mode": "replay", "rate": "lockstep", "record": True},
    "replay max": {"mode": "replay", "rate": "max", "record": False},
    "replay max + fused.mcap": {"mode": "replay", "rate": "max", "record": True},
    "live": {"mode": "live"},
    "ros node": {"mode": "ros"},
    # the cameras decoded by the client (their pixels sent) instead of by the model (the default, auto)
    "replay lockstep (decode: client)": {"mode": "replay", "rate": "lockstep", "record": False, "decode": "client"},
    "live (decode: client)": {"mode": "live", "decode": "client"},
    # Triton's split per frame from its statistics (perception replay --server-split, perception budget)
    "replay lockstep (--server-split)": {"mode": "replay", "rate": "lockstep", "record": False, "server_split": True},
}
_TICK = os.sysconf("SC_CLK_TCK")


# -- CPU of processes and threads -------------------------------------------------------------------------


def _stat_cpu_s(stat: str) -> float:
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / _TICK  # utime, stime


def process_tree(pid: int) -> list[int]:
    """``pid`` and its live descendants (from ``/proc``)."""
    parent: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            parent[int(entry)] = int(stat[stat.rindex(")") + 2 :].split()[1])
    tree, todo = [], [pid]
    while todo:
        p = todo.pop()
        tree.append(p)
        todo.extend(c for c, pp in parent.items() if pp == p)
    return tree


def tree_cpu_s(pids: list[int]) -> float:
    """CPU seconds of the processes ``pids`` (those still alive)."""
    total = 0.0
    for p in pids:
        try:
            total += _stat_cpu_s(Path(f"/proc/{p}/stat").read_text())
        except OSError:
            continue
    return total


def thread_cpu_s() -> dict[str, float]:
    """CPU seconds of this process's live threads, by Python thread name (native threads by ``comm``)."""
    names = {t.native_id: t.name for t in threading.enumerate()}
    out: dict[str, float] = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            stat = Path(f"/proc/self/task/{tid}/stat").read_text()
        except OSError:
            continue
        name = names.get(int(tid)) or "native:" + stat[stat.index("(") + 1 : stat.rindex(")")]
        key = re.sub(r"[_ -]?\d+$", "", name)
        out[key] = out.get(key, 0.0) + _stat_cpu_s(stat)
    return out


def process_cpu_s() -> float:
    t = os.times()
    return t.user + t.system


# -- the split by stage -----------------------------------------------------------------------------------


class Stages:
    """Thread CPU per stage: each wrapped call's ``time.thread_time_ns``, less that of stages nested in it."""

    def __init__(self) -> None:
        self.ns: Counter[str] = Counter()
        self._local = threading.local()
        self._lock = threading.Lock()

    def _enter(self) -> list[int]:
        stack: list[int] | None = getattr(self._local, "stack", None)
        if stack is None:
            stack = self._local.stack = []
        stack.append(0)
        return stack

    def _leave(self, stack: list[int], name: str, spent: int) -> None:
        own = spent - stack.pop()
        if stack:
            stack[-1] += spent
        with self._lock:
            self.ns[name] += own

    def wrap(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def timed(*args: Any, **kwargs: Any) -> Any:
            stack = self._enter()
            t0 = time.thread_time_ns()
            try:
                return fn(*args, **kwargs)
            finally:
                self._leave(stack, name, time.thread_time_ns() - t0)

        return timed

    def wrap_generator(self, name: str, fn: Callable[..., Iterator[Any]]) -> Callable[..., Iterator[Any]]:
        @functools.wraps(fn)
        def timed(*args: Any, **kwargs: Any) -> Iterator[Any]:
            it = fn(*args, **kwargs)
            while True:
                stack = self._enter()
                t0 = time.thread_time_ns()
                try:
                    item = next(it)
                except StopIteration:
                    return
                finally:
                    self._leave(stack, name, time.thread_time_ns() - t0)
                yield item

        return timed


#: (module, attribute path, stage); a target missing from the checkout measured is skipped.
TARGETS_STAGES = (
    ("perception.replay._source", "DriveSource.iter_frames", "drive reading (+ground truth)"),
    ("perception._imageio", "decode_image", "decode"),
    ("perception._imageio", "decode_image_scaled", "decode"),
    ("perception.scheduler._tensors", "prepare_inputs", "tensors"),
    ("perception.triton._wire", "encode_infer_request", "serialisation"),
    ("perception.triton._wire", "decode_infer_response", "serialisation"),
    ("perception.scheduler._accumulate", "SweepAccumulator.apply", "accumulation"),
    ("perception.scheduler._align", "FrameAssembler.push", "assembly"),
    ("perception.scheduler._align", "FrameAssembler.flush", "assembly"),
    ("perception.fusion._fuser", "Fuser.fuse", "fusion: other"),
    ("perception.fusion._fuser", "Fuser._lidar", "fusion: lidar"),
    ("perception.fusion._fuser", "Fuser._radar", "fusion: radar"),
    ("perception.fusion._fuser", "Fuser._attach_radar", "fusion: radar"),
    ("perception.fusion._fuser", "Fuser._radar_only", "fusion: radar"),
    ("perception.fusion._fuser", "Fuser._cameras", "fusion: cameras"),
    ("perception.fusion._fuser", "Fuser._lidar_points", "fusion: lidar points"),
    ("perception.fusion._fuser", "Fuser._camera_guided", "fusion: camera-guided"),
    ("perception.fusion._fuser", "Fuser._nms", "fusion: other"),
    ("perception.fusion._tracker", "Tracker.step", "tracking"),
    ("perception.replay._sinks", "RecordsSink.add", "records"),
    ("perception.replay._sinks", "EvaluationSink.add", "evaluation"),
    ("perception.viz._record", "VizRecorder.write", "recording"),
    ("perception.metrics._records", "frame_record", "records"),
)


def instrument(stages: Stages) -> list[str]:
    """Wrap every stage function that exists (in every ``perception`` module that bound it by name)."""
    import importlib

    done = []
    for module, path, stage in TARGETS_STAGES:
        try:
            mod = importlib.import_module(module)
        except ImportError:
            continue
        owner: Any = mod
        *parents, attr = path.split(".")
        for p in parents:
            owner = getattr(owner, p, None)
        original = getattr(owner, attr, None) if owner is not None else None
        if original is None:
            continue
        gen = path.endswith("iter_frames")
        wrapped = (stages.wrap_generator if gen else stages.wrap)(stage, original)
        setattr(owner, attr, wrapped)
        if not parents:  # a module function: also where other modules imported it by name
            for other in list(sys.modules.values()):
                if getattr(other, "__name__", "").startswith("perception") and getattr(other, attr, None) is original:
                    setattr(other, attr, wrapped)
        done.append(path)
    return done


# -- one scenario in a client process ---------------------------------------------------------------------


class Meter:
    """Snapshots of client and server CPU at the warm frame and at the latest frame."""

    def __init__(self, server_pid: int, stages: Stages, stop_after: int, stop: Callable[[], None]) -> None:
        self.stages, self.stop_after, self._stop = stages, stop_after, stop
        self.server = process_tree(server_pid)  # perception server, tritonserver, its stubs: all started
        self.overhead_s = 0.0  # the meter's own CPU (in the client's count, taken out of it)
        self.frames = 0
        self.first: dict[str, Any] | None = None
        self.last: dict[str, Any] | None = None

    def _snapshot(self) -> dict[str, Any]:
        t0 = time.thread_time_ns()
        snap = {
            "frame": self.frames,
            "wall": time.monotonic(),
            "client": process_cpu_s() - self.overhead_s,
            "minor_faults": resource.getrusage(resource.RUSAGE_SELF).ru_minflt,
            "server": tree_cpu_s(self.server),
            "stages": dict(self.stages.ns),
            "threads": thread_cpu_s(),
        }
        self.overhead_s += (time.thread_time_ns() - t0) / 1e9
        return snap

    def __call__(self, _result: Any) -> None:
        self.frames += 1
        if self.frames >= WARM_FRAMES:
            snap = self._snapshot()
            if self.first is None:
                self.first = snap
            self.last = snap
        if self.frames == self.stop_after:
            self._stop()

    def report(self) -> dict[str, Any]:
        if self.first is None or self.last is None or self.last["frame"] == self.first["frame"]:
            return {"error": f"too few frames ({self.frames})"}
        a, b = self.first, self.last
        n = b["frame"] - a["frame"]
        client_ms = (b["client"] - a["client"]) / n * 1e3
        server_ms = (b["server"] - a["server"]) / n * 1e3
        stages = {k: round((b["stages"].get(k, 0) - a["stages"].get(k, 0)) / n / 1e6, 2) for k in b["stages"]}
        threads = {k: round((v - a["threads"].get(k, 0.0)) / n * 1e3, 2) for k, v in b["threads"].items()}
        staged = sum(stages.values())
        return {
            "frames_measured": n,
            "wall_ms_per_frame": round((b["wall"] - a["wall"]) / n * 1e3, 1),
            "client_ms_per_frame": round(client_ms, 2),
            "server_ms_per_frame": round(server_ms, 2),
            "client_over_server": round(client_ms / server_ms, 3) if server_ms > 0 else None,
            # pages the client faulted in (fresh allocations above glibc's mmap threshold, mostly)
            "client_minor_faults_per_frame": round((b["minor_faults"] - a["minor_faults"]) / n, 1),
            "stages_ms_per_frame": dict(sorted(stages.items(), key=lambda kv: -kv[1])),
            "not_in_a_stage_ms_per_frame": round(client_ms - staged, 2),
            "threads_ms_per_frame": dict(sorted(threads.items(), key=lambda kv: -kv[1])),
        }


def client_main(spec: dict[str, Any]) -> dict[str, Any]:
    import anyio

    from perception.config import load_config, with_overrides
    from perception.drives import DriveReader
    from perception.scheduler import Session

    stages = Stages()
    instrumented = instrument(stages)
    drive = Path(spec["drive"])
    cfg = load_config(Path.cwd() / "launch" / "replay.yaml")  # the checkout measured (run_scenario's cwd)
    if not cfg.resolved:
        with DriveReader(drive, strict=False, quiet=True) as reader:
            cfg = Session.assemble(cfg, reader.source).config
    cfg = with_overrides(cfg, url=spec["url"])
    if spec.get("decode"):  # every camera decoded by the client (its pixels sent) or by the model (its JPEG)
        from perception.kinds import kind_def

        sensors = tuple(
            dataclasses.replace(s, decode=spec["decode"]) if kind_def(s.kind).contract.encoded is not None else s
            for s in cfg.sensors
        )
        cfg = dataclasses.replace(cfg, sensors=sensors)
    stop_event: list[Any] = []
    meter = Meter(spec["server_pid"], stages, spec["frames"], lambda: stop_event[0].set() if stop_event else None)
    if spec["mode"] == "ros":
        out = _ros_node(spec, meter, stop_event)
    elif spec["mode"] == "live":
        from perception.live import LiveRuntime, _session

        class Metered(LiveRuntime):
            def __init__(self, *a: Any, on_result: Callable[[Any], None], **k: Any) -> None:
                def both(r: Any) -> None:
                    on_result(r)
                    meter(r)

                super().__init__(*a, on_result=both, **k)

        setattr(_session, "LiveRuntime", Metered)  # noqa: B010 - live_session builds its runtime by this name
        outcome = _session.live_session(drive, cfg)
        out = meter.report()
        out["frames"] = outcome.summary.get("frames")
    else:
        from perception.replay import ReplayOptions, each_frame, replay_drive

        with tempfile.TemporaryDirectory(prefix="bench-client-cpu-") as tmp:
            sinks = [each_frame(meter)]
            if spec["record"]:
                from perception.viz import recorder_sink

                sinks.append(recorder_sink(mcap_path=Path(tmp) / "fused.mcap", live=None))
            options = ReplayOptions(
                rate=spec["rate"], out_dir=Path(tmp), progress=False, server_split=spec.get("server_split")
            )

            async def main() -> Any:
                stop_event.append(anyio.Event())
                return await replay_drive(drive, cfg, options, sinks=sinks, stop=stop_event[0])

            anyio.run(main)
        out = meter.report()
    out["frames"] = meter.frames
    out["instrumented"] = len(instrumented)
    return out


def _ros_node(spec: dict[str, Any], meter: Meter, stop_event: list[Any]) -> dict[str, Any]:
    """``perception ros node`` in this process (:func:`perception.ros.run_node`, its profile the one measured
    with the URL and cameras' decode set), ``perception ros play`` publishing the drive from another process
    (the vehicle's drivers: not counted). The node stops at ``--frames`` results or once the player is done."""
    import yaml

    from perception.ros import run_node

    stop = threading.Event()
    stop_event.append(stop)
    with tempfile.TemporaryDirectory(prefix="bench-client-cpu-ros-") as tmp:
        profile = Path(tmp) / "profile.yaml"
        data = yaml.safe_load((Path.cwd() / "launch" / "replay.yaml").read_text())
        data["server"] = {**data.get("server", {}), "url": spec["url"]}
        if spec.get("decode"):
            data.setdefault("sensor_defaults", {}).setdefault("camera", {})["decode"] = spec["decode"]
        profile.write_text(yaml.safe_dump(data))
        play = [sys.executable, "-m", "perception", "ros", "play", spec["drive"], "--wait-subscribers", "120"]
        player = subprocess.Popen(play, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

        def player_done() -> None:
            player.wait()
            time.sleep(2.0)  # the last frames' results
            stop.set()

        threading.Thread(target=player_done, daemon=True).start()
        try:
            code = run_node(
                {"profile": str(profile), "rig": spec["drive"], "url": spec["url"]}, stop=stop, on_published=meter
            )
        finally:
            player.terminate()
            player.wait(timeout=30)
    out = meter.report()
    if code:
        out["error"] = f"perception ros node exited with {code}"
    return out


# -- the driver ---------------------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def external_server() -> Iterator[tuple[str, int]]:
    port = _free_port()
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    cmd = [sys.executable, "-m", "perception", "server", "--grpc-port", str(port), "--startup-timeout", "600"]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert proc.stdout is not None
        for line in proc.stdout:  # the model table is printed once every model is ready
            log.debug("server: %s", line.rstrip())
            if line.startswith("serving"):
                break
        else:
            raise RuntimeError(f"perception server exited with {proc.wait()}")
        threading.Thread(target=lambda: [None for _ in proc.stdout or ()], daemon=True).start()  # drain
        yield f"127.0.0.1:{port}", proc.pid
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()


def nuscenes_drive(tmp: Path) -> Path | None:
    env = os.environ.get("PERCEPTION_REAL_DATA")
    root = Path(env) if env else ROOT.parent / "shared" / "real_data"
    if not (root / "nuscenes-scene-0916").is_dir():
        log.warning("no real data at %s: the nuScenes scene is skipped", root)
        return None
    from perception.importers import import_nuscenes

    drive = tmp / "nuscenes-scene-0916.mcap"
    import_nuscenes(root / "nuscenes-scene-0916", "scene-0916", drive, version="v1.0-mini")
    return drive


def _has_decode(checkout: Path) -> bool:
    """Whether ``checkout``'s sensors have the ``decode`` setting (the "(decode: server)" scenarios)."""
    model = checkout / "perception" / "config" / "_model.py"
    return model.is_file() and "decode:" in model.read_text()


def run_scenario(checkout: Path, spec: dict[str, Any]) -> dict[str, Any]:
    env = dict(os.environ, PYTHONPATH=str(checkout))
    cmd = [sys.executable, str(Path(__file__).resolve()), "--client", json.dumps(spec)]
    proc = subprocess.run(cmd, cwd=checkout, env=env, capture_output=True, text=True, timeout=3600, check=False)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode or not lines:
        return {"error": f"exit {proc.returncode}: {proc.stderr.strip()[-800:]}"}
    result: dict[str, Any] = json.loads(lines[-1])
    return result


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--client", help=argparse.SUPPRESS)
    p.add_argument("--datasets", default="sim,nuscenes")
    p.add_argument("--scenarios", default=",".join(SCENARIOS))
    p.add_argument("--frames", type=int, default=60, help="frames per scenario at most (from the start)")
    p.add_argument("--baseline", type=Path, help="another checkout, measured in the same run (before)")
    p.add_argument("--out", type=Path, default=RESULTS)
    args = p.parse_args()
    if args.client:
        logging.basicConfig(level=logging.WARNING)
        sys.stdout.write(json.dumps(client_main(json.loads(args.client))) + "\n")
        return 0
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    from perception.benchmark import environment

    results: dict[str, Any] = {"environment": environment(), "warm_frames": WARM_FRAMES, "datasets": {}}
    with tempfile.TemporaryDirectory(prefix="bench-client-cpu-") as tmp, external_server() as (url, pid):
        drives = {"sim": BUNDLED}
        if "nuscenes" in args.datasets.split(","):
            nus = nuscenes_drive(Path(tmp))
            if nus is not None:
                drives["nuscenes"] = nus
        for name, drive in drives.items():
            if name not in args.datasets.split(","):
                continue
            per: dict[str, Any] = {}
            for scenario in args.scenarios.split(","):
                spec = {
                    **SCENARIOS[scenario],
                    "drive": str(drive),
                    "url": url,
                    "server_pid": pid,
                    "frames": args.frames,
                }
                row: dict[str, Any] = {}
                # a baseline without the decode setting cannot run its scenarios
                baseline = (
                    args.baseline if args.baseline and ("decode" not in spec or _has_decode(args.baseline)) else None
                )
                checkouts = [("after", ROOT)] + ([("before", baseline)] if baseline else [])
                for label, checkout in checkouts:
                    row[label] = run_scenario(checkout, spec)
                    log.info(
                        "%s / %s / %s: client %s ms, server %s ms, ratio %s",
                        name, scenario, label, row[label].get("client_ms_per_frame"),
                        row[label].get("server_ms_per_frame"), row[label].get("client_over_server"),
                    )  # fmt: skip
                target = TARGETS.get((name, scenario))
                if target is not None:
                    ratio = row["after"].get("client_over_server")
                    row["target"] = {"client_over_server_max": target, "met": ratio is not None and ratio <= target}
                per[scenario] = row
            results["datasets"][name] = per
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    log.info("wrote %s", args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
