"""The one place sensor kinds register: the built-in ones at import, others with :func:`register_kind`."""

from __future__ import annotations

import enum
import threading

from perception.errors import ConfigError

from ._kind import FusionRole, SensorKindDef

__all__ = ["fusion_role", "kind_def", "known_kinds", "register_kind", "unregister_kind"]

_KINDS: dict[str, SensorKindDef] = {}
_LOCK = threading.Lock()


def register_kind(defn: SensorKindDef) -> SensorKindDef:
    """Make ``defn`` known by its name (again registering the same definition is a no-op).

    Raises :class:`ConfigError` when another definition already has the name.
    """
    with _LOCK:
        have = _KINDS.get(defn.name)
        if have is not None and have != defn:
            raise ConfigError(f"sensor kind {defn.name!r} is already registered with another definition")
        _KINDS[defn.name] = defn
    return defn


def unregister_kind(name: str) -> None:
    """Forget kind ``name`` (tests that register their own kind clean up with this)."""
    with _LOCK:
        _KINDS.pop(name, None)


def kind_def(name: str) -> SensorKindDef:
    """The definition of kind ``name`` (a :class:`~perception.types.SensorKind` member counts as its
    value); :class:`ConfigError` naming it and the known kinds if unknown."""
    try:
        return _KINDS[name.value if isinstance(name, enum.Enum) else name]
    except KeyError:
        raise ConfigError(f"unknown sensor kind {name!r} (known kinds: {', '.join(known_kinds())})") from None


def known_kinds() -> tuple[str, ...]:
    """The registered kinds' names, in registration order (the built-in ones first)."""
    return tuple(_KINDS)


def fusion_role(kind: str) -> FusionRole | None:
    """The fusion role of kind ``kind``: how its detections are used (and scored, and drawn); ``None``
    for a kind that declares none or is not registered. Code that must refuse such a kind says so itself."""
    defn = _KINDS.get(kind.value if isinstance(kind, enum.Enum) else kind)
    return None if defn is None else defn.fusion
