"""Build typed, frozen config objects from plain YAML data, with errors that name the key path.

Driven by the dataclasses' own annotations: a config class is a frozen dataclass whose fields are
``bool``/``int``/``float``/``str``, ``Literal[...]``, an :class:`enum.Enum` (by value), ``X | None``,
``tuple[X, ...]``, a fixed-length ``tuple[X, Y, Z]``, ``Mapping[str, X]`` or another config dataclass.
Range checks live in the dataclasses' ``__post_init__`` and raise ``ValueError``; the converter
re-raises them as :class:`ConfigError` with the file and key path (``sensors[2].model``). A message
``"field: ..."`` (or ``"field[1].sub: ..."``) points at that key below the dataclass. A field with
``metadata={"yaml": False}`` is not read from the data (an unknown key there): the code sets it. A class's
``NOT_KEYS`` (key -> what to do instead) explains keys it does not have but a user may expect.
"""

from __future__ import annotations

import dataclasses
import enum
import math
import re
import types
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, TypeVar, get_args, get_origin, get_type_hints

from perception.errors import ConfigError

__all__ = ["first_duplicate", "from_data", "reject_duplicates"]

T = TypeVar("T")


def _type_name(tp: Any) -> str:
    origin = get_origin(tp)
    if tp is type(None):
        return "null"
    if origin is Literal:
        return " | ".join(repr(a) for a in get_args(tp))
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type_name(a) for a in get_args(tp))
    if origin is tuple:
        args = get_args(tp)
        if len(args) == 2 and args[1] is Ellipsis:
            return f"a list of {_type_name(args[0])}"
        return f"a list of {len(args)} {_plural(args)}"
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return " | ".join(repr(m.value) for m in tp)
    if origin in (Mapping, dict):
        return f"a mapping of {_type_name(get_args(tp)[1])}"
    if dataclasses.is_dataclass(tp):
        return "a mapping"
    if tp is float:
        return "a number"
    if tp is Path:
        return "a path string"
    return f"a {getattr(tp, '__name__', str(tp))}".replace("a int", "an integer").replace("a str", "a string")


def _plural(args: tuple[Any, ...]) -> str:
    if all(a is float for a in args):
        return "numbers"
    if all(a is int for a in args):
        return "integers"
    if all(a is str for a in args):
        return "strings"
    return "items"


class _Ctx:
    def __init__(self, file: str | None) -> None:
        self.file = file

    def error(self, path: str, message: str) -> ConfigError:
        return ConfigError(message, file=self.file, key=path or "<root>")


