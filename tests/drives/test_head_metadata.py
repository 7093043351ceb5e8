"""``head_metadata``: a drive's metadata from the records at its start alone (``perception.record`` tells an
earlier recording's segment by it: one MCAP record reader, the drive package's, not a second one by hand)."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from drive_fixtures import Written
from mcap.writer import Writer

from perception.drives import DriveReader, head_metadata
from perception.errors import DriveError


def test_a_drive_s_metadata_is_read_from_its_start_alone(drive: Written, tmp_path: Path) -> None:
    with DriveReader(drive.path) as reader:
        expected = dict(reader.metadata)
    assert expected.items() >= drive.metadata.items()
    assert head_metadata(drive.path) == expected
    # nothing past the drive's metadata is read: a drive whose messages are garbage, or cut, reads the same
    data = drive.path.read_bytes()
    head = tmp_path / "head.mcap"
    head.write_bytes(data[: len(data) // 2] + b"\xff" * 100_000)
    assert head_metadata(head) == expected


def test_a_drive_cut_short_before_its_metadata_is_none(drive: Written, tmp_path: Path) -> None:
    # empty, the magic cut, the header or the rig's metadata cut: a writer that died (nothing says it is not a drive)
    data = drive.path.read_bytes()
    end = _records_end(data)
    cut = tmp_path / "cut.mcap"
    for n in (0, 3, 8, 12, 30, end - 1):
        cut.write_bytes(data[:n])
        assert head_metadata(cut) is None, n


@pytest.mark.parametrize("what", ["text", "message first", "string past its record", "huge record", "directory"])
def test_a_file_that_does_not_begin_as_a_drive_is_a_drive_error(tmp_path: Path, what: str) -> None:
    path = tmp_path / "other.mcap"
    if what == "text":
        path.write_text("notes\n")
    elif what == "directory":
        path.mkdir()
    else:
        with path.open("wb") as f:
            writer = Writer(f, use_chunking=what != "message first")  # (chunked: the metadata before the chunk)
            writer.start("", "another tool")
            if what == "message first":
                schema = writer.register_schema("s", "jsonschema", b"{}")
                writer.add_message(writer.register_channel("/t", "json", schema), 0, b"{}", 0)
            writer.add_metadata("perception.drive", {"record.format": "4"})
            writer.finish()
        data = bytearray(path.read_bytes())
        at = data.index(b"perception.drive") - 4 - 9  # the metadata record's opcode
        if what == "string past its record":
            # its last value ("4") said longer than the record holds: the library's reader hands out what is left
            (length,) = struct.unpack_from("<Q", data, at + 1)
            struct.pack_into("<I", data, at + 9 + length - 1 - 4, 2)
        elif what == "huge record":
            struct.pack_into("<Q", data, at + 1, 2**40)
        path.write_bytes(bytes(data))
    with pytest.raises(DriveError) as info:
        head_metadata(path)
    assert info.value.context["file"] == str(path)


def _records_end(data: bytes) -> int:
    """The offset just past the drive metadata record (the one before the first chunk)."""
    at = data.index(b"perception.drive") - 4 - 9
    (length,) = struct.unpack_from("<Q", data, at + 1)
    return at + 9 + length
