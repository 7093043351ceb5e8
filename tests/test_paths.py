from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

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


_PARTS = st.sampled_from(["a", "b.md", "..", ".", "", "frames"])
#: No per-example deadline (hypothesis's default is 200 ms): these examples touch the file system, which a
#: loaded host can stall past it (DeadlineExceeded, then Flaky: a failure that says nothing of the code).
_FS = settings(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@settings(_FS, max_examples=300)
@given(parts=st.lists(_PARTS, min_size=1, max_size=6), absolute=st.booleans())
def test_any_name_is_inside_the_output_directory_or_refused(tmp_path: Path, parts: list[str], absolute: bool) -> None:
    """The lexical join (no symlinks here) decides: inside the directory -> that path; else ConfigError."""
    out = (tmp_path / "out").resolve()
    name = ("/" if absolute else "") + "/".join(parts)
    expected = Path(os.path.normpath(os.path.join(out, name)))
    if expected == out or out in expected.parents:
        assert safe_output_path(out, name) == expected
    else:
        with pytest.raises(ConfigError, match="escapes the output directory"):
            safe_output_path(out, name)


@settings(_FS, max_examples=50)
@given(inside=st.booleans(), depth=st.integers(0, 2))
def test_a_symlink_is_followed_to_where_it_points(tmp_path: Path, inside: bool, depth: int) -> None:
    """A name through a planted symlink is judged by its target: refused when that is outside."""
    base = Path(tempfile.mkdtemp(dir=tmp_path)).resolve()
    out, elsewhere = base / "out", base / "elsewhere"
    (out / "sub").mkdir(parents=True)
    elsewhere.mkdir()
    link = out / "link"
    link.symlink_to(out / "sub" if inside else elsewhere)
    name = "/".join(["link", *["x"] * depth, "f.md"])
    if inside:
        assert safe_output_path(out, name) == out / "sub" / "/".join([*["x"] * depth, "f.md"])
    else:
        with pytest.raises(ConfigError, match="escapes the output directory"):
            safe_output_path(out, name)
