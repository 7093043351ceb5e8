"""The Triton python-backend glue every reference model shares.

A model's ``model.py`` is a thin subclass of :class:`TritonModel`: it declares its tensor contract
(:class:`~perception.kinds.TensorSpec` tuples), reads its parameters in :meth:`TritonModel.setup`,
and implements :meth:`TritonModel.run` on plain numpy arrays. This base class does the rest:

* checks at load time that ``config.pbtxt`` declares exactly the contract (fails the load otherwise);
* answers each request on its own: a malformed input becomes an ``INVALID_ARG`` error naming the tensor
  and what was expected, an unexpected exception an ``INTERNAL`` error; neither affects the other
  requests of the batch nor crashes the stub;
* checks ``request.is_cancelled()`` before the work and between pipeline stages (the ``checkpoint``
  callback handed to :meth:`run`) and answers a cancelled request with ``CANCELLED``;
* logs per-request stage timings (DEBUG, shown by ``tritonserver --log-verbose=1``).

``triton_python_backend_utils`` exists only inside the stub, so it is imported in
:meth:`TritonModel.initialize`; importing this module elsewhere is harmless.
"""

from __future__ import annotations

import abc
import dataclasses
import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, TypeVar

import numpy as np
import numpy.typing as npt

from perception.errors import InputError, ModelContractError
from perception.kinds import TensorSpec

__all__ = [
    "Checkpoint",
    "RequestCancelled",
    "TritonModel",
    "check_model_config",
    "config_parameter",
    "params_from_config",
]

log = logging.getLogger("perception.modelkit")

#: Called by a model between pipeline stages with the name of the stage just finished.
Checkpoint = Callable[[str], None]

Arrays = Mapping[str, npt.NDArray[Any]]


class RequestCancelled(Exception):
    """Raised by a checkpoint when the client cancelled the request; answered with ``CANCELLED``."""


def config_parameter(config: Mapping[str, Any], key: str, default: float) -> float:
    """A numeric ``parameters { key: ... value { string_value: ... } }`` entry of a model config."""
    entry = config.get("parameters", {}).get(key)
    if entry is None:
        return default
    raw = entry.get("string_value", "") if isinstance(entry, Mapping) else entry
    try:
        return float(raw)
    except (TypeError, ValueError):
        raise ModelContractError(
            f"parameter {key!r} must be a number, got {raw!r}", model=config.get("name"), key=key
        ) from None


P = TypeVar("P")


def params_from_config(defaults: P, config: Mapping[str, Any], *, ignore: Sequence[str] = ()) -> P:
    """Override the numeric fields of the dataclass ``defaults`` from the model config's ``parameters``.

    ``parameters { key: "max_range" value { string_value: "60" } }`` sets ``max_range``. A parameter
    that names no numeric field (and is not in ``ignore``) fails the load, so typos do not go unnoticed.
    """
    numeric = {f.name: f for f in dataclasses.fields(defaults) if f.type in ("float", "int")}  # type: ignore[arg-type]
    given = set(config.get("parameters", {}))
    unknown = sorted(given - set(numeric) - set(ignore))
    if unknown:
        raise ModelContractError(
            f"unknown parameter(s) {', '.join(unknown)}; tunable: {', '.join(sorted(numeric))}",
            model=config.get("name"),
        )
    changes: dict[str, float | int] = {}
    for name in given & set(numeric):
        value = config_parameter(config, name, 0.0)
        changes[name] = int(value) if numeric[name].type == "int" else value
    return dataclasses.replace(defaults, **changes)  # type: ignore[type-var]


def _dims(entry: Mapping[str, Any]) -> tuple[int, ...]:
    return tuple(int(d) for d in entry.get("dims", ()))


