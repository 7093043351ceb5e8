"""The vectorised near-plane clip of the camera's scenery faces against a one-polygon-at-a-time reference."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from perception.sim._camera import NEAR, _clip_near_all


def _clip_one(q: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """Sutherland-Hodgman: walk the edges, keep inside corners, add each edge's crossing."""
    out = []
    for i in range(q.shape[0]):
        a, b = q[i], q[(i + 1) % q.shape[0]]
        if a[2] >= NEAR:
            out.append(a)
        if (a[2] >= NEAR) != (b[2] >= NEAR):
            out.append(a + (NEAR - a[2]) / (b[2] - a[2]) * (b - a))
    return np.array(out).reshape(-1, 3)


def test_clip_near_all_equals_the_polygon_by_polygon_clip() -> None:
    rng = np.random.default_rng(0)
    quads = rng.uniform(-3.0, 3.0, (500, 4, 3))
    quads[:50, :, 2] = 5.0  # wholly in front
    quads[50:100, :, 2] = -1.0  # wholly behind
    quads[100:110, 0, 2] = NEAR  # a corner on the plane
    vertices, keep = _clip_near_all(quads)
    for m in range(quads.shape[0]):
        want = _clip_one(quads[m])
        got = vertices[m][keep[m]]
        assert got.shape == want.shape
        assert got.tobytes() == want.tobytes()  # the same arithmetic: bit for bit
    assert keep[:50].sum() == 50 * 4 and not keep[50:100].any()