def _convert(value: Any, tp: Any, path: str, ctx: _Ctx) -> Any:
    origin = get_origin(tp)
    if tp is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        args = get_args(tp)
        if value is None and type(None) in args:
            return None
        errors: list[ConfigError] = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _convert(value, arg, path, ctx)
            except ConfigError as exc:
                errors.append(exc)
        if len(errors) == 1:
            raise errors[0]
        raise ctx.error(path, f"expected {_type_name(tp)}, got {_describe(value)}")
    if origin is Literal:
        choices = get_args(tp)
        if value not in choices:
            raise ctx.error(path, f"expected one of {', '.join(repr(c) for c in choices)}, got {value!r}")
        return value
    if origin is tuple:
        args = get_args(tp)
        if len(args) == 2 and args[1] is Ellipsis:
            if not isinstance(value, list | tuple):
                raise ctx.error(path, f"expected a list, got {_describe(value)}")
            return tuple(_convert(v, args[0], f"{path}[{i}]", ctx) for i, v in enumerate(value))
        if not isinstance(value, list | tuple) or len(value) != len(args):
            raise ctx.error(path, f"expected {_type_name(tp)}, got {_describe(value)}")
        return tuple(_convert(v, a, f"{path}[{i}]", ctx) for i, (v, a) in enumerate(zip(value, args, strict=True)))
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        for member in tp:
            if value == member.value and type(value) is type(member.value):
                return member
        raise ctx.error(path, f"expected one of {_type_name(tp).replace(' | ', ', ')}, got {_describe(value)}")
    if origin in (Mapping, dict):
        _key_tp, val_tp = get_args(tp)
        if not isinstance(value, Mapping):
            raise ctx.error(path, f"expected a mapping, got {_describe(value)}")
        out: dict[str, Any] = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise ctx.error(path, f"keys must be strings, got {k!r}")
            out[k] = _convert(v, val_tp, _join(path, k), ctx)
        return types.MappingProxyType(out)
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        return _build(tp, value, path, ctx)
    if tp is bool:
        if not isinstance(value, bool):
            raise ctx.error(path, f"expected true or false, got {_describe(value)}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ctx.error(path, f"expected an integer, got {_describe(value)}")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ctx.error(path, f"expected a number, got {_describe(value)}")
        # YAML's .nan and .inf: NaN passed every limit check (a budget of NaN ms); an integer too large for
        # a float raised OverflowError (a traceback)
        try:
            number = float(value)
        except OverflowError:
            raise ctx.error(path, "expected a finite number, got an integer too large for a float") from None
        if not math.isfinite(number):
            raise ctx.error(path, f"expected a finite number, got {number}")
        return number
    if tp is str:
        if not isinstance(value, str):
            raise ctx.error(path, f"expected a string, got {_describe(value)}")
        return value
    if tp is Path:
        if not isinstance(value, str):
            raise ctx.error(path, f"expected a path string, got {_describe(value)}")
        return Path(value)
    raise TypeError(f"config converter cannot handle type {tp!r} at {path}")  # programming error


def _describe(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list | tuple):
        return f"a list of {len(value)}" if value else "an empty list"
    return f"{type(value).__name__} {value!r}"


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _build(cls: type[T], data: Any, path: str, ctx: _Ctx) -> T:
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise ctx.error(path, f"expected a mapping, got {_describe(data)}")
    hints = get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init and f.metadata.get("yaml", True)}  # type: ignore[arg-type]
    aliases = {name.replace("_", "-"): name for name in fields}
    kwargs: dict[str, Any] = {}
    for raw_key, value in data.items():
        key = str(raw_key)
        name = key if key in fields else aliases.get(key)
        if name is None:
            hint = getattr(cls, "NOT_KEYS", {}).get(key)
            known = ", ".join(sorted(fields))
            raise ctx.error(
                _join(path, key), f"unknown key: {hint}" if hint else f"unknown key (expected one of: {known})"
            )
        kwargs[name] = _convert(value, hints[name], _join(path, key), ctx)
    for name, f in fields.items():
        if name not in kwargs and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise ctx.error(_join(path, name), "required key is missing")
    try:
        return cls(**kwargs)
    except ValueError as exc:
        # __post_init__ messages may start with "field: ..." (or "field[1].sub: ...") to point below this level.
        msg = str(exc)
        sub, sep, rest = msg.partition(": ")
        if sep and re.split(r"[.\[]", sub, maxsplit=1)[0] in fields:
            raise ctx.error(_join(path, sub), rest) from None
        raise ctx.error(path, msg) from None


def first_duplicate(values: Sequence[str]) -> tuple[int, int] | None:
    """``(i, j)``: ``values[i]`` is the first value seen before, at ``j``; ``None`` when all differ."""
    first: dict[str, int] = {}
    for i, value in enumerate(values):
        if value in first:
            return i, first[value]
        first[value] = i
    return None


def reject_duplicates(values: Sequence[str], key: str, field: str, what: str) -> None:
    """For a ``__post_init__``: a ``ValueError`` pointing at ``key[i].field`` of the first value seen before
    (``reject_duplicates(names, "sensors", "name", "sensor name")``)."""
    found = first_duplicate(values)
    if found is not None:
        i, j = found
        raise ValueError(f"{key}[{i}].{field}: duplicate {what} {values[i]!r} (also {key}[{j}])")


def from_data(cls: type[T], data: Any, *, file: str | Path | None = None, path: str = "") -> T:
    """Convert plain data (from YAML) into the frozen config dataclass ``cls``."""
    return _build(cls, data, path, _Ctx(str(file) if file is not None else None))
