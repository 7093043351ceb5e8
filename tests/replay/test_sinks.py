"""Replay is a runtime plus sinks: each sink is opened before the first frame, gets every frame in order
(after replay's own records), and is closed however the replay ends -- done, failed, cancelled, stopped."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import anyio
import pytest
from reliability_helpers import read_records, runtime_config, write_drive

from perception.drives import DriveReader
from perception.errors import ConnectError, ReplayStoppedError
from perception.record import RunRecorder
from perception.replay import ReplayOptions, ReplaySink, replay_drive
from perception.scheduler import Session
from perception.server import EmbeddedTriton
from perception.types import FrameResult, SensorSpec

SLEEPY = {"lidar_top": "sleepy_lidar", "radar_front": "sleepy_radar", "cam_front": "sleepy_camera"}
FRAMES = 5


@pytest.fixture(scope="module")
def drive(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_drive(tmp_path_factory.mktemp("sinks") / "drive.mcap", FRAMES)


class Boom(Exception):
    pass


class _Sink:
    """Records what happens to it in ``log``; ``on_frame(i)`` runs when it gets its i-th frame."""

    def __init__(self, name: str, log: list[str], out: Path, on_frame: Callable[[int], None] | None = None) -> None:
        self.name, self.log, self.out, self.on_frame = name, log, out, on_frame

    @contextmanager
    def __call__(self, reader: DriveReader, rig: Mapping[str, SensorSpec]) -> Iterator[_Sink]:
        assert sorted(rig) == sorted(SLEEPY)
        self.log.append(f"open {self.name}")
        try:
            yield self
        except BaseException as exc:
            self.log.append(f"close {self.name} ({type(exc).__name__})")
            raise
        self.log.append(f"close {self.name}")

    def add(self, result: FrameResult) -> None:
        # replay's own records come first: this frame's record is already written and flushed
        assert len(read_records(self.out / "detections.jsonl")) == result.frame_id + 1
        self.log.append(f"{self.name} {result.frame_id}")
        if self.on_frame is not None:
            self.on_frame(result.frame_id)


def _opts(out: Path) -> ReplayOptions:
    return ReplayOptions(rate="lockstep", out_dir=out, report_md=False, evaluate=False, progress=False)


@pytest.mark.anyio
async def test_sinks_get_every_frame_in_order_and_are_closed_in_reverse(
    triton: EmbeddedTriton, drive: Path, tmp_path: Path
) -> None:
    log: list[str] = []
    sinks: list[ReplaySink] = [_Sink("a", log, tmp_path), _Sink("b", log, tmp_path)]
    with anyio.fail_after(120):
        outcome = await replay_drive(drive, runtime_config(triton.grpc_url, SLEEPY), _opts(tmp_path), sinks=sinks)
    frames = [e for i in range(FRAMES) for e in (f"a {i}", f"b {i}")]
    assert log == ["open a", "open b", *frames, "close b", "close a"]
    assert outcome.report.counters.frames == FRAMES and not outcome.interrupted


@pytest.mark.anyio
async def test_a_failing_sink_ends_the_replay_and_every_sink_is_closed(
    triton: EmbeddedTriton, drive: Path, tmp_path: Path
) -> None:
    log: list[str] = []

    def fail(frame_id: int) -> None:
        if frame_id == 2:
            raise Boom("sink failed")

    sinks: list[ReplaySink] = [_Sink("a", log, tmp_path), _Sink("b", log, tmp_path, fail)]
    with anyio.fail_after(120), pytest.raises(Boom):
        await replay_drive(drive, runtime_config(triton.grpc_url, SLEEPY), _opts(tmp_path), sinks=sinks)
    assert log[-2:] == ["close b (Boom)", "close a (Boom)"]
    assert log[:2] == ["open a", "open b"] and "a 2" in log and "a 3" not in log
    assert len(read_records(tmp_path / "detections.jsonl")) == 3  # the records sink was closed too, complete


@pytest.mark.anyio
async def test_a_cancelled_replay_closes_every_sink(triton: EmbeddedTriton, drive: Path, tmp_path: Path) -> None:
    log: list[str] = []
    with anyio.fail_after(120):
        with anyio.CancelScope() as scope:

            def cancel(frame_id: int) -> None:
                if frame_id == 1:
                    scope.cancel()

            sinks: list[ReplaySink] = [_Sink("a", log, tmp_path, cancel), _Sink("b", log, tmp_path)]
            await replay_drive(drive, runtime_config(triton.grpc_url, SLEEPY), _opts(tmp_path), sinks=sinks)
    assert scope.cancelled_caught
    assert log[0:2] == ["open a", "open b"] and "a 1" in log and "a 2" not in log
    assert log[-2] == "close b (CancelledError)" and log[-1] == "close a (CancelledError)"


@pytest.mark.anyio
async def test_a_stop_drains_and_closes_the_sinks_normally(triton: EmbeddedTriton, drive: Path, tmp_path: Path) -> None:
    log: list[str] = []
    stop = anyio.Event()

    def stop_at(frame_id: int) -> None:
        if frame_id == 1:
            stop.set()

    sinks: list[ReplaySink] = [_Sink("a", log, tmp_path, stop_at)]
    with anyio.fail_after(120):
        outcome = await replay_drive(
            drive, runtime_config(triton.grpc_url, SLEEPY), _opts(tmp_path), sinks=sinks, stop=stop
        )
    assert outcome.interrupted and outcome.report.interrupted
    n = outcome.report.counters.frames
    assert 2 <= n < FRAMES and log == ["open a", *(f"a {i}" for i in range(n)), "close a"]


@pytest.mark.anyio
async def test_a_stop_before_the_start_replays_nothing(triton: EmbeddedTriton, drive: Path, tmp_path: Path) -> None:
    log: list[str] = []
    stop = anyio.Event()
    stop.set()
    with anyio.fail_after(120), pytest.raises(ReplayStoppedError, match="nothing was replayed") as err:
        await replay_drive(
            drive,
            runtime_config(triton.grpc_url, SLEEPY),
            _opts(tmp_path),
            sinks=[_Sink("a", log, tmp_path)],
            stop=stop,
        )
    assert err.value.file == str(drive)
    assert log == []  # no sink was opened: an earlier run's outputs are left as they were


@pytest.mark.anyio
async def test_a_server_that_never_answers_leaves_the_earlier_outputs_as_they_were(drive: Path, tmp_path: Path) -> None:
    # The sinks were opened before the runtime: a server that never answered (perception replay --url to
    # a port where nothing listens, or an embedded server failing to start) truncated the earlier run's
    # detections.jsonl (and rewrote its fused.mcap) next to its report.json, which then described records
    # no longer there. Now nothing is opened until the runtime is up.
    (tmp_path / "detections.jsonl").write_text('{"frame_id": 0}\n')
    log: list[str] = []
    server = {"url": "127.0.0.1:1", "startup_timeout_s": 60, "connect_timeout_s": 0.5}
    with anyio.fail_after(120), pytest.raises(ConnectError, match=r"no answer for 0\.5 s"):
        await replay_drive(
            drive,
            runtime_config("127.0.0.1:1", SLEEPY, server=server),
            _opts(tmp_path),
            sinks=[_Sink("a", log, tmp_path)],
        )
    assert log == []
    assert (tmp_path / "detections.jsonl").read_text() == '{"frame_id": 0}\n'


@pytest.mark.anyio
async def test_a_server_that_never_answers_leaves_an_earlier_recording_as_it_was(drive: Path, tmp_path: Path) -> None:
    # The observer was begun before the runtime: a recorder (replay --record) replaced the earlier recording at
    # its path with an empty one although nothing was replayed. Now it is begun once the runtime is up, as the
    # sinks are opened.
    server = {"url": "127.0.0.1:1", "startup_timeout_s": 60, "connect_timeout_s": 0.5}
    config = runtime_config("127.0.0.1:1", SLEEPY, server=server)
    run = tmp_path / "run.mcap"
    with DriveReader(drive) as reader, RunRecorder(run) as earlier:
        earlier.begin(Session.assemble(config, reader.source))
        for sample in reader.samples():
            earlier.sample(sample, sample.t_ns)
    before = run.read_bytes()
    with RunRecorder(run) as rec, anyio.fail_after(120), pytest.raises(ConnectError, match=r"no answer for 0\.5 s"):
        await replay_drive(drive, config, _opts(tmp_path / "out"), observer=rec)
    assert rec.stats["segments"] == 0 and run.read_bytes() == before
