"""The one exception hierarchy of the runtime.

Every error the package raises on purpose derives from :class:`PerceptionError`. Errors carry the
context a user needs to act on them (file, key path, sensor, model, frame) as attributes, and their
``str()`` is a single line that names that context, so the CLI can print it as it is.

Tree::

    PerceptionError
    ├── ConfigError                  bad launch profile / rig YAML (file + key path)
    │   └── ReportError              a run's report.json that cannot be read as one (file + key path)
    ├── DriveError                   bad or truncated drive (file + topic)
    │   └── DriveDamagedError        data of a drive is damaged: a chunk, a truncation, the summary (file + offset)
    ├── ServerError                  embedded server could not start / stopped
    ├── ModelContractError           a model's tensor contract does not match the config
    ├── InputError                   a tensor handed to the runtime is malformed (sensor + tensor)
    ├── TransportError               anything that went wrong talking to Triton
    │   ├── ConnectError             server unreachable (UNAVAILABLE, refused)
    │   ├── DeadlineError            request exceeded its deadline (DEADLINE_EXCEEDED)
    │   ├── InferenceError           server answered with an error (INVALID_ARG, INTERNAL...)
    │   │   └── ModelNotReadyError   model missing / unloaded / not ready
    │   └── SharedMemoryError        a shared-memory region could not be created or used
    ├── CircuitOpenError             a model's circuit breaker is open
    ├── ReplayError                  a replay ran but produced no usable frame (file)
    ├── ReplayStoppedError           a replay was stopped before its runtime was up: nothing replayed (file)
    ├── FleetError                   a fleet run could not reach or use its Ray cluster (address)
    ├── RuntimeClosedError           the runtime is shut down or not started
    └── SampleDroppedError           a live sample could not be used (late, out of order, ...)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

__all__ = [
    "CircuitOpenError",
    "ConfigError",
    "ConnectError",
    "DeadlineError",
    "DriveDamagedError",
    "DriveError",
    "FleetError",
    "InferenceError",
    "InputError",
    "ModelContractError",
    "ModelNotReadyError",
    "PerceptionError",
    "ReplayError",
    "ReplayStoppedError",
    "ReportError",
    "RuntimeClosedError",
    "SampleDroppedError",
    "ServerError",
    "SharedMemoryError",
    "TransportError",
]


class PerceptionError(Exception):
    """Base of every error raised by the runtime.

    ``message`` says what is wrong; the keyword context says where. Each class declares the context it
    carries as annotated attributes (``file``, ``key``, ``sensor``, ``model``, ``frame``...; ``None``
    when not given): a keyword a class does not declare is a ``TypeError`` at the raise, and a misspelt
    attribute an ``AttributeError`` at the read. ``str(err)`` joins message and context in one line.
    """

    #: Order in which context keys are rendered in front of the message.
    _PREFIX_KEYS: ClassVar[tuple[str, ...]] = ()
    #: The context keywords this class accepts: its annotated attributes and its bases' (set per class).
    _CONTEXT_KEYS: ClassVar[tuple[str, ...]] = ()

    message: str
    context: Mapping[str, object]

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        keys = dict.fromkeys(cls._CONTEXT_KEYS)
        keys.update(dict.fromkeys(k for k in vars(cls).get("__annotations__", {}) if not k.startswith("_")))
        cls._CONTEXT_KEYS = tuple(keys)

    def __init__(self, message: str, **context: object) -> None:
        unknown = sorted(set(context) - set(self._CONTEXT_KEYS))
        if unknown:
            has = ", ".join(self._CONTEXT_KEYS)
            raise TypeError(f"{type(self).__name__} carries no {', '.join(unknown)} (it has: {has})")
        self.message = message
        self.context = {k: v for k, v in context.items() if v is not None}
        for key in self._CONTEXT_KEYS:
            setattr(self, key, self.context.get(key))
        super().__init__(self.__str__())

    def __str__(self) -> str:
        ctx = dict(self.context)
        head = [str(ctx.pop(k)) for k in self._PREFIX_KEYS if k in ctx]
        tail = ", ".join(f"{k}={v}" for k, v in ctx.items())
        text = ": ".join([*head, self.message])
        return f"{text} ({tail})" if tail else text

    def __reduce__(self) -> tuple[object, ...]:
        return (_rebuild, (type(self), self.message, dict(self.context)))


def _rebuild(cls: type[PerceptionError], message: str, context: dict[str, object]) -> PerceptionError:
    return cls(message, **context)


class ConfigError(PerceptionError):
    """Invalid configuration: ``file: key.path: message``."""

    file: str | None
    key: str | None
    sensor: str | None
    model: str | None

    _PREFIX_KEYS = ("file", "key")


class ReportError(ConfigError):
    """A run's ``report.json`` cannot be read as a report: unreadable, a missing key, a value of the wrong
    type, or written by a newer version (``file: key: message``)."""


class DriveError(PerceptionError):
    """A drive cannot be read or written: ``file: topic: message``."""

    file: str | None
    topic: str | None
    sensor: str | None
    #: The log time of the message that could not be read.
    t_ns: int | None
    #: The ROS frame id (tf) a converted bag could not place.
    ros_frame: str | None

    _PREFIX_KEYS = ("file", "topic")


class DriveDamagedError(DriveError):
    """Part of a drive cannot be read (damaged chunk, truncation, damaged summary): ``file: message``
    with the byte ``offset`` of the damage in the context. Readers that skip damage report it instead."""

    offset: int | None


class ServerError(PerceptionError):
    """The embedded Triton server failed to start, died, or could not be stopped."""

    file: str | None


class ModelContractError(PerceptionError):
    """A model's inputs/outputs (from its config) do not match what the runtime needs."""

    model: str | None
    sensor: str | None
    tensor: str | None
    file: str | None
    key: str | None

    _PREFIX_KEYS = ("model",)


