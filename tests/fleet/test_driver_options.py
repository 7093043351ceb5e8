"""A fleet run's options (``FleetOptions``, ``perception fleet``): refused before any cluster, named once."""

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


@pytest.mark.parametrize(
    ("urls", "message"),
    [(["http://gpu:8001"], "gRPC URLs are host:port (no http:// scheme)"), (["a:1", "a:1"], "duplicate URL 'a:1'")],
)
def test_a_malformed_url_is_refused_before_any_cluster(
    urls: list[str], message: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # It started a cluster and failed every drive with 'triton.urls: ...' (exit 1).
    from perception.fleet import _driver

    def no_cluster(self: object) -> bool:
        raise AssertionError("a Ray cluster was started")

    monkeypatch.setattr(_driver._Fleet, "connect", no_cluster)
    drive = tmp_path / "urban.mcap"
    drive.write_bytes(b"\x89MCAP0\r\n")
    argv = ["fleet", str(drive), "--out", str(tmp_path / "out"), "--no-progress"]
    code = main([*argv, *(a for u in urls for a in ("--url", u))])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith(f"perception fleet: error: --url: {message}") and err.count("\n") == 1, err
    assert not (tmp_path / "out").exists()