def check_model_config(
    config: Mapping[str, Any],
    inputs: Sequence[TensorSpec],
    outputs: Sequence[TensorSpec],
    *,
    max_batch_size: int | None = 0,
) -> None:
    """Raise :class:`ModelContractError` unless ``config`` (Triton's JSON form) declares the contract."""
    name = config.get("name")
    if max_batch_size is not None and int(config.get("max_batch_size", 0)) != max_batch_size:
        raise ModelContractError(
            f"max_batch_size must be {max_batch_size}, config has {config.get('max_batch_size', 0)}", model=name
        )
    for kind, specs in (("input", inputs), ("output", outputs)):
        declared = {e["name"]: e for e in config.get(kind, ())}
        want = {s.name for s in specs}
        need = {s.name for s in specs if not s.optional}  # an optional input the config may leave out
        if not need <= set(declared) <= want:
            extra = f" (of which {sorted(want - need)} optional)" if want != need else ""
            raise ModelContractError(
                f"config declares {kind}s {sorted(declared)}, the model implements {sorted(want)}{extra}", model=name
            )
        for spec in specs:
            entry = declared.get(spec.name)
            if entry is None:
                continue
            dtype = "TYPE_BYTES" if entry.get("data_type") == "TYPE_STRING" else entry.get("data_type")
            if dtype != spec.config_dtype or _dims(entry) != spec.dims:
                raise ModelContractError(
                    f"{kind} {spec.name} is {entry.get('data_type')} {list(_dims(entry))} in the config, "
                    f"the model implements {spec.config_dtype} {list(spec.dims)}",
                    model=name,
                )


class _TritonLogHandler(logging.Handler):
    """Forwards ``logging`` records to the server log (``pb_utils.Logger``)."""

    def __init__(self, logger: Any) -> None:
        super().__init__()
        self._logger = logger

    def emit(self, record: logging.LogRecord) -> None:
        try:
            msg = self.format(record)
            if record.levelno >= logging.ERROR:
                self._logger.log_error(msg)
            elif record.levelno >= logging.WARNING:
                self._logger.log_warn(msg)
            elif record.levelno >= logging.INFO:
                self._logger.log_info(msg)
            else:
                self._logger.log_verbose(msg)
        except Exception:  # pragma: no cover - never let logging break a request
            self.handleError(record)


def _install_log_handler(pb_utils: Any) -> None:
    pkg_log = logging.getLogger("perception")
    if getattr(pb_utils, "Logger", None) is None or any(isinstance(h, _TritonLogHandler) for h in pkg_log.handlers):
        return
    pkg_log.addHandler(_TritonLogHandler(pb_utils.Logger))
    pkg_log.setLevel(logging.DEBUG)  # the server's --log-verbose decides what is shown
    pkg_log.propagate = False


class _Timer:
    """Stage timings of one request; also the cancellation checkpoint handed to ``run``."""

    def __init__(self, request: Any) -> None:
        self._request = request
        self._t0 = self._last = time.perf_counter()
        self.stages: list[tuple[str, float]] = []

    def cancelled(self) -> bool:
        is_cancelled = getattr(self._request, "is_cancelled", None)
        return bool(is_cancelled()) if is_cancelled is not None else False

    def __call__(self, stage: str) -> None:
        now = time.perf_counter()
        self.stages.append((stage, (now - self._last) * 1e3))
        self._last = now
        if self.cancelled():
            raise RequestCancelled(stage)

    def total_ms(self) -> float:
        return (time.perf_counter() - self._t0) * 1e3

    def summary(self) -> str:
        return ", ".join(f"{name} {ms:.1f}" for name, ms in self.stages)