class InputError(PerceptionError):
    """A sensor sample or tensor handed to the runtime is malformed."""

    sensor: str | None
    tensor: str | None
    model: str | None
    frame: int | None

    _PREFIX_KEYS = ("sensor", "tensor")


class TransportError(PerceptionError):
    """Base of errors raised while talking to Triton (translated from gRPC/tritonclient errors)."""

    model: str | None
    sensor: str | None
    frame: int | None
    tensor: str | None
    url: str | None

    _PREFIX_KEYS = ("model",)

    @property
    def retryable(self) -> bool:
        return False


class ConnectError(TransportError):
    """The server could not be reached (connection refused, UNAVAILABLE)."""

    @property
    def retryable(self) -> bool:
        return True


class DeadlineError(TransportError):
    """The request did not complete within its deadline."""


class InferenceError(TransportError):
    """The server answered the request with an error status."""


class ModelNotReadyError(InferenceError):
    """The model is not loaded or not ready on the server."""


class SharedMemoryError(TransportError):
    """A shared-memory region could not be created, registered or used."""

    region: str | None


class CircuitOpenError(PerceptionError):
    """Requests to this model are short-circuited after repeated failures."""

    model: str | None

    _PREFIX_KEYS = ("model",)


class ReplayError(PerceptionError):
    """A replay ran to its end but no frame had a single sensor answer ok: its outputs hold nothing usable."""

    file: str | None

    _PREFIX_KEYS = ("file",)


class ReplayStoppedError(PerceptionError):
    """A replay was stopped before its runtime was up (the server still starting): nothing was replayed."""

    file: str | None

    _PREFIX_KEYS = ("file",)


class FleetError(PerceptionError):
    """A fleet replay could not start or keep its Ray cluster, workers or servers (``address``)."""

    address: str | None
    file: str | None

    _PREFIX_KEYS = ("address",)


class RuntimeClosedError(PerceptionError):
    """The runtime is closed (or was never opened)."""

    frame: int | None


class SampleDroppedError(PerceptionError):
    """A live sample was not used (late, out of order, duplicate, clock jump, intake overflow): the
    future :meth:`perception.live.LiveRuntime.push` returned for a trigger sample ends with it."""

    sensor: str | None

    _PREFIX_KEYS = ("sensor",)
