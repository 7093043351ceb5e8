"""PCD (Point Cloud Data, v0.7) files: the ASCII header and ``ascii`` / ``binary`` bodies.

Enough of the format for dataset point clouds such as nuScenes radar scans: the header's
``FIELDS``/``SIZE``/``TYPE``/``COUNT``/``WIDTH``/``HEIGHT``/``POINTS``/``DATA`` lines define a packed
numpy structured dtype and the body is viewed through it. ``binary_compressed`` is refused.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

__all__ = ["PcdHeader", "parse_pcd"]

_TYPES = {"F": "f", "I": "i", "U": "u"}
_MAX_HEADER = 64 * 1024


@dataclass(frozen=True, slots=True)
class PcdHeader:
    fields: tuple[str, ...]
    sizes: tuple[int, ...]
    types: tuple[str, ...]
    counts: tuple[int, ...]
    width: int
    height: int
    points: int
    data: str

    def dtype(self) -> np.dtype[np.void]:
        """Packed little-endian structured dtype of one point (repeated names get a ``_<n>`` suffix)."""
        seen: dict[str, int] = {}
        parts: list[tuple[str, str] | tuple[str, str, tuple[int]]] = []
        for name, size, typ, count in zip(self.fields, self.sizes, self.types, self.counts, strict=True):
            k = seen.get(name, 0)
            seen[name] = k + 1
            unique = name if k == 0 else f"{name}_{k}"
            code = f"<{_TYPES[typ]}{size}"
            parts.append((unique, code) if count == 1 else (unique, code, (count,)))
        return np.dtype(parts)


def _ints(values: list[str], key: str) -> tuple[int, ...]:
    try:
        out = tuple(int(v) for v in values)
    except ValueError:
        raise ValueError(f"PCD header {key} must be integers, got {' '.join(values)!r}") from None
    if any(v < 0 for v in out):
        raise ValueError(f"PCD header {key} must not be negative")
    return out


def _parse_header(text: list[str]) -> PcdHeader:
    entries: dict[str, list[str]] = {}
    for line in text:
        parts = line.split()
        if parts and not parts[0].startswith("#"):
            entries[parts[0].upper()] = parts[1:]
    for key in ("FIELDS", "SIZE", "TYPE", "DATA"):
        if key not in entries:
            raise ValueError(f"PCD header has no {key} line")
    fields = tuple(entries["FIELDS"])
    n = len(fields)
    sizes = _ints(entries["SIZE"], "SIZE")
    types = tuple(t.upper() for t in entries["TYPE"])
    counts = _ints(entries.get("COUNT", ["1"] * n), "COUNT")
    if not (len(sizes) == len(types) == len(counts) == n) or n == 0:
        lengths = f"{n}/{len(sizes)}/{len(types)}/{len(counts)}"
        raise ValueError(f"PCD header FIELDS/SIZE/TYPE/COUNT lengths differ ({lengths})")
    for name, size, typ in zip(fields, sizes, types, strict=True):
        valid = {"F": (4, 8), "I": (1, 2, 4, 8), "U": (1, 2, 4, 8)}.get(typ)
        if valid is None or size not in valid:
            raise ValueError(f"PCD field {name!r} has unsupported TYPE {typ} / SIZE {size}")
    (width,) = _ints(entries.get("WIDTH", ["0"])[:1], "WIDTH") or (0,)
    (height,) = _ints(entries.get("HEIGHT", ["1"])[:1], "HEIGHT") or (1,)
    if "POINTS" in entries and not entries["POINTS"]:
        raise ValueError("PCD header POINTS has no value")
    points = _ints(entries["POINTS"][:1], "POINTS")[0] if "POINTS" in entries else width * height
    if width * height != points:
        raise ValueError(f"PCD header WIDTH x HEIGHT ({width}x{height}) differs from POINTS {points}")
    data = (entries["DATA"] or [""])[0].lower()
    return PcdHeader(fields, sizes, types, counts, width, height, points, data)


def parse_pcd(raw: bytes) -> tuple[PcdHeader, npt.NDArray[np.void]]:
    """Parse a PCD file's bytes into its header and a ``[POINTS]`` structured array (one record per point).

    Raises ``ValueError`` naming the problem (bad header, unsupported ``DATA``, truncated body).
    """
    lines: list[str] = []
    pos = 0
    while True:
        end = raw.find(b"\n", pos)
        if end < 0 or end > _MAX_HEADER:
            raise ValueError("not a PCD file: no DATA line in the header")
        try:
            line = raw[pos:end].decode("ascii").strip()
        except UnicodeDecodeError:
            raise ValueError("not a PCD file: binary bytes in the header") from None
        pos = end + 1
        lines.append(line)
        if line.upper().startswith("DATA"):
            break
    header = _parse_header(lines)
    dtype = header.dtype()
    body = raw[pos:]
    if header.data == "binary":
        need = header.points * dtype.itemsize
        if len(body) < need:
            raise ValueError(f"PCD body truncated: {len(body)} bytes, {header.points} points need {need}")
        return header, np.frombuffer(body, dtype=dtype, count=header.points)
    if header.data == "ascii":
        width = sum(header.counts)
        try:
            values = np.array(body.decode("ascii").split(), dtype=np.float64)
        except (UnicodeDecodeError, ValueError) as exc:
            raise ValueError(f"PCD ascii body is not numeric: {exc}") from None
        if values.size < header.points * width:
            need = header.points * width
            raise ValueError(f"PCD body truncated: {values.size} values, {header.points} points need {need}")
        rows = values[: header.points * width].reshape(header.points, width)
        out = np.zeros(header.points, dtype=dtype)
        col = 0
        for name, count in zip(dtype.names or (), header.counts, strict=True):
            out[name] = rows[:, col] if count == 1 else rows[:, col : col + count]
            col += count
        return header, out
    raise ValueError(f"PCD DATA {header.data!r} is not supported (only ascii and binary)")
