"""The adaptive admission, fed service times directly (no clock): it keeps frames in flight only where
the servers turn them into throughput within the deadline."""

from __future__ import annotations

import itertools

from perception.scheduler._admission import HEADROOM, HOLD, MAX_BACKOFF, Admission

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
