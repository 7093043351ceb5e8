"""The drives' MCAP writer writes the ``mcap`` library's file byte for byte, without copying payloads."""

from __future__ import annotations

import io
import os
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mcap.reader import make_reader
from mcap.writer import CompressionType, Writer

from perception.drives._mcap_out import McapOut

_LIB = {"": CompressionType.NONE, "lz4": CompressionType.LZ4, "zstd": CompressionType.ZSTD}
MESSAGES = st.lists(
    st.tuples(st.integers(0, 2), st.integers(0, 2**40), st.integers(0, 5_000), st.integers(0, 2**32 - 1)),
    max_size=40,
)


def _both(
    compression: str, crcs: bool, chunk_size: int, messages: list[tuple[int, int, int, int]]
) -> tuple[bytes, bytes]:
    ours, theirs = io.BytesIO(), io.BytesIO()
    lib = Writer(theirs, chunk_size=chunk_size, compression=_LIB[compression], enable_crcs=crcs)
    out = McapOut(ours, chunk_size=chunk_size, compression=compression, crcs=crcs)
    rng = np.random.default_rng(len(messages))
    for w in (lib, out):
        w.start(profile="", library="test/1")
        w.add_metadata("rig", {"a": "1", "b": "two"})
    for w in (lib, out):
        for i in range(3):
            sid = w.register_schema(f"s{i}", "jsonschema", b"{}" * i)
            w.register_channel(f"/t{i}", "json", sid)
    for channel, t, size, seq in messages:
        payload = rng.integers(0, 255, size, dtype=np.uint8)
        lib.add_message(channel_id=channel + 1, log_time=t, data=payload.tobytes(), publish_time=t, sequence=seq)
        head, body = payload[: size // 3].tobytes(), memoryview(payload[size // 3 :])
        out.add_message(channel_id=channel + 1, log_time=t, data=(head, body), publish_time=t, sequence=seq)
    lib.finish()  # type: ignore[no-untyped-call]
    out.finish()
    return ours.getvalue(), theirs.getvalue()


@settings(max_examples=40, deadline=None)
@given(
    messages=MESSAGES,
    compression=st.sampled_from(["", "lz4", "zstd"]),
    crcs=st.booleans(),
    chunk_size=st.sampled_from([1, 100, 4_000, 1 << 20]),
)
def test_the_same_bytes_as_the_mcap_library(
    messages: list[tuple[int, int, int, int]], compression: str, crcs: bool, chunk_size: int
) -> None:
    ours, theirs = _both(compression, crcs, chunk_size, messages)
    assert ours == theirs


@pytest.mark.parametrize("compression", ["", "zstd"])
def test_a_file_the_library_reads_back(compression: str) -> None:
    ours, _ = _both(compression, True, 4_000, [(i % 3, 10 * i, 1_000 + i, i) for i in range(30)])
    reader = make_reader(io.BytesIO(ours), validate_crcs=True)
    got = [(c.id, m.log_time, len(m.data)) for _, c, m in reader.iter_messages(log_time_order=False)]
    assert got == [(i % 3 + 1, 10 * i, 1_000 + i) for i in range(30)]
    assert reader.get_summary() is not None and len(reader.get_summary().chunk_indexes) > 1  # type: ignore[union-attr]


@pytest.mark.parametrize("compression", ["", "lz4"])
def test_a_file_gets_the_same_bytes_as_a_stream(tmp_path: Path, compression: str) -> None:
    # into a file a chunk's pieces go with writev, up to 1024 a call: a chunk of ~3,000 pieces (header,
    # bytes, a memoryview of another item size) is written in several calls, then the summary after it
    rng = np.random.default_rng(3)
    payloads = [rng.integers(0, 255, int(rng.integers(0, 40)), dtype=np.uint8) for _ in range(1_000)]
    path = tmp_path / "out.mcap"
    stream = io.BytesIO()
    with open(path, "wb") as file:
        for out in (McapOut(file, chunk_size=1 << 20, compression=compression, crcs=True),
                    McapOut(stream, chunk_size=1 << 20, compression=compression, crcs=True)):  # fmt: skip
            out.start(profile="", library="test/1")
            out.register_channel("/t", "raw", 0)
            for i, p in enumerate(payloads):
                body = memoryview(p[: len(p) // 4 * 4].view("<u4"))  # nbytes, not len, is its size
                out.add_message(channel_id=1, log_time=i, data=(p.tobytes(), body), publish_time=i, sequence=i)
            out.finish()
    assert path.read_bytes() == stream.getvalue()
    reader = make_reader(io.BytesIO(stream.getvalue()), validate_crcs=True)
    assert [len(m.data) for _, _, m in reader.iter_messages()] == [len(p) + len(p) // 4 * 4 for p in payloads]


@pytest.mark.skipif(not hasattr(os, "posix_fadvise"), reason="no posix_fadvise on this platform")
def test_a_streaming_file_drops_what_it_wrote_from_the_page_cache_and_writes_the_same_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # drop_behind: the pages more than that far behind the end leave the page cache as chunks are written (a
    # run recording); the file is the library's, byte for byte, and a file system refusing the advice is
    # left alone (the file still written whole)
    calls: list[tuple[int, int, int]] = []
    real = os.posix_fadvise

    def advise(fd: int, offset: int, length: int, advice: int) -> None:
        calls.append((offset, length, advice))
        real(fd, offset, length, advice)

    monkeypatch.setattr(os, "posix_fadvise", advise)
    rng = np.random.default_rng(1)
    payloads = [rng.integers(0, 255, 50_000, dtype=np.uint8).tobytes() for _ in range(40)]

    def write(path: Path, drop_behind: int) -> McapOut:
        with path.open("wb") as f:
            out = McapOut(f, chunk_size=100_000, drop_behind=drop_behind)
            out.start(profile="", library="test/1")
            out.register_channel("/t", "raw", 0)
            for i, p in enumerate(payloads):
                out.add_message(channel_id=1, log_time=i, data=p, publish_time=i)
            out.finish()
        return out

    write(tmp_path / "plain.mcap", 0)
    assert calls == []
    write(tmp_path / "streamed.mcap", 300_000)
    assert (tmp_path / "streamed.mcap").read_bytes() == (tmp_path / "plain.mcap").read_bytes()
    assert len(calls) >= 2 and all(c[0] == 0 and c[2] == os.POSIX_FADV_DONTNEED for c in calls)
    ends = [c[1] for c in calls]
    size = (tmp_path / "plain.mcap").stat().st_size
    assert ends == sorted(ends) and ends[-1] <= size - 300_000  # never the last 300 kB: behind the end

    def refuse(fd: int, offset: int, length: int, advice: int) -> None:
        calls.append((offset, length, advice))
        raise OSError(22, "Invalid argument")

    monkeypatch.setattr(os, "posix_fadvise", refuse)
    calls.clear()
    write(tmp_path / "refused.mcap", 300_000)
    assert len(calls) == 1  # tried once, then left alone
    assert (tmp_path / "refused.mcap").read_bytes() == (tmp_path / "plain.mcap").read_bytes()
