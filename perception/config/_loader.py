"""Load launch profiles: YAML (safe loader only) -> :class:`RuntimeConfig`."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from perception.config._convert import from_data
from perception.config._model import BudgetConfig, RuntimeConfig, url_problem
from perception.errors import ConfigError

__all__ = ["load_config", "load_yaml", "sensor_names", "with_overrides"]


class _SafeLoader(yaml.SafeLoader):
    """``yaml.safe_load``'s loader, refusing a mapping that gives a key twice (PyYAML keeps the last: a second
    ``ros:`` section silently replaced the first)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # '<<': merged keys may be overridden, as YAML says
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                again = key in seen
                seen.add(key)
            except TypeError:  # an unhashable key: the constructor says so itself
                continue
            if again:
                raise yaml.constructor.ConstructorError(
                    "while constructing a mapping", node.start_mark, f"key {key!r} given twice", key_node.start_mark
                )
        return super().construct_mapping(node, deep=deep)


def load_yaml(path: str | Path) -> Any:
    """Read a YAML file with PyYAML's safe loader, a key given twice in a mapping refused; every failure is a
    one-line :class:`ConfigError`."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError("file not found", file=str(p)) from None
    except IsADirectoryError:
        raise ConfigError("is a directory, expected a YAML file", file=str(p)) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read: {exc}", file=str(p)) from exc
    try:
        loader = _SafeLoader(text)  # (what yaml.safe_load does, with this loader)
        try:
            return loader.get_single_data()
        finally:
            loader.dispose()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        raise ConfigError(f"{where}invalid YAML: {exc.problem}", file=str(p)) from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"invalid YAML: {exc}", file=str(p)) from exc
    except (ValueError, RecursionError) as exc:
        # what PyYAML's constructors and composer raise unwrapped (a traceback): '!!float abc', a date
        # such as 2001-02-30, an integer over Python's 4300 digits, nesting deeper than the stack
        what = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
        raise ConfigError(f"invalid YAML: {what}", file=str(p)) from None


def load_config(path: str | Path) -> RuntimeConfig:
    """Load and validate a launch profile.

    Relative paths inside the file (model repositories, TLS files) are resolved against
    the file's directory's parent when the file lives in ``launch/`` — i.e. the repository root — and
    against the file's own directory otherwise.
    """
    p = Path(path)
    data = load_yaml(p)
    if not isinstance(data, Mapping):
        raise ConfigError("expected a mapping at the top level", file=str(p), key="<root>")
    cfg = from_data(RuntimeConfig, data, file=p)
    base = p.resolve().parent
    if base.name == "launch":
        base = base.parent
    return _resolve_paths(dataclasses.replace(cfg, source=p), base)


def _resolve_paths(cfg: RuntimeConfig, base: Path) -> RuntimeConfig:
    def rel(x: Path | None) -> Path | None:
        if x is None or x.is_absolute():
            return x
        return base / x

    server = dataclasses.replace(
        cfg.server,
        models=tuple(rel(m) or m for m in cfg.server.models),
        tls=dataclasses.replace(
            cfg.server.tls,
            root_certificates=rel(cfg.server.tls.root_certificates),
            private_key=rel(cfg.server.tls.private_key),
            certificate_chain=rel(cfg.server.tls.certificate_chain),
        ),
    )
    return dataclasses.replace(cfg, server=server)


def sensor_names(text: str, *, key: str) -> list[str]:
    """A comma-separated list of sensors (``--sensors a,b``, the ROS node's ``sensors``): the names, spaces around
    them not part of them (a sensor name is an identifier); a list naming none (``,``) is a :class:`ConfigError`
    naming ``key``, not every sensor."""
    sensors = [s.strip() for s in text.split(",") if s.strip()]
    if not sensors:
        raise ConfigError(f"names no sensor, got {text!r} (omit it to enable every sensor)", key=key)
    return sensors


def with_overrides(
    cfg: RuntimeConfig,
    *,
    url: str | None = None,
    replicas: Sequence[str] = (),
    sensors: Sequence[str] | None = None,
    budget_ms: float | None = None,
) -> RuntimeConfig:
    """Common CLI overrides: an external server URL (and more URLs serving the same models), a subset of
    enabled sensors, a frame budget for every drive (``--budget-ms``: the join deadline becomes
    ``budget_ms`` minus the fusion reserve, capped at half the budget; stage budgets are kept)."""
    if url is not None:
        for given in (url, *replicas) if url != "embedded" else replicas:
            problem = url_problem(given)
            if problem is not None:
                raise ConfigError(problem, key="--url")
        try:
            server = dataclasses.replace(cfg.server, url=url, replicas=tuple(replicas))
        except ValueError as exc:  # ServerConfig's own checks: a URL given twice
            raise ConfigError(str(exc), key="--url") from None
        cfg = dataclasses.replace(cfg, server=server)
    if budget_ms is not None:
        if not budget_ms > 0:
            raise ConfigError(f"--budget-ms must be > 0, got {budget_ms}", key="--budget-ms")
        reserve = min(cfg.budget.fusion_reserve_ms, budget_ms / 2)
        budget = BudgetConfig(total_ms=budget_ms, fusion_reserve_ms=reserve, stages=cfg.budget.stages)
        cfg = dataclasses.replace(cfg, budget=budget)
    if sensors is not None:
        wanted = set(sensors)
        unknown = wanted - {s.name for s in cfg.sensors}
        if unknown:
            has = ", ".join(s.name for s in cfg.sensors) or "none"
            raise ConfigError(f"unknown sensor(s): {', '.join(sorted(unknown))} (the sensors: {has})", key="--sensors")
        cfg = dataclasses.replace(
            cfg, sensors=tuple(dataclasses.replace(s, enabled=s.name in wanted) for s in cfg.sensors)
        )
    return cfg
