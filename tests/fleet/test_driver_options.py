"""``FleetOptions``: limits of a fleet run's options, said once and naming the option."""

from __future__ import annotations

from pathlib import Path

import pytest

from perception.cli import main


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [("--workers", "2000", "must be within 1..1024, got 2000"), ("--retries", "11", "must be within 0..10, got 11")],
)
def test_an_option_over_its_limit_is_one_line_naming_it_once(
    option: str, value: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # It said '--workers: --workers must be within 1..1024, got 2000'.
    drive = tmp_path / "urban.mcap"
    drive.write_bytes(b"\x89MCAP0\r\n")  # never opened: the options are refused first
    code = main(["fleet", str(drive), "--out", str(tmp_path / "out"), option, value, "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2
    assert err == f"perception fleet: error: {option}: {message}\n"
    assert not (tmp_path / "out").exists()
