"""Image decodes in worker threads stay within DECODE_THREADS even when the join abandons them (issue 33),
and the JPEG header probe does bounded work whatever the bytes."""

from __future__ import annotations

import threading

import anyio
import numpy as np
import pytest

from perception._imageio import encode_jpeg, image_size
from perception.config import PipelineConfig
from perception.scheduler._dispatch import DECODE_THREADS, Dispatcher


class _NoClient:
    async def infer_request(self, req: object) -> object:
        raise AssertionError("no request expected")


@pytest.mark.anyio
async def test_abandoned_decodes_keep_their_slot_until_their_thread_ends() -> None:
    dispatcher = Dispatcher(_NoClient(), [], PipelineConfig())
    release = threading.Event()
    lock = threading.Lock()
    running = peak = finished = 0

    def slow_decode(i: int) -> int:
        nonlocal running, peak, finished
        with lock:
            running += 1
            peak = max(peak, running)
        release.wait(30)
        with lock:
            running -= 1
            finished += 1
        return i

    with anyio.fail_after(60):
        async with anyio.create_task_group() as tg:
            for i in range(5 * DECODE_THREADS):  # each abandoned by its frame's deadline

                async def one(i: int = i) -> None:
                    with anyio.move_on_after(0.05):
                        await dispatcher._in_decode_thread(slow_decode, i)

                tg.start_soon(one)
        # every caller gave up; at most DECODE_THREADS decodes ever ran at once, the others never started
        assert peak <= DECODE_THREADS and running <= DECODE_THREADS
        release.set()
        # the abandoned ones end on their own and give their slots back: DECODE_THREADS new decodes
        # (that need every slot) all run
        async with anyio.create_task_group() as tg:
            for _ in range(DECODE_THREADS):
                tg.start_soon(dispatcher._in_decode_thread, slow_decode, -1)
    assert peak <= DECODE_THREADS


def test_the_jpeg_header_probe_skips_fill_and_bounds_its_walk() -> None:
    jpg = encode_jpeg(np.zeros((37, 53, 3), np.uint8))
    assert image_size(jpg[:2] + b"\xff" * 1000 + jpg[2:]) == (53, 37)  # fill bytes before a marker
    assert image_size(jpg[:2] + b"\xff" * 10_000_000 + jpg[2:]) is None  # 10 MB of fill: not walked
    assert image_size(b"\xff\xd8" + b"\xff" * 10_000_000) is None
    many = b"\xff\xd8" + b"\xff\xe1\x00\x02" * 10_000 + jpg[2:]  # ten thousand empty segments
    assert image_size(many) is None
