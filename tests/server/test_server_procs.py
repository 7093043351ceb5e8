"""Process and /dev/shm housekeeping, and assembling the python backend directory."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from perception.server import cleanup_stale_shm, locate_triton, prepare_backend_dir
from perception.server._procs import (
    ProcessInfo,
    iter_processes,
    kill_orphaned_stubs,
    pid_alive,
    process_group_members,
    remove_shm_prefix,
)
from perception.triton import make_shm_prefix

#: The environment variable marking the children of the walk's tests.
MARK = "PERCEPTION_PROCS_TEST"


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


#: A stand-in for a python backend stub: the stub's command name, a stub's arguments (model file, region
#: name...), waiting for a server that never answers.
_STUB_LIKE = (
    "import ctypes, sys, time; ctypes.CDLL(None).prctl(15, sys.argv[1].encode()[:15], 0, 0, 0); "
    "sys.stdout.write('up\\n'); sys.stdout.flush(); time.sleep(120)"
)


def _stub_like(comm: str, region: str) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen([sys.executable, "-c", _STUB_LIKE, comm, "model.py", region], stdout=subprocess.PIPE)
    assert proc.stdout is not None and proc.stdout.readline() == b"up\n"  # its name is set
    return proc


def test_only_python_backend_stubs_of_dead_owners_are_killed_as_orphans() -> None:
    """Seen after a run killed while its server's models loaded: six stubs, their server gone, still waiting
    minutes later. The next start kills stubs whose region names a dead owner, and nothing else."""
    dead = _dead_pid()
    procs = {
        "orphan": _stub_like("triton_python_backend_stub", f"perception_{dead}_ab12_x"),
        "live owner": _stub_like("triton_python_backend_stub", f"perception_{os.getppid()}_ab12_x"),
        "this process": _stub_like("triton_python_backend_stub", f"perception_{os.getpid()}_ab12_x"),
        "not a stub": _stub_like("sleeper", f"perception_{dead}_ab12_x"),
        "not our region": _stub_like("triton_python_backend_stub", f"triton_python_backend_shm_{dead}"),
    }
    try:
        killed = kill_orphaned_stubs()
        assert procs["orphan"].pid in killed
        assert procs["orphan"].wait(timeout=30) == -9
        for name, proc in procs.items():
            if name != "orphan":
                assert proc.pid not in killed, name
                assert proc.poll() is None, name
    finally:
        for proc in procs.values():
            proc.kill()
            proc.wait()
            assert proc.stdout is not None
            proc.stdout.close()


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


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    """A child of this test in its own session, with an argument and an environment variable of its own."""
    code = "import time; time.sleep(60)"
    proc = subprocess.Popen(
        [sys.executable, "-c", code, "procs-test-argument"],
        env={**os.environ, MARK: f"sleeper {os.getpid()}"},
        start_new_session=True,
    )
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


def _find(pid: int, walk: Iterator[ProcessInfo]) -> ProcessInfo | None:
    return next((p for p in walk if p.pid == pid), None)


def test_the_walk_finds_a_child_with_its_command_line_and_environment(sleeper: subprocess.Popen[bytes]) -> None:
    found = _find(sleeper.pid, iter_processes(argv=True, environ=True))
    assert found is not None
    assert found.argv == (sys.executable, "-c", "import time; time.sleep(60)", "procs-test-argument")
    assert found.environ[MARK] == f"sleeper {os.getpid()}"
    assert found.environ.get("PATH") == os.environ.get("PATH")
    assert found.pgid == sleeper.pid and found.alive
    assert found.comm == Path(sys.executable).name[:15]  # the name it was started by, cut by the kernel
    assert 0 <= found.cpu_ns < 60 * 1_000_000_000
    assert MARK not in repr(found)  # environments stay out of logs
    # Only the stat fields unless asked for more.
    plain = _find(sleeper.pid, iter_processes())
    assert plain is not None and plain.argv == () and dict(plain.environ) == {}
    assert plain.pgid == found.pgid and plain.comm == found.comm


def test_the_walk_reports_a_zombie_as_not_alive_and_skips_a_reaped_child(sleeper: subprocess.Popen[bytes]) -> None:
    sleeper.kill()
    deadline = time.monotonic() + 10.0
    while (zombie := _find(sleeper.pid, iter_processes(argv=True))) is not None and zombie.alive:
        assert time.monotonic() < deadline, "the killed child never became a zombie"
        time.sleep(0.01)
    assert zombie is not None and zombie.state == "Z" and zombie.argv == ()
    sleeper.wait()
    assert _find(sleeper.pid, iter_processes(argv=True, environ=True)) is None


def test_a_process_that_exits_during_the_walk_is_skipped(sleeper: subprocess.Popen[bytes]) -> None:
    walk = iter_processes(argv=True, environ=True)
    first = next(walk)  # /proc is listed now, the child's entry with it
    assert first.pid != sleeper.pid
    sleeper.kill()
    sleeper.wait()
    assert _find(sleeper.pid, walk) is None


def _fake_proc(root: Path, pid: int, files: dict[str, bytes]) -> None:
    (root / str(pid)).mkdir()
    for name, data in files.items():
        (root / str(pid) / name).write_bytes(data)


def test_the_walk_skips_vanished_and_unparsable_entries(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A fake ``/proc``: entries gone between the listing and the reads, or between two reads, are skipped."""
    # pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime ...
    stat = b"%d (a (b) c) S 1 %d 0 0 -1 0 0 0 0 0 %d %d 0 0 20 0 1 0 0 0 0\n"
    _fake_proc(tmp_path, 100, {"stat": stat % (100, 77, 3, 4), "cmdline": b"x\0-y\0", "environ": b"A=1\0B=x=y\0"})
    _fake_proc(tmp_path, 101, {})  # gone before its stat was read
    _fake_proc(tmp_path, 102, {"stat": stat % (102, 77, 0, 0)})  # gone after its stat was read
    _fake_proc(tmp_path, 103, {"stat": b"103 (truncated) S\n", "cmdline": b"z\0"})
    _fake_proc(tmp_path, 104, {"stat": stat % (104, 5, 0, 0), "cmdline": b"rewritten title  ", "environ": b""})
    (tmp_path / "self").mkdir()
    tick_ns = 1_000_000_000 // os.sysconf("SC_CLK_TCK")

    walked = {p.pid: p for p in iter_processes(argv=True, environ=True, proc_dir=tmp_path)}
    assert sorted(walked) == [100, 104]
    assert walked[100] == ProcessInfo(100, "a (b) c", "S", 77, 7 * tick_ns, ("x", "-y"), {"A": "1", "B": "x=y"})
    assert dict(walked[100].environ) == {"A": "1", "B": "x=y"}
    assert walked[104].argv == ("rewritten title  ",) and dict(walked[104].environ) == {}
    # Without the command line, the entry gone after its stat was read is still one process of group 77.
    assert sorted(p.pid for p in iter_processes(proc_dir=tmp_path) if p.pgid == 77) == [100, 102]

    # An environment this process may not read (another user's process): listed without one.
    real_read_bytes = Path.read_bytes

    def read_bytes(path: Path) -> bytes:
        if path.name == "environ":
            raise PermissionError(13, "Permission denied", str(path))
        return real_read_bytes(path)

    monkeypatch.setattr(Path, "read_bytes", read_bytes)
    walked = {p.pid: p for p in iter_processes(argv=True, environ=True, proc_dir=tmp_path)}
    assert sorted(walked) == [100, 104] and dict(walked[100].environ) == {}
    assert walked[100].argv == ("x", "-y")


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
