"""The adaptive admission, fed service times directly (no clock): it keeps frames in flight only where
the servers turn them into throughput within the deadline; shared by several pipelines, it does so for
their frames in flight together."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Callable
from typing import Literal

import anyio
import anyio.lowlevel
import pytest

from perception.config import PipelineConfig
from perception.scheduler import OrderedPipeline, RemoteAdmission, SharedAdmission
from perception.scheduler._admission import HEADROOM, HOLD, MAX_BACKOFF, Admission, _RemoteSlots
from perception.types import Frame, FrameResult, FrameStatus

MS = 1_000_000
DEADLINE = 200 * MS


def run(adm: Admission, service_at: dict[int, int], frames: int) -> list[int]:
    """Feed ``frames`` completions, each taking ``service_at[limit]``; probe whenever frames wait. Returns
    the limit after each completion."""
    limits = []
    for _ in range(frames):
        adm.may_probe()
        adm.observe(service_at[adm.limit], late=False)
        limits.append(adm.limit)
    return limits


def test_starts_alone_and_stays_alone_on_cpu_bound_models() -> None:
    """Two frames in flight take twice as long each: no throughput gained, so back to one, probing
    again ever more rarely."""
    adm = Admission(4, DEADLINE)
    assert adm.limit == 1
    limits = run(adm, {1: 40 * MS, 2: 80 * MS, 3: 120 * MS, 4: 160 * MS}, 2000)
    assert max(limits) == 2 and limits[-1] == 1
    probes = sum(1 for a, b in itertools.pairwise(limits) if b > a)
    assert probes <= 8  # HOLD doubling to MAX_BACKOFF: a handful of probes over 2000 frames
    assert sum(limit == 1 for limit in limits) > 0.95 * len(limits)
    assert adm.overloaded == 0


def test_climbs_to_max_when_the_servers_have_capacity() -> None:
    adm = Admission(4, DEADLINE)
    limits = run(adm, {1: 40 * MS, 2: 42 * MS, 3: 44 * MS, 4: 46 * MS}, 200)
    assert limits[-1] == 4 and adm.peak == 4


def test_partial_capacity_keeps_the_depth_that_pays() -> None:
    """Two frames in flight gain 50 %, a third gains nothing: two."""
    adm = Admission(4, DEADLINE)
    limits = run(adm, {1: 40 * MS, 2: 53 * MS, 3: 80 * MS, 4: 107 * MS}, 3000)
    assert limits[-1] == 2
    assert sum(limit == 2 for limit in limits) > 0.9 * len(limits)


def test_never_probes_where_full_contention_would_break_the_headroom() -> None:
    # 70 ms alone; two in flight could take 140 ms > 0.6 * 200 ms
    adm = Admission(4, DEADLINE)
    limits = run(adm, {1: 70 * MS, 2: 10 * MS}, 500)
    assert set(limits) == {1}
    assert 70 * MS * 2 > HEADROOM * DEADLINE


def test_a_late_frame_halves_the_limit() -> None:
    adm = Admission(4, DEADLINE)
    run(adm, {1: 20 * MS, 2: 20 * MS, 3: 20 * MS, 4: 20 * MS}, 200)
    assert adm.limit == 4
    adm.observe(20 * MS, late=True)
    assert adm.limit == 2 and adm.overloaded == 1
    adm.observe(int(HEADROOM * DEADLINE) + 1, late=False)  # past the headroom counts the same
    assert adm.limit == 1 and adm.overloaded == 2


def test_back_off_is_bounded() -> None:
    """Still probing now and then (the servers may have freed up): every MAX_BACKOFF frames and a bit."""
    adm = Admission(2, DEADLINE)
    limits = run(adm, {1: 40 * MS, 2: 80 * MS}, 6 * MAX_BACKOFF)
    last_probes = [i for i, (a, b) in enumerate(itertools.pairwise(limits)) if b > a][-3:]
    gaps = [b - a for a, b in itertools.pairwise(last_probes)]
    assert gaps and all(MAX_BACKOFF <= g <= MAX_BACKOFF + 2 * HOLD + 1 for g in gaps), gaps


def test_fixed_admission_keeps_k() -> None:
    adm = Admission(3, DEADLINE, adaptive=False)
    assert adm.limit == 3
    assert run(adm, {3: 190 * MS}, 50) == [3] * 50
    assert not adm.may_probe()
    assert adm.report()["mode"] == "fixed"


# -- one admission shared by several pipelines (a fleet node's workers, sharing its server) -----------


def share(
    pipelines: int, depth: int, service: Callable[[int], int], frames: int
) -> tuple[SharedAdmission, list[tuple[int, int]]]:
    """``pipelines`` pipelines of ``depth`` frames each, always wanting more, share one admission; a frame
    takes ``service(frames in flight when it was admitted)``, fed to the rule (no clock). Returns the
    admission and, per grant, (frames in flight together after it, the limit then)."""
    shared = SharedAdmission()
    grants: list[tuple[int, int]] = []

    async def frame_slot(token: int, n: int) -> None:
        for _ in range(n):
            assert await shared.acquire(token)
            in_flight = shared.in_flight
            grants.append((in_flight, int(shared.report()["limit"])))  # type: ignore[call-overload]
            for _ in range(3):
                await anyio.lowlevel.checkpoint()
            shared.release(token, service(in_flight), False)

    async def main() -> None:
        tokens = [shared.attach(depth, DEADLINE, adaptive=True, owner=f"w{i}") for i in range(pipelines)]
        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:
                for token in tokens:
                    for _ in range(depth):
                        tg.start_soon(frame_slot, token, frames // (pipelines * depth))

    anyio.run(main)
    return shared, grants


def test_pipelines_sharing_cpu_bound_servers_keep_one_frame_in_flight_together() -> None:
    """Two pipelines of up to 4 frames each on CPU-bound servers (service grows with the frames in flight,
    whoever's they are): together they keep the one frame in flight one replay keeps, not one each."""
    shared, grants = share(2, 4, lambda n: 40 * MS * n, 2400)
    assert all(n <= limit for n, limit in grants)
    assert max(n for n, _ in grants) == 2  # probed now and then, never kept
    assert sum(n == 1 for n, _ in grants) > 0.95 * len(grants)
    assert shared.report()["overloaded_frames"] == 0


def test_pipelines_sharing_servers_with_capacity_climb_to_the_ceiling_together() -> None:
    """Servers with room: the frames in flight together climb to the ceiling (4), never to 4 each."""
    shared, grants = share(2, 4, lambda n: (40 + 2 * n) * MS, 800)
    assert all(n <= limit for n, limit in grants)
    assert shared.peak_in_flight == 4 and max(limit for _, limit in grants) == 4


def test_a_detached_or_dead_pipeline_s_slots_go_to_the_others() -> None:
    async def main() -> None:
        shared = SharedAdmission()
        a = shared.attach(2, DEADLINE, adaptive=False, owner="a")
        b = shared.attach(2, DEADLINE, adaptive=False, owner="b")
        assert await shared.acquire(a) and await shared.acquire(a)  # both slots: b has to wait
        got: list[bool] = []

        async def wait_b() -> None:
            got.append(await shared.acquire(b))

        with anyio.fail_after(10):
            async with anyio.create_task_group() as tg:
                tg.start_soon(wait_b)
                await anyio.wait_all_tasks_blocked()
                assert got == [] and shared.in_flight == 2
                shared.drop_owner("a")  # a's worker died holding both slots
            assert got == [True] and shared.in_flight == 1
            c = shared.attach(2, DEADLINE, adaptive=False, owner="c")
            assert await shared.acquire(c)
            async with anyio.create_task_group() as tg:
                tg.start_soon(wait_b)
                await anyio.wait_all_tasks_blocked()
                shared.detach(b)  # b's stream ended while a frame of it waited: turned away, not granted
            assert got == [True, False] and shared.in_flight == 1

    anyio.run(main)


@pytest.mark.parametrize("granted", [False, True])
def test_a_wait_for_a_shared_slot_cancelled_gives_up_its_turn_and_any_slot_granted(granted: bool) -> None:
    # Before: the cancelled waiter stayed in line: the next release granted it the slot, which nobody took
    # (in flight, counted in its stream's use) and the other pipelines lost until its stream detached.
    # ``granted``: the slot is granted to it just after its wait was cancelled, before it resumes.
    async def main() -> None:
        shared = SharedAdmission()
        a = shared.attach(1, DEADLINE, adaptive=False, owner="a")
        b = shared.attach(1, DEADLINE, adaptive=False, owner="b")
        assert await shared.acquire(a)  # a holds the only slot
        scope = anyio.CancelScope()
        got: list[bool] = []

        async def wait_b() -> None:
            with scope:
                got.append(await shared.acquire(b))

        with anyio.fail_after(10):  # watchdog
            async with anyio.create_task_group() as tg:
                tg.start_soon(wait_b)
                await anyio.wait_all_tasks_blocked()  # b waits in line
                scope.cancel()  # b's wait is cancelled ...
                if granted:
                    shared.release(a, None)  # ... and the slot goes to b before it resumes
            if not granted:
                shared.release(a, None)  # a's frame ends after b gave up: nobody in line
            assert got == [] and scope.cancelled_caught
            assert shared.in_flight == 0  # nobody holds a slot
            assert await shared.acquire(a)  # a's next frame gets it at once
            assert shared.in_flight == 1 and shared.report(b).get("frames_granted") == int(granted)

    anyio.run(main)


def test_two_pipelines_on_one_remote_admission_never_exceed_its_limit_together() -> None:
    """The pipelines themselves (not only the rule): two of ``max_in_flight`` 2 each, on one shared fixed
    admission of 2, process at most 2 frames at once between them, and do reach 2."""
    shared, peak = _two_pipelines_sharing(2)
    assert peak == 2, peak
    assert shared.in_flight == 0 and shared.frames == 80


@pytest.mark.parametrize("admission", ["fixed", "adaptive"])
def test_one_frame_at_a_time_pipelines_share_the_admission_too(admission: Mode) -> None:
    """``max_in_flight: 1`` (a lockstep replay, ``fleet --rate lockstep``) is no exception: two such
    pipelines on one shared admission keep one frame in flight together, not one each (issue 45: they
    used to keep admissions of their own, two frames on the node's server)."""
    shared, peak = _two_pipelines_sharing(1, admission)
    assert peak == 1, peak
    assert shared.in_flight == 0 and shared.frames == 80  # every frame was granted by the shared admission


Mode = Literal["fixed", "adaptive"]


def _two_pipelines_sharing(depth: int, admission: Mode = "fixed") -> tuple[SharedAdmission, int]:
    """Two pipelines of ``max_in_flight`` ``depth``, 40 frames each, on one shared admission: the most
    frames they processed at once between them."""
    shared = SharedAdmission()
    active = 0
    peak = 0
    config = PipelineConfig(max_in_flight=depth, admission=admission, queue_size=0, overflow="block")

    async def process(f: Frame) -> FrameResult:
        nonlocal active, peak
        active += 1
        peak = max(peak, active)
        for _ in range(50):  # long enough for either pipeline to start several more frames if it may
            await anyio.lowlevel.checkpoint()
        active -= 1
        return FrameResult(f.frame_id, f.t_ns, FrameStatus.OK, {})

    def dropped(f: Frame, reason: str) -> FrameResult:
        return FrameResult(f.frame_id, f.t_ns, FrameStatus.DROPPED, {}, reason=reason)

    async def source(n: int) -> AsyncIterator[Frame]:
        for i in range(n):
            yield Frame(frame_id=i, t_ns=i * 100 * MS, samples={})

    async def one(owner: str, out: list[FrameResult]) -> None:
        provider = RemoteAdmission(shared.in_process(), owner=owner)
        async with provider.open(depth, DEADLINE, adaptive=admission == "adaptive") as control:
            pipeline = OrderedPipeline(process, dropped, config, deadline_ns=DEADLINE, admission=control)
            send, recv = anyio.create_memory_object_stream[FrameResult](100)
            async with anyio.create_task_group() as tg:
                tg.start_soon(pipeline.run, source(40), send)
                async with recv:
                    out.extend([r async for r in recv])
        report = control.report()
        assert report["shared"] is True and report["mode"] == "fixed" and report["shared_by"] in (1, 2)

    async def main() -> tuple[list[FrameResult], list[FrameResult]]:
        a: list[FrameResult] = []
        b: list[FrameResult] = []
        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                tg.start_soon(one, "a", a)
                tg.start_soon(one, "b", b)
        return a, b

    a, b = anyio.run(main)
    for out in (a, b):
        assert [r.frame_id for r in out] == list(range(40)) and all(r.status is FrameStatus.OK for r in out)
    return shared, peak


def test_a_dead_owner_s_every_stream_is_dropped() -> None:
    # A worker runs several streams at once (a replay and its modes...): when it dies, drop_owner frees
    # the slots of all of them and turns their waiters away, not only those of its first stream.
    async def main() -> None:
        shared = SharedAdmission()
        a1 = shared.attach(4, DEADLINE, adaptive=False, owner="a")
        b = shared.attach(4, DEADLINE, adaptive=False, owner="b")
        a2 = shared.attach(4, DEADLINE, adaptive=False, owner="a")
        a3 = shared.attach(4, DEADLINE, adaptive=False, owner="a")
        for token in (a1, a2, a2, a3):
            assert await shared.acquire(token)  # all 4 slots: a's three streams hold them
        got: dict[int, bool] = {}

        async def wait(token: int) -> None:
            got[token] = await shared.acquire(token)

        with anyio.fail_after(10):  # watchdog
            async with anyio.create_task_group() as tg:
                tg.start_soon(wait, a3)  # a's third stream waits for a slot
                await anyio.wait_all_tasks_blocked()
                tg.start_soon(wait, b)  # then b
                await anyio.wait_all_tasks_blocked()
                assert got == {} and shared.in_flight == 4
                shared.drop_owner("a")
        assert got[b] is True  # b's waiter granted (a's own waiter may get a slot a's other streams free)
        assert shared.in_flight == 1 and shared.report()["shared_by"] == 1  # b's own frame alone
        for token in (a1, a2, a3):
            assert not await shared.acquire(token)  # every stream of a detached

    anyio.run(main)


def test_the_slot_wait_p50_is_the_report_s_p50() -> None:
    # slot_wait_ms.p50 was the upper middle wait (3.0 here), every other p50 of report.json the linear one
    async def main() -> dict[str, object]:
        slots = _RemoteSlots(SharedAdmission().in_process(), token=0, ceiling=2)
        slots.waits_ns = [3_000_000, 1_000_000]
        return slots.report()

    assert anyio.run(main)["slot_wait_ms"] == {"p50": 2.0, "min": 1.0, "max": 3.0}
