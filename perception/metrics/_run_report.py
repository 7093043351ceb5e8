"""A run's report (``report.json``) as one typed, versioned object.

Replay builds a :class:`RunReport`; ``perception budget`` adds its verdict; the fleet, its baseline gate
and ``report.md`` read it back with :meth:`RunReport.from_json`, which validates what it reads: a missing
key, a value of the wrong type or a report written by a newer version is a :class:`ReportError` naming the
file and the key. The JSON layout is the one report.json has always had, plus ``schema_version``
(:data:`REPORT_SCHEMA_VERSION`); a report without it is of the first version.

Sections whose inner layout belongs to another subsystem (alignment, accumulation, admission, damage,
quality) are kept as JSON objects: validated as objects here, read by their owners.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perception.errors import ReportError

__all__ = [
    "REPORT_SCHEMA_VERSION",
    "BudgetVerdict",
    "LatencyStats",
    "LatencySummary",
    "ModelServed",
    "RunCounters",
    "RunReport",
    "ServerSplit",
]

#: The version of report.json's layout this code writes and reads (and any older one).
REPORT_SCHEMA_VERSION = 1

_JSON = Mapping[str, Any]


class _Reader:
    """Typed reads of a decoded report, each failure a :class:`ReportError` naming ``file`` and the key."""

    def __init__(self, file: str | None) -> None:
        self.file = file

    def error(self, message: str, key: str | None = None) -> ReportError:
        return ReportError(message, file=self.file, key=key)

    def obj(self, value: Any, key: str) -> _JSON:
        if not isinstance(value, dict):
            raise self.error(f"expected an object, got {type(value).__name__}", key)
        return value

    def opt_obj(self, data: _JSON, key: str, prefix: str = "") -> _JSON | None:
        value = data.get(key)
        return None if value is None else self.obj(value, prefix + key)

    def required(self, data: _JSON, key: str, prefix: str = "") -> Any:
        if key not in data:
            raise self.error("missing", prefix + key)
        return data[key]

    def number(self, value: Any, key: str) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise self.error(f"expected a number, got {value!r}", key)
        return float(value)

    def integer(self, value: Any, key: str) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.error(f"expected an integer, got {value!r}", key)
        return value

    def text(self, value: Any, key: str) -> str:
        if not isinstance(value, str):
            raise self.error(f"expected a string, got {value!r}", key)
        return value

    def counts(self, value: Any, key: str) -> dict[str, int]:
        return {k: self.integer(v, f"{key}.{k}") for k, v in self.obj(value, key).items()}


@dataclass(frozen=True, slots=True)
class LatencyStats:
    """``n`` and percentiles of a latency, in milliseconds (:func:`perception.metrics.percentiles`'s keys)."""

    n: int = 0
    p50: float = 0.0
    p95: float = 0.0
    p99: float = 0.0
    max: float = 0.0
    mean: float = 0.0
    min: float = 0.0

    @classmethod
    def of(cls, data: Mapping[str, float]) -> LatencyStats:
        """From a percentiles mapping (trusted: computed in this process)."""
        return cls(
            int(data.get("n", 0)), *(float(data.get(k, 0.0)) for k in ("p50", "p95", "p99", "max", "mean", "min"))
        )

    @classmethod
    def _read(cls, r: _Reader, value: Any, key: str) -> LatencyStats:
        d = r.obj(value, key)
        n = r.integer(r.required(d, "n", key + "."), key + ".n")
        rest = [
            r.number(r.required(d, k, key + "."), f"{key}.{k}") for k in ("p50", "p95", "p99", "max", "mean", "min")
        ]
        return cls(n, *rest)

    def as_dict(self) -> dict[str, float]:
        return {
            "n": self.n,
            "p50": self.p50,
            "p95": self.p95,
            "p99": self.p99,
            "max": self.max,
            "mean": self.mean,
            "min": self.min,
        }


def _nested_stats(r: _Reader, value: Any, key: str) -> dict[str, dict[str, LatencyStats]]:
    return {
        name: {
            stage: LatencyStats._read(r, p, f"{key}.{name}.{stage}") for stage, p in r.obj(st, f"{key}.{name}").items()
        }
        for name, st in r.obj(value, key).items()
    }


@dataclass(frozen=True, slots=True)
class LatencySummary:
    """``latency_ms``: the frame total, each stage, each sensor's stages and Triton's time per model."""

    total: LatencyStats | None = None
    stages: Mapping[str, LatencyStats] = field(default_factory=dict)
    sensors: Mapping[str, Mapping[str, LatencyStats]] = field(default_factory=dict)
    server: Mapping[str, Mapping[str, LatencyStats]] = field(default_factory=dict)

    @classmethod
    def _read(cls, r: _Reader, value: Any) -> LatencySummary:
        d = r.obj(value, "latency_ms")
        total = d.get("total")
        return cls(
            None if total is None else LatencyStats._read(r, total, "latency_ms.total"),
            {
                k: LatencyStats._read(r, v, f"latency_ms.stages.{k}")
                for k, v in r.obj(d.get("stages", {}), "latency_ms.stages").items()
            },
            _nested_stats(r, d.get("sensors", {}), "latency_ms.sensors"),
            _nested_stats(r, d.get("server", {}), "latency_ms.server"),
        )

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.total is not None:
            out["total"] = self.total.as_dict()
        out["stages"] = {k: v.as_dict() for k, v in self.stages.items()}
        out["sensors"] = {s: {k: v.as_dict() for k, v in st.items()} for s, st in self.sensors.items()}
        out["server"] = {m: {k: v.as_dict() for k, v in st.items()} for m, st in self.server.items()}
        return out


@dataclass(frozen=True, slots=True)
class RunCounters:
    """A run's frame counters (no percentile: cheap enough for a live status)."""

    frames: int = 0
    #: frames in which at least one sensor answered ok: a run without any produced nothing to use
    usable: int = 0
    ok: int = 0
    degraded: int = 0
    dropped: int = 0
    deadline_ms: float = 0.0
    deadline_misses: int = 0
    sensor_status: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    drop_reasons: Mapping[str, int] = field(default_factory=dict)
    #: per sensor, the first error it reported
    first_errors: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def pooled(cls, runs: Iterable[RunCounters]) -> RunCounters:
        """Several runs' counters as one (a fleet's drives): the counts add, per sensor and status and per drop
        reason too; a sensor's first error is that of the first run with one; ``deadline_ms`` is the runs'
        when they share one, else 0.0 (each run's misses were counted against its own)."""
        runs = list(runs)
        status: dict[str, dict[str, int]] = {}
        drops: dict[str, int] = {}
        errors: dict[str, str] = {}
        for c in runs:
            for sensor, counts in c.sensor_status.items():
                mine = status.setdefault(sensor, {})
                for s, n in counts.items():
                    mine[s] = mine.get(s, 0) + n
            for reason, n in c.drop_reasons.items():
                drops[reason] = drops.get(reason, 0) + n
            for sensor, error in c.first_errors.items():
                errors.setdefault(sensor, error)
        deadlines = {c.deadline_ms for c in runs}
        return cls(
            frames=sum(c.frames for c in runs),
            usable=sum(c.usable for c in runs),
            ok=sum(c.ok for c in runs),
            degraded=sum(c.degraded for c in runs),
            dropped=sum(c.dropped for c in runs),
            deadline_ms=deadlines.pop() if len(deadlines) == 1 else 0.0,
            deadline_misses=sum(c.deadline_misses for c in runs),
            sensor_status=status,
            drop_reasons=drops,
            first_errors=errors,
        )

    @classmethod
    def _read(cls, r: _Reader, d: _JSON) -> RunCounters:
        ints = {k: r.integer(r.required(d, k), k) for k in ("frames", "ok", "degraded", "dropped", "deadline_misses")}
        return cls(
            usable=r.integer(d.get("usable", 0), "usable"),
            deadline_ms=r.number(r.required(d, "deadline_ms"), "deadline_ms"),
            sensor_status={
                s: r.counts(c, f"sensor_status.{s}")
                for s, c in r.obj(d.get("sensor_status", {}), "sensor_status").items()
            },
            drop_reasons=r.counts(d.get("drop_reasons", {}), "drop_reasons"),
            first_errors={
                s: r.text(e, f"first_errors.{s}") for s, e in r.obj(d.get("first_errors", {}), "first_errors").items()
            },
            **ints,
        )


@dataclass(frozen=True, slots=True)
class ModelServed:
    """The model that served a sensor, and the versions of it that answered."""

    model: str
    versions: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ServerSplit:
    """``server_split``: whether Triton's time was split per frame, from which source, why not, and per model
    the frames it covers (:meth:`perception.metrics.LatencyAccumulator.server_split`)."""

    per_frame: bool
    source: str | None = None  # trace | statistics
    why_not: str | None = None
    models: Mapping[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "per_frame": self.per_frame,
            "source": self.source,
            "why_not": self.why_not,
            "models": dict(self.models),
        }


@dataclass(frozen=True, slots=True)
class BudgetVerdict:
    """``perception budget``'s verdict on a run: its rows, the stages over budget, passed or not."""

    budget_ms: float
    percentile: float
    violations: tuple[str, ...] = ()
    rows: tuple[Mapping[str, Any], ...] = ()

    @property
    def passed(self) -> bool:
        return not self.violations

    def as_dict(self) -> dict[str, Any]:
        return {
            "budget_ms": self.budget_ms,
            "percentile": self.percentile,
            "rows": [dict(r) for r in self.rows],
            "violations": list(self.violations),
            "passed": self.passed,
        }


#: The optional JSON-object sections, in report.json's order (their inner layout is their owners').
_SECTIONS_BEFORE = ("alignment", "accumulation", "server_ms", "late_causes")
_SECTIONS_AFTER = ("admission", "image_size_mismatch", "server_crashes", "circuits")


@dataclass(frozen=True, slots=True)
class RunReport:
    """What a run reports (``report.json``): see the module docs."""

    counters: RunCounters
    latency: LatencySummary
    drive: str | None = None
    rate: float | str | None = None
    models: Mapping[str, ModelServed] | None = None
    alignment: Mapping[str, Any] | None = None
    accumulation: Mapping[str, Any] | None = None
    #: Triton's own per-stage accounting per model (mean ms per request: queue, compute input/infer/output)
    server_ms: Mapping[str, Mapping[str, Any]] | None = None
    #: why requests were late, per model (:func:`perception.metrics.late_causes`)
    late_causes: Mapping[str, Mapping[str, Any]] | None = None
    server_split: ServerSplit | None = None
    interrupted: bool | None = None
    admission: Mapping[str, Any] | None = None
    image_size_mismatch: Mapping[str, int] | None = None
    #: the embedded server died on its own during the run: ``crashes``, ``restarts`` (after which it served
    #: again) and ``logs`` (the crashed servers' logs, kept)
    server_crashes: Mapping[str, Any] | None = None
    #: the models whose circuit breaker opened or sent a measuring request during the run, each's
    #: :meth:`perception.scheduler.Runtime.circuits` entry (state, openings, late answers, measuring requests)
    circuits: Mapping[str, Any] | None = None
    drive_truncated: str | None = None
    drive_damage: Mapping[str, Any] | None = None
    drive_error: str | None = None
    quality: Mapping[str, Any] | None = None
    budget: BudgetVerdict | None = None
    schema_version: int = REPORT_SCHEMA_VERSION

    def to_json(self) -> dict[str, Any]:
        """report.json's content (plain JSON data; :meth:`from_json` reads it back)."""
        c = self.counters
        out: dict[str, Any] = {
            "schema_version": self.schema_version,
            "frames": c.frames,
            "usable": c.usable,
            "ok": c.ok,
            "degraded": c.degraded,
            "dropped": c.dropped,
            "deadline_ms": c.deadline_ms,
            "deadline_misses": c.deadline_misses,
            "latency_ms": self.latency.as_dict(),
            "sensor_status": {s: dict(n) for s, n in c.sensor_status.items()},
            "drop_reasons": dict(c.drop_reasons),
            "first_errors": dict(c.first_errors),
        }
        if self.drive is not None:
            out["drive"] = self.drive
        if self.rate is not None:
            out["rate"] = self.rate
        if self.models is not None:
            out["models"] = {s: {"model": m.model, "versions": list(m.versions)} for s, m in self.models.items()}
        for key in _SECTIONS_BEFORE:
            value = getattr(self, key)
            if value is not None:
                out[key] = _plain(value)
        if self.server_split is not None:
            out["server_split"] = self.server_split.as_dict()
        if self.interrupted is not None:
            out["interrupted"] = self.interrupted
        for key in _SECTIONS_AFTER:
            value = getattr(self, key)
            if value is not None:
                out[key] = _plain(value)
        for key in ("drive_truncated", "drive_damage", "drive_error", "quality"):
            value = getattr(self, key)
            if value is not None:
                out[key] = _plain(value)
        if self.budget is not None:
            out["budget"] = self.budget.as_dict()
        return out

    def write(self, path: Path) -> None:
        path.write_text(json.dumps(self.to_json(), indent=2) + "\n", encoding="utf-8")

    def damage_markdown(self) -> list[str]:
        """The ``## Drive damage`` section of report.md (no lines for an undamaged drive)."""
        return _damage_markdown(self.drive_damage) if self.drive_damage else []

    @classmethod
    def from_json(cls, source: str | Path | Mapping[str, Any], *, file: str | None = None) -> RunReport:
        """A report from a report.json path, or from its decoded content (``file`` then names it in errors).

        Raises :class:`ReportError` (file, key) for an unreadable file, invalid JSON, a missing key, a
        value of the wrong type or a ``schema_version`` newer than :data:`REPORT_SCHEMA_VERSION`."""
        r, data, version = _decode(source, file)
        if not isinstance(data.get("latency_ms"), dict):
            raise r.error("not a replay report: no latency_ms", "latency_ms")
        rate = data.get("rate")
        if rate is not None and (isinstance(rate, bool) or not isinstance(rate, int | float | str)):
            raise r.error(f"expected a number or a string, got {rate!r}", "rate")
        models = r.opt_obj(data, "models")
        split = r.opt_obj(data, "server_split")
        budget = r.opt_obj(data, "budget")
        interrupted = data.get("interrupted")
        if interrupted is not None and not isinstance(interrupted, bool):
            raise r.error(f"expected true or false, got {interrupted!r}", "interrupted")

        def string(key: str) -> str | None:
            value = data.get(key)
            return None if value is None else r.text(value, key)

        sizes = data.get("image_size_mismatch")
        return cls(
            counters=RunCounters._read(r, data),
            latency=LatencySummary._read(r, data["latency_ms"]),
            drive=string("drive"),
            rate=rate,
            models=None if models is None else {s: _model_served(r, m, f"models.{s}") for s, m in models.items()},
            alignment=r.opt_obj(data, "alignment"),
            accumulation=r.opt_obj(data, "accumulation"),
            server_ms=r.opt_obj(data, "server_ms"),
            late_causes=r.opt_obj(data, "late_causes"),
            server_split=None if split is None else _server_split(r, split),
            interrupted=interrupted,
            admission=r.opt_obj(data, "admission"),
            image_size_mismatch=None if sizes is None else r.counts(sizes, "image_size_mismatch"),
            server_crashes=r.opt_obj(data, "server_crashes"),
            circuits=r.opt_obj(data, "circuits"),
            drive_truncated=string("drive_truncated"),
            drive_damage=r.opt_obj(data, "drive_damage"),
            drive_error=string("drive_error"),
            quality=r.opt_obj(data, "quality"),
            budget=None if budget is None else _budget(r, budget),
            schema_version=version,
        )

    @staticmethod
    def drive_of(path: str | Path) -> str | None:
        """The drive a report.json names (``None`` when it names none), reading only that: the file must
        still be a JSON object of a version this code reads, and ``drive`` a string (else :class:`ReportError`)."""
        r, data, _ = _decode(path, None)
        value = data.get("drive")
        return None if value is None else r.text(value, "drive")


def _decode(source: str | Path | Mapping[str, Any], file: str | None) -> tuple[_Reader, Mapping[str, Any], int]:
    """A report's reader, decoded JSON object and schema version (:class:`ReportError` when it has none this
    code reads: unreadable, not JSON, not an object, or newer)."""
    if isinstance(source, Mapping):
        r = _Reader(file)
        data: Any = source
    else:
        path = Path(source)
        r = _Reader(file or str(path))
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise r.error(f"cannot read the report: {getattr(e, 'strerror', None) or e}") from e
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise r.error(f"not valid JSON ({e.msg} at line {e.lineno} column {e.colno})") from e
    if not isinstance(data, Mapping):
        raise r.error("not a replay report: expected a JSON object")
    version = r.integer(data.get("schema_version", 1), "schema_version")
    if version > REPORT_SCHEMA_VERSION:
        raise r.error(
            f"written by a newer version (schema {version}; this version reads up to {REPORT_SCHEMA_VERSION}): "
            "upgrade perception-fusion to read it",
            "schema_version",
        )
    return r, data, version


def _plain(value: Any) -> Any:
    """JSON data of a section (mappings copied, so a report's dict is never shared with its writer)."""
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def _model_served(r: _Reader, value: Any, key: str) -> ModelServed:
    d = r.obj(value, key)
    versions = d.get("versions", [])
    if not isinstance(versions, list):
        raise r.error(f"expected a list, got {versions!r}", key + ".versions")
    return ModelServed(
        r.text(r.required(d, "model", key + "."), key + ".model"),
        tuple(r.text(v, f"{key}.versions") for v in versions),
    )


def _server_split(r: _Reader, d: _JSON) -> ServerSplit:
    per_frame = r.required(d, "per_frame", "server_split.")
    if not isinstance(per_frame, bool):
        raise r.error(f"expected true or false, got {per_frame!r}", "server_split.per_frame")
    source, why = d.get("source"), d.get("why_not")
    return ServerSplit(
        per_frame,
        None if source is None else r.text(source, "server_split.source"),
        None if why is None else r.text(why, "server_split.why_not"),
        r.obj(d.get("models", {}), "server_split.models"),
    )


def _budget(r: _Reader, d: _JSON) -> BudgetVerdict:
    violations = d.get("violations", [])
    rows = d.get("rows", [])
    if not isinstance(violations, list):
        raise r.error(f"expected a list, got {violations!r}", "budget.violations")
    if not isinstance(rows, list):
        raise r.error(f"expected a list, got {rows!r}", "budget.rows")
    return BudgetVerdict(
        r.number(r.required(d, "budget_ms", "budget."), "budget.budget_ms"),
        r.number(r.required(d, "percentile", "budget."), "budget.percentile"),
        tuple(r.text(v, "budget.violations") for v in violations),
        tuple(r.obj(row, f"budget.rows.{i}") for i, row in enumerate(rows)),
    )


def _n(x: object) -> str:
    return "unknown" if x is None else str(x)


def _damage_markdown(section: Mapping[str, Any]) -> list[str]:
    """The report.md lines of a ``drive_damage`` section (its layout: :mod:`perception.replay._damage`)."""
    lines = [
        "## Drive damage",
        "",
        f"**The drive is damaged**: {_n(section.get('messages_lost'))} messages lost in "
        f"{len(section.get('chunks', []))} damaged chunk(s); every readable chunk was replayed.",
        "",
    ]
    if section.get("summary"):
        lines += [f"The summary was unreadable ({section['summary']}): the file was scanned instead.", ""]
    if section.get("truncated"):
        lines += [f"Truncated: {section['truncated']}.", ""]
    if section.get("chunks"):
        lines += [
            "| byte offset | bytes | reason | t first (ns) | t last (ns) | messages |",
            "|---:|---:|---|---:|---:|---:|",
        ]
        for c in section["chunks"]:
            lines.append(
                f"| {c['offset']} | {c['length']} | {c['reason']} | {c['start_ns']} | {c['end_ns']} | "
                f"{_n(c['message_count'])} |"
            )
        lines.append("")
    if section.get("sensors"):
        lines += ["| sensor | topic | samples lost | time ranges (ns) |", "|---|---|---:|---|"]
        for name, s in section["sensors"].items():
            ranges = ", ".join(f"{a} .. {b}" for a, b in s["ranges_ns"])
            lines.append(f"| {name} | `{s['topic']}` | {_n(s['samples_lost'])} | {ranges} |")
        lines.append("")
    frames = section.get("frames", {})
    if frames:
        statuses = ", ".join(f"{k} {v}" for k, v in frames.get("statuses", {}).items()) or "none"
        missing = ", ".join(f"{k} {v}" for k, v in frames.get("sensors_missing", {}).items()) or "none"
        lines.append(
            f"Frames in the damaged time: {frames.get('in_damaged_time', 0)} ({statuses}); "
            f"sensors missing in them: {missing}."
        )
        if "not_produced" in frames:
            lines.append(
                f"Frames not produced (their trigger `{frames['trigger']}` sample was lost): "
                f"{_n(frames['not_produced'])}."
            )
        lines.append("")
    return lines
