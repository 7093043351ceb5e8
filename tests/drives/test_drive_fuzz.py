"""Fuzz of drive reading (issue 33): a small drive with bytes overwritten anywhere -- inside compressed
chunks, over their declared sizes, the summary, the footer -- opens and reads with nothing but a
DriveError (strict) or a counted skip (not strict), never another exception."""

from __future__ import annotations

import contextlib
import tempfile
from pathlib import Path

import pytest
from drive_fixtures import write_drive
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from perception.drives import DriveReader
from perception.errors import DriveError

MUTATION = st.tuples(
    st.floats(0.0, 1.0),  # where, as a fraction of the file
    st.one_of(
        st.binary(min_size=1, max_size=16),
        st.sampled_from([b"\xff" * 8, b"\x00" * 8, (2**40).to_bytes(8, "little"), (2**63).to_bytes(8, "little")]),
    ),
)


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    path = tmp_path_factory.mktemp("fuzz") / "d.mcap"
    write_drive(path, frames=12, chunk_size=3_000, compression="zstd")
    return path.read_bytes()


def read_all(path: Path, strict: bool) -> int:
    """Everything a replay reads; the number of items read."""
    with DriveReader(path, strict=strict, quiet=True) as d:
        n = sum(1 for _ in d.samples())
        n += len(d.ego_poses()) + len(d.ground_truth())
        d.verify()
        d.stats()
        return n


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(mutations=st.lists(MUTATION, min_size=1, max_size=4), strict=st.booleans())
def test_mutated_drives_read_or_fail_with_a_drive_error(
    pristine: bytes, mutations: list[tuple[float, bytes]], strict: bool
) -> None:
    data = bytearray(pristine)
    for where, block in mutations:
        at = min(len(data) - len(block), int(where * len(data)))
        data[at : at + len(block)] = block
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "m.mcap"
        path.write_bytes(bytes(data))
        with contextlib.suppress(DriveError):  # a clear error naming the file (every DriveError carries it)
            read_all(path, strict)
