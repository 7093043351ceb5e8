"""Process and /dev/shm housekeeping, and assembling the python backend directory."""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from perception.server import cleanup_stale_shm, locate_triton, prepare_backend_dir
from perception.server._procs import pid_alive, process_group_members, remove_shm_prefix
from perception.triton import make_shm_prefix


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_stale_regions_of_dead_owners_are_removed_and_live_ones_kept(tmp_path: Path) -> None:
    dead = _dead_pid()
    assert not pid_alive(dead)
    names = {
        f"perception_{dead}_ab12_region": False,  # dead owner: removed
        f"perception_{dead}_client_input": False,
        f"perception_{os.getpid()}_ab12_region": True,  # this process: kept
        f"perception_{os.getppid()}_cd34_region": True,  # a live process: kept
        "perception_notapid_region": True,  # not ours to judge
        f"other_{dead}_region": True,  # other namespace
    }
    for name in names:
        (tmp_path / name).write_bytes(b"x")
    removed = cleanup_stale_shm(tmp_path)
    assert sorted(removed) == sorted(n for n, kept in names.items() if not kept)
    for name, kept in names.items():
        assert (tmp_path / name).exists() == kept, name


def test_remove_prefix_stays_in_the_package_namespace(tmp_path: Path) -> None:
    prefix = make_shm_prefix()
    assert prefix.startswith(f"perception_{os.getpid()}_") and prefix.endswith("_")
    (tmp_path / f"{prefix}1").write_bytes(b"x")
    (tmp_path / "perception_other").write_bytes(b"x")
    assert remove_shm_prefix(prefix, tmp_path) == [f"{prefix}1"]
    assert (tmp_path / "perception_other").exists()
    for foreign in ("", "perception_", "triton_python_backend_shm_region_"):
        with pytest.raises(ValueError, match="refusing"):
            remove_shm_prefix(foreign, tmp_path)


def test_process_group_members_lists_a_live_group() -> None:
    proc = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        assert process_group_members(proc.pid) == [proc.pid]
    finally:
        proc.kill()
        proc.wait()
    assert process_group_members(proc.pid) == []


def test_locate_triton_finds_the_wheel() -> None:
    install = locate_triton()
    assert install.binary.name == "tritonserver" and os.access(install.binary, os.X_OK)
    assert install.stub.parent.name == f"{sys.version_info.major}.{sys.version_info.minor}"
    assert install.libs_dir.is_dir()


def test_backend_dir_is_assembled_once_even_concurrently(tmp_path: Path) -> None:
    install = locate_triton()
    with ThreadPoolExecutor(4) as pool:
        dirs = set(pool.map(lambda _: prepare_backend_dir(install, tmp_path), range(8)))
    assert len(dirs) == 1
    backend = dirs.pop()
    python_dir = backend / "python"
    assert sorted(p.name for p in python_dir.iterdir()) == [
        "libtriton_python.so",
        "triton_python_backend_stub",
        "triton_python_backend_utils.py",
    ]
    assert os.access(python_dir / "triton_python_backend_stub", os.X_OK)
    assert [p.name for p in tmp_path.iterdir()] == [backend.name]  # no temporary leftovers
    # A broken (incomplete) cache entry is rebuilt.
    (python_dir / "triton_python_backend_stub").unlink()
    assert prepare_backend_dir(install, tmp_path) == backend
    assert (python_dir / "triton_python_backend_stub").is_file()
