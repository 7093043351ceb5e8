"""A streaming drive is written past the page cache (``O_DIRECT``), byte for byte the buffered file; where the
file system refuses it, buffered; a failed write names the file and leaves no descriptor open."""

from __future__ import annotations

import errno
import fcntl
import io
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from drive_fixtures import Written, write_drive
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from test_drive_roundtrip import assert_same_sample

from perception.drives import DriveReader, DriveWriter
from perception.drives._direct import BLOCK, DirectFile
from perception.drives._mcap_out import McapOut
from perception.errors import DriveError

STAGING = 2 * BLOCK  # small: a piece of several blocks goes out in several writes


def _direct_file(path: Path, staging: int = STAGING) -> DirectFile | None:
    """A new file at ``path`` written directly, or None (the descriptor closed) where that is refused."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
    file = DirectFile.adopt(fd, path, staging)
    if file is None:
        os.close(fd)
    return file


@pytest.fixture(scope="module")
def direct_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory whose file system takes O_DIRECT writes (the tests that need one skip otherwise)."""
    path = tmp_path_factory.mktemp("direct")
    probe = _direct_file(path / "probe")
    if probe is None:
        pytest.skip(f"{path}'s file system refuses O_DIRECT (or the platform has none)")
    probe.close()
    return path


def _fresh(directory: Path, name: str) -> Path:
    path = directory / name
    path.unlink(missing_ok=True)
    return path


PIECES = st.lists(
    st.one_of(st.integers(0, 3 * STAGING), st.sampled_from([1, BLOCK - 1, BLOCK, BLOCK + 1, STAGING])), max_size=12
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sizes=PIECES, lines=st.booleans())
@example(sizes=[BLOCK, BLOCK], lines=False)  # the last block exactly full
@example(sizes=[STAGING], lines=True)  # the staging buffer exactly full
@example(sizes=[2 * BLOCK, 1], lines=False)  # a 1-byte tail
@example(sizes=[1], lines=True)  # nothing but a 1-byte tail
@example(sizes=[], lines=False)  # an empty file
def test_a_direct_file_holds_the_bytes_written(direct_dir: Path, sizes: list[int], lines: bool) -> None:
    path = _fresh(direct_dir, "pieces.bin")
    rng = np.random.default_rng(len(sizes))
    pieces = [rng.integers(0, 255, n, dtype=np.uint8) for n in sizes]
    file = _direct_file(path, staging=STAGING)
    assert file is not None
    if lines:
        file.writelines(p.data for p in pieces)
    else:
        assert [file.write(p.data) for p in pieces] == sizes
    assert file.tell() == sum(sizes)
    file.close()
    file.close()  # idempotent
    assert path.read_bytes() == b"".join(p.tobytes() for p in pieces)


