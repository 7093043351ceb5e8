"""A small offline TF tree: the transforms of a recording, queried by frame chain and time.

Edges are ``parent <- child`` like tf2 (each frame has one parent). Static edges (``/tf_static``)
hold one value; dynamic edges (``/tf``) are sampled in time and interpolated (translation linearly,
rotation by slerp), held constant outside their recorded range.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt
from scipy.spatial.transform import Rotation, Slerp

from perception.types import Transform

__all__ = ["TfError", "TfTree"]

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]


class TfError(ValueError):
    """A chain cannot be resolved or a transform is malformed; the importer adds file/topic."""


def _frame(name: str) -> str:
    return name.lstrip("/")  # tf2 ignores a leading slash


@dataclass
class _Edge:
    parent: str
    child: str
    static: bool
    times: list[int] = field(default_factory=list)
    translations: list[tuple[float, float, float]] = field(default_factory=list)
    rotations: list[tuple[float, float, float, float]] = field(default_factory=list)
    _t: I64 | None = None
    _p: F64 | None = None
    _r: Rotation | None = None
    _slerp: Slerp | None = None

    def finalize(self) -> None:
        t = np.asarray(self.times, dtype=np.int64)
        order = np.argsort(t, kind="stable")
        t = t[order]
        keep = np.ones(len(t), dtype=bool)
        keep[:-1] = np.diff(t) != 0  # equal stamps: the last one wins
        idx = order[keep]
        self._t = t[keep]
        self._p = np.asarray(self.translations, dtype=np.float64)[idx]
        quats = np.asarray(self.rotations, dtype=np.float64)[idx]
        if not (np.isfinite(self._p).all() and np.isfinite(quats).all()):
            raise TfError(f"non-finite values in transform {self.parent} -> {self.child}")
        if (np.linalg.norm(quats, axis=1) < 1e-9).any():
            raise TfError(f"zero quaternion in transform {self.parent} -> {self.child}")
        try:
            self._r = Rotation.from_quat(quats)
            self._slerp = Slerp(self._offsets(self._t), self._r) if len(self._t) > 1 else None
        except ValueError as exc:  # scipy's own checks, should any still fail
            raise TfError(f"transform {self.parent} -> {self.child}: {exc}") from exc

    def _offsets(self, times: I64) -> F64:
        """Integer ns -> ns after the edge's first stamp as float64: exact for 104 days (absolute epoch ns
        are not: two stamps < 256 ns apart would be equal)."""
        assert self._t is not None
        out: F64 = (times - self._t[0]).astype(np.float64)
        return out

    @property
    def first_time(self) -> int:
        assert self._t is not None
        return int(self._t[0])

    def sample_times(self) -> I64:
        assert self._t is not None
        return self._t

    def at(self, times: I64) -> tuple[F64, Rotation]:
        """Translations ``[N,3]`` and rotations at ``times`` (clamped to the recorded range)."""
        assert self._t is not None and self._p is not None and self._r is not None
        n = len(times)
        if self._slerp is None:
            return np.repeat(self._p[:1], n, axis=0), Rotation.from_quat(np.repeat(self._r.as_quat()[:1], n, axis=0))
        tq = self._offsets(np.clip(times, self._t[0], self._t[-1]))
        tf = self._offsets(self._t)
        p = np.column_stack([np.interp(tq, tf, self._p[:, k]) for k in range(3)])
        return p, self._slerp(tq)


def _compose(a: tuple[F64, Rotation], b: tuple[F64, Rotation]) -> tuple[F64, Rotation]:
    """``a @ b``: apply ``b`` first (both ``parent <- child`` along the chain)."""
    pa, ra = a
    pb, rb = b
    return ra.apply(pb) + pa, ra * rb


class TfTree:
    """Collect transforms with :meth:`add`, then query chains with :meth:`lookup` / :meth:`poses`."""

    def __init__(self) -> None:
        self._edges: dict[str, _Edge] = {}  # child -> edge
        self._final = False

    def add(
        self,
        t_ns: int,
        parent: str,
        child: str,
        translation: Sequence[float],
        rotation: Sequence[float],
        *,
        static: bool,
    ) -> None:
        parent, child = _frame(parent), _frame(child)
        if not parent or not child or parent == child:
            raise TfError(f"invalid transform {parent!r} -> {child!r}")
        edge = self._edges.get(child)
        if edge is None:
            edge = self._edges[child] = _Edge(parent, child, static)
        elif edge.parent != parent:
            raise TfError(f"frame {child!r} has two parents: {edge.parent!r} and {parent!r}")
        edge.static = edge.static and static
        edge.times.append(int(t_ns))
        edge.translations.append((float(translation[0]), float(translation[1]), float(translation[2])))
        edge.rotations.append((float(rotation[0]), float(rotation[1]), float(rotation[2]), float(rotation[3])))
        self._final = False

    @property
    def frames(self) -> list[str]:
        return sorted({*self._edges, *(e.parent for e in self._edges.values())})

    def _finalize(self) -> None:
        if not self._final:
            for edge in self._edges.values():
                edge.finalize()
            self._final = True

    def chain(self, parent: str, child: str) -> list[_Edge] | None:
        """The edges from ``child`` up to ``parent`` (child-most first), or ``None`` if not an ancestor."""
        parent, child = _frame(parent), _frame(child)
        out: list[_Edge] = []
        frame = child
        while frame != parent:
            edge = self._edges.get(frame)
            if edge is None or len(out) > len(self._edges):
                return None
            out.append(edge)
            frame = edge.parent
        return out

    def is_ancestor(self, parent: str, child: str) -> bool:
        return self.chain(parent, child) is not None

    def lookup(self, parent: str, child: str) -> tuple[Transform, bool] | None:
        """``parent <- child`` composed along the chain, and whether the chain is all static.

        Dynamic edges on the chain contribute their first sample (for a sensor mount published on
        ``/tf`` instead of ``/tf_static``). ``None`` if ``parent`` is not an ancestor of ``child``.
        """
        edges = self.chain(parent, child)
        if edges is None:
            return None
        self._finalize()
        acc: tuple[F64, Rotation] = (np.zeros((1, 3)), Rotation.identity(1))
        for edge in reversed(edges):  # parent-most first: acc = acc @ edge
            acc = _compose(acc, edge.at(np.array([edge.first_time], dtype=np.int64)))
        return _transforms(*acc)[0], all(e.static for e in edges)

    def poses(self, parent: str, child: str) -> tuple[I64, list[Transform]] | None:
        """``parent <- child`` over time, at the stamps of the chain's child-most dynamic edge.

        Other dynamic edges are interpolated at those stamps. ``None`` if ``parent`` is not an
        ancestor; empty if every edge of the chain is static.
        """
        edges = self.chain(parent, child)
        if edges is None:
            return None
        self._finalize()
        dynamic = [e for e in edges if not e.static]
        if not dynamic:
            return np.zeros(0, dtype=np.int64), []
        times = dynamic[0].sample_times()
        n = len(times)
        acc: tuple[F64, Rotation] = (np.zeros((n, 3)), Rotation.identity(n))
        for edge in reversed(edges):
            acc = _compose(acc, edge.at(times))
        return times, _transforms(*acc)


def _transforms(p: F64, r: Rotation) -> list[Transform]:
    q = r.as_quat()
    return [
        Transform((float(a[0]), float(a[1]), float(a[2])), (float(b[0]), float(b[1]), float(b[2]), float(b[3])))
        for a, b in zip(p, q, strict=True)
    ]