class TritonModel(abc.ABC):
    """Base of the python-backend reference models (``class TritonPythonModel(MyModel)`` in model.py)."""

    #: Tensor contract, checked against ``config.pbtxt`` at load and against every request.
    INPUTS: ClassVar[tuple[TensorSpec, ...]]
    OUTPUTS: ClassVar[tuple[TensorSpec, ...]]
    #: Required ``max_batch_size`` (``None`` = any).
    MAX_BATCH_SIZE: ClassVar[int | None] = 0

    model_name: str = "model"
    _pb: Any = None

    # -- Triton entry points ------------------------------------------------------------------------

    def initialize(self, args: Mapping[str, str]) -> None:
        import triton_python_backend_utils as pb_utils

        self._pb = pb_utils
        _install_log_handler(pb_utils)
        config = json.loads(args["model_config"])
        self.model_name = str(args.get("model_name") or config.get("name") or type(self).__name__)
        check_model_config(config, self.INPUTS, self.OUTPUTS, max_batch_size=self.MAX_BATCH_SIZE)
        self.setup(config)
        log.info("%s: loaded (instance %s)", self.model_name, args.get("model_instance_name", "?"))

    def execute(self, requests: Sequence[Any]) -> list[Any]:
        return [self._execute_one(request) for request in requests]

    def finalize(self) -> None:
        log.info("%s: unloaded", self.model_name)

    # -- to implement ------------------------------------------------------------------------------

    def setup(self, config: Mapping[str, Any]) -> None:  # noqa: B027 - optional hook
        """Read parameters from the model config (Triton's JSON form). Default: nothing."""

    @abc.abstractmethod
    def run(self, inputs: Arrays, checkpoint: Checkpoint) -> Arrays:
        """Compute the outputs of one request from its validated inputs.

        Call ``checkpoint("stage")`` after each stage: it records the stage time and raises
        :class:`RequestCancelled` if the client gave up. Raise :class:`InputError` for inputs that are
        well-formed but unusable (answered with ``INVALID_ARG``).
        """

    # -- helpers -----------------------------------------------------------------------------------

    def _error(self, message: str, code_name: str) -> Any:
        pb = self._pb
        code = getattr(pb.TritonError, code_name, None)
        err = pb.TritonError(message, code) if code is not None else pb.TritonError(message)
        return pb.InferenceResponse(output_tensors=[], error=err)

    def _read_inputs(self, request: Any) -> dict[str, npt.NDArray[Any]]:
        arrays: dict[str, npt.NDArray[Any]] = {}
        for spec in self.INPUTS:
            tensor = self._pb.get_input_tensor_by_name(request, spec.name)
            array = None if tensor is None else tensor.as_numpy()
            arrays[spec.name] = spec.validate(array)
        return arrays

    def _execute_one(self, request: Any) -> Any:
        timer = _Timer(request)
        try:
            if timer.cancelled():
                raise RequestCancelled("queued")
            inputs = self._read_inputs(request)
            outputs = self.run(inputs, timer)
            tensors = []
            for spec in self.OUTPUTS:
                array = np.ascontiguousarray(outputs[spec.name], dtype=spec.numpy_dtype)
                spec.validate(array, model=self.model_name)  # a contract bug here is ours: INTERNAL
                tensors.append(self._pb.Tensor(spec.name, array))
        except InputError as exc:
            if exc.tensor is not None and exc.tensor in {s.name for s in self.OUTPUTS}:
                log.error("%s: output violates the contract: %s", self.model_name, exc)
                return self._error(f"{self.model_name}: internal error: {exc}", "INTERNAL")
            log.debug("%s: rejected request: %s", self.model_name, exc)
            return self._error(f"{self.model_name}: invalid input {exc}", "INVALID_ARG")
        except RequestCancelled as exc:
            log.debug("%s: request cancelled after %s (%.1f ms)", self.model_name, exc, timer.total_ms())
            return self._error(f"{self.model_name}: request cancelled after stage {exc}", "CANCELLED")
        except Exception as exc:
            log.exception("%s: request failed", self.model_name)
            return self._error(f"{self.model_name}: internal error: {type(exc).__name__}: {exc}", "INTERNAL")
        log.debug("%s: %.1f ms (%s)", self.model_name, timer.total_ms(), timer.summary())
        return self._pb.InferenceResponse(output_tensors=tensors)
