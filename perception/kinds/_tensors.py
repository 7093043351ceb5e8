"""The one tensor spec: a tensor of a sensor kind's contract, of a served model, or of a model's config.

Dtypes are spelled as Triton's short form (``"FP32"``, ``"UINT8"``, ``"UINT16"``); :attr:`TensorSpec.config_dtype`
gives the ``config.pbtxt`` spelling (``"TYPE_FP32"``). Dims follow ``config.pbtxt``: ``-1`` is a variable
dimension and, when ``max_batch_size > 0``, the batch dimension is implicit (not part of ``dims``).

Pure numpy: the client (start-up contract check), the model side (:mod:`perception.modelkit`, inside Triton)
and the docs all read these.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from perception.errors import InputError

__all__ = ["DTYPES", "KindContract", "TensorSpec", "dtype_name"]

#: Triton's data types (short form) -> numpy dtype; ``BF16`` has no numpy dtype (``None``).
DTYPES: Mapping[str, np.dtype[Any] | None] = {
    "BOOL": np.dtype(np.bool_),
    "UINT8": np.dtype(np.uint8),
    "UINT16": np.dtype(np.uint16),
    "UINT32": np.dtype(np.uint32),
    "UINT64": np.dtype(np.uint64),
    "INT8": np.dtype(np.int8),
    "INT16": np.dtype(np.int16),
    "INT32": np.dtype(np.int32),
    "INT64": np.dtype(np.int64),
    "FP16": np.dtype(np.float16),
    "FP32": np.dtype(np.float32),
    "FP64": np.dtype(np.float64),
    "BF16": None,
    "BYTES": np.dtype(np.object_),
}


def dtype_name(dtype: npt.DTypeLike) -> str:
    """``np.float32`` -> ``'FP32'`` (raises ``ValueError`` for a numpy dtype Triton has no type for)."""
    dt = np.dtype(dtype)
    for name, candidate in DTYPES.items():
        if candidate == dt:
            return name
    raise ValueError(f"no Triton data type for numpy dtype {dt}")


@dataclass(frozen=True, slots=True)
class TensorSpec:
    """One tensor: ``name``, Triton ``dtype`` in short form (``"FP32"``) and ``dims`` (``-1`` = any size).

    ``min_columns`` tightens a ``-1`` last dimension to "at least this many columns" (the radar input
    is ``[-1, -1]`` with at least 5 columns), something a Triton config cannot express. ``optional``
    mirrors the config's ``optional: true`` (an input a request may omit). ``description`` is for the
    docs and error messages and does not take part in comparisons.
    """

    name: str
    dtype: str
    dims: tuple[int, ...]
    min_columns: int | None = None
    optional: bool = False
    description: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        if self.dtype not in DTYPES:
            raise ValueError(
                f"tensor {self.name}: unknown data type {self.dtype!r} (expected one of {', '.join(DTYPES)})"
            )
        object.__setattr__(self, "dims", tuple(int(d) for d in self.dims))
        if any(d < -1 or d == 0 for d in self.dims):
            raise ValueError(f"tensor {self.name}: dims must be positive or -1, got {list(self.dims)}")

    def __str__(self) -> str:
        return f"{self.name} {self.dtype} {list(self.dims)}"

    @property
    def config_dtype(self) -> str:
        """The ``config.pbtxt`` spelling: ``"TYPE_FP32"``."""
        return f"TYPE_{self.dtype}"

    @property
    def numpy_dtype(self) -> np.dtype[Any]:
        dt = DTYPES[self.dtype]
        if dt is None:
            raise ValueError(f"tensor {self.name}: data type {self.dtype} has no numpy dtype")
        return dt

    @staticmethod
    def from_config(entry: Mapping[str, Any]) -> TensorSpec:
        """A tensor entry of a model config (Triton's JSON form or a parsed ``config.pbtxt``): ``name``,
        ``data_type`` (``TYPE_FP32``; ``TYPE_STRING`` is ``BYTES``), ``dims`` (ints or strings), ``optional``.
        Raises ``KeyError`` / ``TypeError`` / ``ValueError`` for a malformed entry."""
        dtype = str(entry.get("data_type", "TYPE_INVALID")).removeprefix("TYPE_")
        return TensorSpec(
            str(entry["name"]),
            "BYTES" if dtype == "STRING" else dtype,
            tuple(int(d) for d in entry.get("dims", ())),
            optional=bool(entry.get("optional", False)),
        )

    def expected(self) -> str:
        """Human description, e.g. ``FP32 [-1, 4]`` or ``FP32 [-1, >=5]``."""
        dims = [str(d) for d in self.dims]
        if self.min_columns is not None and self.dims and self.dims[-1] == -1:
            dims[-1] = f">={self.min_columns}"
        return f"{self.dtype} [{', '.join(dims)}]"

    def accepts(self, other: TensorSpec) -> str | None:
        """Why ``other`` (a served model's tensor) does not match this expected spec, or ``None``.

        Same dtype, same rank, and every dim equal unless either side is ``-1``.
        """
        if other.dtype != self.dtype:
            return f"dtype is {other.dtype}, expected {self.dtype}"
        if len(other.dims) != len(self.dims):
            return (
                f"rank is {len(other.dims)} (dims {list(other.dims)}), "
                f"expected {len(self.dims)} (dims {list(self.dims)})"
            )
        for axis, (have, want) in enumerate(zip(other.dims, self.dims, strict=True)):
            if have != want and -1 not in (have, want):
                return f"dim {axis} is {have}, expected {want} (dims {list(other.dims)} vs {list(self.dims)})"
        return None

    def validate(self, array: npt.NDArray[Any] | None, *, model: str | None = None) -> npt.NDArray[Any]:
        """Return ``array`` if it satisfies the spec, else raise :class:`InputError` naming the tensor.

        The message says what was expected and what arrived (dtype, rank, shape, column count), e.g.
        ``POINTS: expected FP32 [-1, 4], got 3 columns (shape [100, 3])``.
        """
        if array is None:
            raise InputError(f"missing input; expected {self.expected()}", tensor=self.name, model=model)
        if array.dtype != self.numpy_dtype:
            try:
                got = dtype_name(array.dtype)
            except ValueError:
                got = str(array.dtype)
            raise InputError(
                f"expected data type {self.dtype} ({self.expected()}), got {got}", tensor=self.name, model=model
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


@functools.lru_cache(maxsize=256)
def _batched(spec: TensorSpec, batch: int) -> TensorSpec:
    """``spec`` of a batched answer of ``batch`` rows (made once per spec and batch size: every camera answer is
    checked against it: a new spec per output and answer made the check of a 6-camera batch 12 us, not 5)."""
    return TensorSpec(spec.name, spec.dtype, (batch, *spec.dims))


@dataclass(frozen=True, slots=True)
class KindContract:
    """What the runtime sends to (``inputs``) and expects from (``outputs``) the model of a sensor kind.

    ``batched``: the model must batch (``max_batch_size > 0``, any limit; the batch dimension is not in
    ``dims``) or must not (``max_batch_size: 0``).
    """

    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    batched: bool = False
    #: The outputs holding one row per detection (their first dimension after the batch one): an answer
    #: whose row counts disagree is outside the contract. ``None`` (the default): every output whose first
    #: dim is ``-1`` (lidar's and radar's all; none of the camera's, whose rows are a fixed 100 each); ``()``
    #: for a kind whose variable outputs are not of one length.
    rows: tuple[str, ...] | None = None
    #: An image kind's other way in: the sample's bytes as recorded (JPEG/PNG), for a model that decodes
    #: them itself (``SensorConfig.decode: server``; a GPU server would with nvJPEG or DALI). A model
    #: taking it declares it, and its ``inputs``, ``optional`` (a request carries one or the other).
    encoded: TensorSpec | None = None
    #: The optional per-row answer of a model taking ``encoded``: for each batch row, empty when its
    #: bytes decoded, else why they did not (UTF-8). A model declaring it answers a row it cannot decode
    #: on its own -- that row with no detections and its reason here, the other rows as usual -- when the
    #: request asks for this output; without it one undecodable row fails the whole request.
    decode_error: TensorSpec | None = None
    _row_outputs: tuple[str, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        by_name = {t.name: t for t in self.outputs}
        rows = tuple(t.name for t in self.outputs if t.dims[:1] == (-1,)) if self.rows is None else self.rows
        for name in rows:
            spec = by_name.get(name)
            if spec is None or not spec.dims:
                raise ValueError(f"rows: {name!r} is not an output with a row dimension")
        fixed = {by_name[name].dims[0] for name in rows} - {-1}
        if len(fixed) > 1:
            raise ValueError(f"rows: {', '.join(rows)} have fixed row counts that differ ({sorted(fixed)})")
        object.__setattr__(self, "_row_outputs", rows if len(rows) > 1 else ())

    @property
    def output_names(self) -> tuple[str, ...]:
        return tuple(t.name for t in self.outputs)

    @property
    def row_outputs(self) -> tuple[str, ...]:
        """The outputs that must agree in their row count (:attr:`rows`; empty when fewer than two)."""
        return self._row_outputs

    def outputs_problem(self, outputs: Mapping[str, Any], *, batch: int | None = None) -> str | None:
        """Why a model's ``outputs`` do not meet this contract, or None: every output present, a numpy
        array of its dtype, rank and fixed dims; with ``batch`` (a batched request) a leading batch
        dimension of exactly that size; the :attr:`row_outputs` of one row count (per image of a batch).
        The one check on every answer (the dispatcher's), so a model answering another shape is that
        sensor's error, never an exception further on."""
        for spec in self.outputs:
            array = outputs.get(spec.name)
            if array is not None and not isinstance(array, np.ndarray):
                return f"{spec.name}: expected a numpy array, got {type(array).__name__}"
            want = spec if batch is None else _batched(spec, batch)
            try:
                want.validate(array)
            except InputError as exc:
                return f"{spec.name}: {exc.message}"
        if self._row_outputs:  # shapes only: no copies
            axis = 0 if batch is None else 1
            first = self._row_outputs[0]
            n = outputs[first].shape[axis]
            for name in self._row_outputs:
                if (m := outputs[name].shape[axis]) != n:
                    return f"{name} has {m} row{'' if m == 1 else 's'}, {first} {n} (one row per detection)"
        return None

    def decode_errors(self, outputs: Mapping[str, Any], *, batch: int) -> dict[int, str]:
        """The rows of a batched answer whose encoded image the model could not decode: row -> its
        reason, from the :attr:`decode_error` output (``{}`` when the answer does not carry it).

        Raises :class:`InputError` naming the tensor when it is not ``[batch, 1]`` BYTES.
        """
        spec = self.decode_error
        if spec is None or spec.name not in outputs:
            return {}
        array = outputs[spec.name]
        if not isinstance(array, np.ndarray):
            raise InputError(f"expected a numpy array, got {type(array).__name__}", tensor=spec.name)
        rows = _batched(spec, batch).validate(array)
        out: dict[int, str] = {}
        for i in range(batch):
            reason = rows[i, 0]
            if reason:
                text = reason.decode("utf-8", "replace") if isinstance(reason, bytes) else str(reason)
                out[i] = text
        return out

    def input(self, name: str) -> TensorSpec | None:
        return next((t for t in self.inputs if t.name == name), None)

    def output(self, name: str) -> TensorSpec | None:
        return next((t for t in self.outputs if t.name == name), None)
