"""Tensor specs and request validation, shared by every python-backend model.

Pure numpy: usable (and unit-tested) without Triton. A failed check raises
:class:`perception.errors.InputError` whose message names the tensor and what was expected, which the
Triton glue (:mod:`perception.modelkit._triton`) turns into an ``INVALID_ARG`` error for that request.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from perception.errors import InputError

__all__ = ["TRITON_DTYPES", "TensorSpec", "triton_dtype_name"]

#: Triton config ``data_type`` -> numpy dtype (the subset the reference models use and check).
TRITON_DTYPES: Mapping[str, np.dtype[Any]] = {
    "TYPE_BOOL": np.dtype(np.bool_),
    "TYPE_UINT8": np.dtype(np.uint8),
    "TYPE_UINT16": np.dtype(np.uint16),
    "TYPE_UINT32": np.dtype(np.uint32),
    "TYPE_UINT64": np.dtype(np.uint64),
    "TYPE_INT8": np.dtype(np.int8),
    "TYPE_INT16": np.dtype(np.int16),
    "TYPE_INT32": np.dtype(np.int32),
    "TYPE_INT64": np.dtype(np.int64),
    "TYPE_FP16": np.dtype(np.float16),
    "TYPE_FP32": np.dtype(np.float32),
    "TYPE_FP64": np.dtype(np.float64),
}


def triton_dtype_name(dtype: npt.DTypeLike) -> str:
    """``np.float32`` -> ``'TYPE_FP32'`` (raises ``ValueError`` for types Triton models here do not use)."""
    dt = np.dtype(dtype)
    for name, candidate in TRITON_DTYPES.items():
        if candidate == dt:
            return name
    raise ValueError(f"no Triton data type for numpy dtype {dt}")


def _short(dtype_name: str) -> str:
    return dtype_name.removeprefix("TYPE_")


@dataclass(frozen=True, slots=True)
class TensorSpec:
    """One tensor of a model's contract, as written in its ``config.pbtxt`` (``-1`` = any size).

    ``min_columns`` tightens a ``-1`` last dimension to "at least this many columns" (the radar input
    is ``[-1, -1]`` with at least 5 columns), something a Triton config cannot express.
    """

    name: str
    data_type: str
    dims: tuple[int, ...]
    min_columns: int | None = None
    description: str = ""

    def __post_init__(self) -> None:
        if self.data_type not in TRITON_DTYPES:
            raise ValueError(f"tensor {self.name}: unknown data_type {self.data_type!r}")
        if any(d < -1 or d == 0 for d in self.dims):
            raise ValueError(f"tensor {self.name}: dims must be positive or -1, got {list(self.dims)}")

    @property
    def dtype(self) -> np.dtype[Any]:
        return TRITON_DTYPES[self.data_type]

    def expected(self) -> str:
        """Human description, e.g. ``FP32 [-1, 4]`` or ``FP32 [-1, >=5]``."""
        dims = [str(d) for d in self.dims]
        if self.min_columns is not None and self.dims and self.dims[-1] == -1:
            dims[-1] = f">={self.min_columns}"
        return f"{_short(self.data_type)} [{', '.join(dims)}]"

    def validate(self, array: npt.NDArray[Any] | None, *, model: str | None = None) -> npt.NDArray[Any]:
        """Return ``array`` if it satisfies the spec, else raise :class:`InputError` naming the tensor.

        The message says what was expected and what arrived (dtype, rank, shape, column count), e.g.
        ``POINTS: expected FP32 [-1, 4], got 3 columns (shape [100, 3])``.
        """
        if array is None:
            raise InputError(f"missing input; expected {self.expected()}", tensor=self.name, model=model)
        if array.dtype != self.dtype:
            got = (
                f"{_short(triton_dtype_name(array.dtype))}"
                if array.dtype in TRITON_DTYPES.values()
                else (str(array.dtype))
            )
            raise InputError(
                f"expected data type {_short(self.data_type)} ({self.expected()}), got {got}",
                tensor=self.name,
                model=model,
            )
        shape = list(array.shape)
        if array.ndim != len(self.dims):
            raise InputError(
                f"expected rank {len(self.dims)} ({self.expected()}), got rank {array.ndim} (shape {shape})",
                tensor=self.name,
                model=model,
            )
        for axis, (want, got_n) in enumerate(zip(self.dims, shape, strict=True)):
            if want not in (-1, got_n):
                what = "columns" if axis == len(self.dims) - 1 and axis > 0 else f"entries on axis {axis}"
                raise InputError(
                    f"expected {want} {what} ({self.expected()}), got {got_n} (shape {shape})",
                    tensor=self.name,
                    model=model,
                )
        if self.min_columns is not None and shape and shape[-1] < self.min_columns:
            raise InputError(
                f"expected at least {self.min_columns} columns ({self.expected()}), got {shape[-1]} (shape {shape})",
                tensor=self.name,
                model=model,
            )
        return array
