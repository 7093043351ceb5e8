"""``cut_short_at``: an MCAP file that begins as one and does not end as one (a writer that died), told by its
magic at both ends, in one place (a recording's damaged segment, a bag's cut MCAP file)."""

from __future__ import annotations

from pathlib import Path

from drive_fixtures import Written

from perception.drives import cut_short_at


def test_a_drive_cut_anywhere_before_its_end_is_cut_short_at_its_size(drive: Written, tmp_path: Path) -> None:
    data = drive.path.read_bytes()
    cut = tmp_path / "cut.mcap"
    for n in (0, 3, 8, 100, len(data) // 2, len(data) - 1):  # empty, within the magic, ..., the last byte missing
        cut.write_bytes(data[:n])
        assert cut_short_at(cut) == n, n


def test_a_whole_drive_another_file_or_none_is_not_cut_short(drive: Written, tmp_path: Path) -> None:
    assert cut_short_at(drive.path) is None
    text = tmp_path / "notes.mcap"
    text.write_text("notes\n")
    assert cut_short_at(text) is None  # does not begin as MCAP
    assert cut_short_at(tmp_path / "absent.mcap") is None  # cannot be read
    assert cut_short_at(tmp_path) is None  # a directory
