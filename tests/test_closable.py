"""A synchronous resource (:class:`perception._lifetime.Closable`) is released once, whatever happens."""

from __future__ import annotations

import pytest

from perception._lifetime import Closable, Lifetime


class _File(Closable):
    def __init__(self, fail: bool = False) -> None:
        self._state = Lifetime.OPENED
        self.fail = fail
        self.released = 0
        self.seen: list[Lifetime] = []

    def _close(self) -> None:
        self.released += 1
        self.seen.append(self.state)
        if self.fail:
            raise OSError("disk full")


def test_close_releases_once_and_a_second_close_does_nothing() -> None:
    f = _File()
    assert f.state is Lifetime.OPENED
    f.close()
    f.close()
    assert f.released == 1 and f.seen == [Lifetime.CLOSING] and f.state is Lifetime.CLOSED


def test_a_release_that_fails_raises_once_and_leaves_it_closed() -> None:
    f = _File(fail=True)
    with pytest.raises(OSError, match="disk full"):
        f.close()
    assert f.state is Lifetime.CLOSED
    f.close()  # closed: not released again
    assert f.released == 1


def test_leaving_the_with_block_closes_it_and_the_block_s_error_propagates() -> None:
    with _File() as f:
        assert f.state is Lifetime.OPENED
    assert f.state is Lifetime.CLOSED and f.released == 1
    with pytest.raises(ValueError, match="the block's"), _File() as g:
        raise ValueError("the block's")
    assert g.state is Lifetime.CLOSED and g.released == 1