MESSAGES = st.lists(st.tuples(st.integers(0, 1), st.integers(0, 2**40), st.integers(0, 3 * STAGING)), max_size=30)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(messages=MESSAGES, chunk_size=st.sampled_from([1, 5_000, 1 << 20]))
def test_mcap_out_writes_the_same_bytes_into_a_direct_file(
    direct_dir: Path, messages: list[tuple[int, int, int]], chunk_size: int
) -> None:
    # the offsets in the indexes and the summary are the logical ones: the file is the stream's, byte for byte
    path = _fresh(direct_dir, "out.mcap")
    stream = io.BytesIO()
    file = _direct_file(path, staging=STAGING)
    assert file is not None
    rng = np.random.default_rng(len(messages))
    payloads = [rng.normal(size=size // 4).astype(np.float32) for _, _, size in messages]
    outs = (McapOut(file, chunk_size=chunk_size, crcs=False), McapOut(stream, chunk_size=chunk_size, crcs=False))
    for out in outs:
        out.start(profile="", library="test/1")
        out.add_metadata("rig", {"a": "1"})
        for i in range(2):
            out.register_channel(f"/t{i}", "raw", 0)
        for (channel, t, _), p in zip(messages, payloads, strict=True):
            out.add_message(channel_id=channel + 1, log_time=t, data=(b"head", p.data), publish_time=t)
        out.finish()
    assert outs[0].offset == outs[1].offset == file.tell()
    file.close()
    assert path.read_bytes() == stream.getvalue()


def _drive_bytes(tmp_path: Path, name: str, streaming: bool, **kwargs: Any) -> tuple[Written, bytes]:
    written = write_drive(tmp_path / name, frames=30, chunk_size=3_000, streaming=streaming, **kwargs)
    return written, written.path.read_bytes()


@pytest.mark.parametrize("compression", ["none", "zstd"])
def test_a_streaming_drive_is_the_buffered_one_and_reads_back(direct_dir: Path, compression: str) -> None:
    _, want = _drive_bytes(direct_dir, f"plain-{compression}.mcap", False, compression=compression)
    streamed, got = _drive_bytes(direct_dir, f"streamed-{compression}.mcap", True, compression=compression)
    assert got == want
    with DriveReader(streamed.path) as reader:
        samples = list(reader.samples())
    for g, w in zip(samples, streamed.sorted_samples(), strict=True):
        assert_same_sample(g, w)


def test_a_streaming_writer_writes_direct(direct_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    flags: list[int] = []
    real = fcntl.fcntl

    def spy(fd: int, cmd: int, arg: int = 0) -> Any:
        if cmd == fcntl.F_SETFL:
            flags.append(arg)
        return real(fd, cmd, arg)

    monkeypatch.setattr(fcntl, "fcntl", spy)
    advised: list[int] = []
    monkeypatch.setattr(os, "posix_fadvise", lambda *a: advised.append(a[2]), raising=False)
    with DriveWriter(direct_dir / "direct.mcap", [], streaming=True, chunk_size=1) as w:
        w.add_bytes_channel("/b", "raw")
        for i in range(300):  # 36 MB: more than twice STREAMING_BEHIND, which a buffered file would drop
            w.write_bytes("/b", i, bytes(120_000))
    assert any(f & os.O_DIRECT for f in flags)
    assert advised == []  # no page cache to drop from


@pytest.fixture
def refusing(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[str], list[str]]]:
    """``refuse("flag")`` / ``refuse("write")``: the file system refuses O_DIRECT when it is set on the file or at
    the first (direct) write, with EINVAL; the list returned records each refusal."""
    refused: list[str] = []

    def refuse(where: str) -> list[str]:
        if where == "flag":
            real = fcntl.fcntl

            def fcntl_(fd: int, cmd: int, arg: int = 0) -> Any:
                if cmd == fcntl.F_SETFL and arg & getattr(os, "O_DIRECT", 0):
                    refused.append("flag")
                    raise OSError(errno.EINVAL, "Invalid argument")
                return real(fd, cmd, arg)

            monkeypatch.setattr(fcntl, "fcntl", fcntl_)
        else:

            def pwrite(fd: int, data: Any, offset: int) -> int:
                refused.append("write")
                raise OSError(errno.EINVAL, "Invalid argument")

            monkeypatch.setattr(os, "pwrite", pwrite)
        return refused

    yield refuse


@pytest.mark.parametrize("where", ["flag", "write"])
def test_a_file_system_refusing_o_direct_gets_the_same_bytes_buffered(
    tmp_path: Path, refusing: Callable[[str], list[str]], where: str, caplog: pytest.LogCaptureFixture
) -> None:
    _, want = _drive_bytes(tmp_path, "plain.mcap", False)
    refused = refusing(where)
    with caplog.at_level("DEBUG", logger="perception.drives._direct"):
        streamed, got = _drive_bytes(tmp_path, "streamed.mcap", True)
    if not hasattr(os, "O_DIRECT"):
        pytest.skip("no O_DIRECT on this platform: nothing refused")
    assert refused == [where]  # refused once, then written buffered
    assert got == want
    assert "refuses O_DIRECT" in caplog.text
    with DriveReader(streamed.path) as reader:
        assert len(list(reader.samples())) == len(streamed.samples)


def _failing_disk(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Direct writes after the open's probe fail with ENOSPC; the descriptors opened are listed."""
    fds: list[int] = []
    real_open, real_pwrite = os.open, os.pwrite

    def open_(path: Any, flag: int, *args: Any, **kwargs: Any) -> int:
        fd = real_open(path, flag, *args, **kwargs)
        fds.append(fd)
        return fd

    def pwrite(fd: int, data: Any, offset: int) -> int:
        if fds and fd == fds[-1] and len(data) == BLOCK and offset == 0 and not getattr(pwrite, "probed", False):
            pwrite.probed = True  # type: ignore[attr-defined]
            return real_pwrite(fd, data, offset)
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "open", open_)
    monkeypatch.setattr(os, "pwrite", pwrite)
    return fds


def _closed(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError as exc:
        return exc.errno == errno.EBADF
    return False


def test_a_full_disk_mid_write_names_the_file_and_closes_it(direct_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fds = _failing_disk(monkeypatch)
    path = direct_dir / "full.mcap"
    w = DriveWriter(path, [], streaming=True, chunk_size=1)
    w.add_bytes_channel("/b", "raw")
    with pytest.raises(DriveError, match="No space left") as info:
        for i in range(100):
            w.write_bytes("/b", i, bytes(50_000))
    assert str(path) in str(info.value) and "/b" in str(info.value)
    with pytest.raises(DriveError, match="No space left") as info:
        w.close()
    assert str(path) in str(info.value)
    assert fds and all(_closed(fd) for fd in fds)
    w.close()  # closed: nothing more


def test_a_full_disk_at_the_last_block_names_the_file_and_closes_it(
    direct_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fds = _failing_disk(monkeypatch)
    path = direct_dir / "full-at-close.mcap"
    w = DriveWriter(path, [], streaming=True)  # everything in one chunk: the file's writes wait for close()
    w.add_bytes_channel("/b", "raw")
    w.write_bytes("/b", 0, b"x" * 100)
    with pytest.raises(DriveError, match="cannot finish drive: No space left") as info:
        w.close()
    assert str(path) in str(info.value)
    assert fds and all(_closed(fd) for fd in fds)


def test_a_full_disk_while_the_drive_is_created_names_the_file_and_removes_it(
    direct_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # metadata of more than a block: the streaming file writes its first block while the drive is created
    fds = _failing_disk(monkeypatch)
    path = direct_dir / "full-at-open.mcap"
    with pytest.raises(DriveError, match="cannot create drive: No space left") as info:
        DriveWriter(path, [], metadata={"notes": "x" * (2 * BLOCK)}, streaming=True)
    assert str(path) in str(info.value)
    assert fds and all(_closed(fd) for fd in fds)
    assert not path.exists()


@pytest.mark.parametrize("streaming", [False, True])
def test_an_exclusive_writer_refuses_a_file_already_there_and_leaves_it(tmp_path: Path, streaming: bool) -> None:
    # a run recording's segment is created exclusively: a user's file that appeared under its name is not overwritten
    path = tmp_path / "taken.mcap"
    path.write_bytes(b"a user's notes\n")
    with pytest.raises(DriveError, match=r"taken\.mcap.*cannot create drive") as info:
        DriveWriter(path, [], streaming=streaming, exclusive=True)
    assert isinstance(info.value.__cause__, FileExistsError)
    assert path.read_bytes() == b"a user's notes\n"
    path.unlink()
    with DriveWriter(path, [], streaming=streaming, exclusive=True) as w:  # a new file: written as any drive
        w.add_bytes_channel("/b", "raw")
        w.write_bytes("/b", 0, b"x" * 5_000)
    with DriveReader(path) as reader:
        assert reader.start_ns == 0
