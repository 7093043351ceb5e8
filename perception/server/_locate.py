"""Find the ``tritonserver`` shipped in the nvidia-pytriton wheel and assemble its python backend.

The wheel ships the server binary, its private shared libraries (``nvidia_pytriton.libs``), the python
backend library and one ``triton_python_backend_stub`` per Python version. Triton wants the stub *next to*
``libtriton_python.so``, so :func:`prepare_backend_dir` assembles a backend directory under the user cache,
keyed by a content hash, atomically (built in a temporary directory, then renamed into place) so that
concurrent starts never see a half-copied backend.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import os
import shutil
import sys
import sysconfig
import tempfile
from dataclasses import dataclass
from pathlib import Path

from perception.errors import ServerError

__all__ = [
    "STUB_NAME",
    "TritonInstall",
    "backend_cache_root",
    "locate_triton",
    "package_root",
    "prepare_backend_dir",
    "server_env",
]

STUB_NAME = "triton_python_backend_stub"
_BACKEND_LIB = "libtriton_python.so"
_BACKEND_UTILS = "triton_python_backend_utils.py"


@dataclass(frozen=True)
class TritonInstall:
    """Paths of the Triton pieces inside the installed nvidia-pytriton wheel."""

    binary: Path
    """The ``tritonserver`` executable."""
    libs_dir: Path
    """The wheel's bundled shared libraries (``site-packages/nvidia_pytriton.libs``)."""
    python_backend_dir: Path
    """Source of the python backend (``libtriton_python.so`` + ``triton_python_backend_utils.py``)."""
    stub: Path
    """``triton_python_backend_stub`` built for the running Python version."""


def locate_triton() -> TritonInstall:
    """Return the Triton pieces of the nvidia-pytriton wheel for the running interpreter.

    Raises :class:`ServerError` naming what is missing (wheel not installed, no stub for this Python).
    """
    spec = importlib.util.find_spec("pytriton")
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    if not locations:
        raise ServerError("the nvidia-pytriton wheel is not installed; `pip install nvidia-pytriton`")
    root = Path(locations[0]) / "tritonserver"
    py_version = f"{sys.version_info.major}.{sys.version_info.minor}"
    install = TritonInstall(
        binary=root / "bin" / "tritonserver",
        libs_dir=root.parents[1] / "nvidia_pytriton.libs",
        python_backend_dir=root / "backends" / "python",
        stub=root / "python_backend_stubs" / py_version / STUB_NAME,
    )
    if not install.stub.is_file():
        available = sorted(p.name for p in (root / "python_backend_stubs").glob("*") if p.is_dir())
        raise ServerError(
            f"nvidia-pytriton ships no python backend stub for Python {py_version} "
            f"(available: {', '.join(available) or 'none'})",
            file=install.stub,
        )
    for required in (
        install.binary,
        install.python_backend_dir / _BACKEND_LIB,
        install.python_backend_dir / _BACKEND_UTILS,
    ):
        if not required.is_file():
            raise ServerError("incomplete nvidia-pytriton install: file missing", file=required)
    if not os.access(install.binary, os.X_OK):
        raise ServerError("tritonserver is not executable", file=install.binary)
    return install


def backend_cache_root() -> Path:
    """``$XDG_CACHE_HOME/perception/triton-backends`` (``~/.cache/...`` by default)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "perception" / "triton-backends"


def _backend_sources(install: TritonInstall) -> tuple[Path, ...]:
    return (
        install.python_backend_dir / _BACKEND_LIB,
        install.python_backend_dir / _BACKEND_UTILS,
        install.stub,
    )


@functools.lru_cache(maxsize=8)
def _content_hash(sources: tuple[Path, ...]) -> str:
    digest = hashlib.sha256()
    for path in sources:
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def _is_complete(backend_dir: Path) -> bool:
    python_dir = backend_dir / "python"
    return all((python_dir / name).is_file() for name in (_BACKEND_LIB, _BACKEND_UTILS, STUB_NAME))


def prepare_backend_dir(install: TritonInstall, cache_root: Path | None = None) -> Path:
    """Return a ``--backend-directory`` whose ``python/`` holds the backend library, utils and stub.

    The directory is ``<cache_root>/<content-hash>`` and is created at most once: it is assembled in a
    temporary sibling and renamed into place, so concurrent callers either win the rename or use the
    winner's copy. A stale incomplete directory (e.g. an old crash) is replaced.
    """
    root = cache_root if cache_root is not None else backend_cache_root()
    sources = _backend_sources(install)
    try:
        target = root / _content_hash(sources)
        if _is_complete(target):
            return target
        root.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=root))
        try:
            python_dir = tmp / "python"
            python_dir.mkdir()
            for src in sources:
                shutil.copy2(src, python_dir / src.name)
            if target.exists() and not _is_complete(target):
                shutil.rmtree(target, ignore_errors=True)
            try:
                tmp.rename(target)
            except OSError:
                if not _is_complete(target):  # lost the race to a broken copy: real failure
                    raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    except OSError as exc:
        raise ServerError(f"cannot prepare the python backend directory: {exc}", file=root) from exc
    return target


def package_root() -> Path:
    """The directory holding the :mod:`perception` package in use (the repo root for a source checkout)."""
    import perception

    return Path(perception.__file__).resolve().parents[1]


def server_env(install: TritonInstall, base: dict[str, str] | None = None) -> dict[str, str]:
    """Environment for ``tritonserver``: its bundled libs + libpython on the library path, and this
    interpreter's environment (venv site-packages, and the root holding :mod:`perception`, also made the
    server's cwd by :class:`EmbeddedTriton`) for the python backend stub, so ``model.py`` imports the same
    numpy and :mod:`perception.modelkit` as this process."""
    env = dict(os.environ if base is None else base)
    lib_parts = [str(install.libs_dir)]
    libdir = sysconfig.get_config_var("LIBDIR")
    if libdir:
        lib_parts.append(str(libdir))
    py_parts = [sysconfig.get_paths()["purelib"], str(package_root())]
    # PYTHONPATH is set for completeness, but the 2.51 stub's embedded interpreter was observed to ignore
    # it. Like a plain `python3`, that interpreter finds its prefix by searching PATH, so this
    # interpreter's bin dir goes first: inside a venv that selects the venv (its pyvenv.cfg) and thus its
    # site-packages. Without it the stub imported the base interpreter's numpy 2, and every output
    # tensor reached the client empty.
    path_parts = [str(Path(sys.executable).parent)]
    for key, parts in (("LD_LIBRARY_PATH", lib_parts), ("PYTHONPATH", py_parts), ("PATH", path_parts)):
        existing = env.get(key)
        env[key] = os.pathsep.join([*parts, existing] if existing else parts)
    return env
