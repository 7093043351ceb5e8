from __future__ import annotations

from pathlib import Path

import pytest

from perception._paths import safe_output_path
from perception.errors import ConfigError


def test_names_inside_the_output_directory(tmp_path: Path) -> None:
    assert safe_output_path(tmp_path, "report.md") == tmp_path.resolve() / "report.md"
    assert safe_output_path(tmp_path, "frames/frame_1.png") == tmp_path.resolve() / "frames" / "frame_1.png"


@pytest.mark.parametrize("name", ["../escape.md", "/etc/passwd", "a/../../b"])
def test_names_escaping_are_refused(tmp_path: Path, name: str) -> None:
    with pytest.raises(ConfigError, match="escapes the output directory"):
        safe_output_path(tmp_path / "out", name)


def test_a_planted_symlink_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "report.md").symlink_to(tmp_path / "elsewhere.md")
    with pytest.raises(ConfigError, match=r"report\.md"):
        safe_output_path(out, "report.md")
