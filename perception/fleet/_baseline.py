"""Compare a fleet run with an earlier one of the same drives (``perception fleet ... --baseline PREV_OUT``).

A run is a fleet output directory -- one ``<drive-name>/`` per drive holding what ``perception replay
--out`` writes (``report.json``, ``detections.jsonl``) -- or a single replay output directory (a
``report.json`` at its top; its one drive is named by the stem of the drive file in the report, else by
the directory). Drives are the subdirectories holding a ``report.json``; names starting with ``.`` are
ignored (temporary directories of a fleet run in progress). A fleet run's drives are the ones it replayed:
the drives its ``fleet.json`` lists (the baseline's) or the run gives (the current run's) -- not the other
drive directories of a reused output directory, left by an earlier run. Drives are matched by name.

Per drive, and in total, the comparison gives:

* **Quality** (when the drive has ground truth: the report's ``quality``): Δ mAP and Δ AP per class, with
  the ground-truth objects and detections behind each AP.
* **Latency**: Δ p50 and Δ p99 of the frame total, of each stage and of each sensor's total.
* **Statuses**: the frames (matched by ``frame_id`` in ``detections.jsonl``) whose status changed, in the
  order ``ok`` < ``degraded`` < ``dropped`` < missing (a frame of the baseline absent from the current run
  counts as turned worse); the first few are listed with the sensors whose status changed.

A **regression** (:attr:`BaselineComparison.regressions`, one line per breach of the
:class:`Tolerances`) is:

* a drive of the baseline missing from the current run, or failed there (its directory has no
  ``report.json``);
* mAP, or the AP of a class, lower by more than ``map_drop`` (per drive and in total);
* a p50 or p99 (total, stage, sensor total) higher by more than ``latency_pct`` percent *and* by more
  than ``latency_ms`` (per drive and in total), so that stages of a few microseconds do not flap;
* more than ``status_changes`` frames of a drive turned worse;
* a sensor that ran in the baseline (the report's ``sensor_status``) and not in the current run;
* a drive whose quality cannot be checked although the baseline's could: the current report has no
  ``quality`` (run without ground-truth evaluation) or one under another protocol -- a release gate
  must not pass what it could not check.

Not regressions, but listed: drives only in the current run, and drives whose baseline directory has no
``report.json`` ("not comparable": nothing to compare with).

**Totals.** Latency totals are pooled: the percentiles of every non-dropped frame of every compared
drive (from ``detections.jsonl``, as the per-drive reports count them), by
:func:`perception.metrics.percentiles` -- percentiles of drives cannot be averaged. Quality totals are
*ground-truth-weighted* means over the drives compared in both runs: a class's AP weighted by the
drive's ground-truth objects of that class, mAP by the drive's ground-truth objects of all classes -- the
baseline's counts, in both runs, so that the totals move only when a drive's values do (a drive with fewer
frames evaluated moved a total that no drive's value had). (An exact pooled AP would need every detection's
score and match, which the outputs do not keep.)
"""

from __future__ import annotations

import json
import logging
import math
from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from perception._paths import DETECTIONS_FILE, REPORT_FILE
from perception.errors import ConfigError
from perception.fleet._outputs import FLEET_JSON
from perception.metrics import FrameRecord, LatencyStats, RunReport, percentiles, read_frame_records

__all__ = [
    "TOLERANCE_KEYS",
    "BaselineComparison",
    "ClassDelta",
    "DriveComparison",
    "LatencyDelta",
    "QualityDelta",
    "StatusChange",
    "StatusDelta",
    "Tolerances",
    "check_baseline",
    "compare_runs",
]

log = logging.getLogger(__name__)


#: Frame statuses from best to worst; a frame of the baseline missing from the current run is the worst.
STATUS_ORDER: tuple[str, ...] = ("ok", "degraded", "dropped", "missing")
_RANK = {s: i for i, s in enumerate(STATUS_ORDER)}
#: Status changes listed per drive (all are counted).
FIRST_CHANGES = 5
LATENCY_STATS: tuple[str, ...] = ("p50", "p99")
#: Float slack of the comparisons (a drop of exactly the tolerance is within it).
_EPS = 1e-9

#: The command-line option of each tolerance (the ``key`` of a :class:`ConfigError` about it).
TOLERANCE_KEYS: Mapping[str, str] = {
    "map_drop": "--tolerance-map",
    "latency_pct": "--tolerance-latency-pct",
    "latency_ms": "--tolerance-latency-ms",
    "status_changes": "--tolerance-status",
}

LatencyKind = Literal["total", "stage", "sensor"]
_LatencyKey = tuple[LatencyKind, str]
DriveState = Literal["compared", "missing", "failed", "new", "new_failed", "not_comparable"]
_STATE_TEXT: Mapping[str, str] = {
    "compared": "compared",
    "missing": "missing from the current run",
    "failed": "failed in the current run (no report.json)",
    "new": "only in the current run",
    "new_failed": "only in the current run, failed there (no report.json)",
    "not_comparable": "not comparable (no report.json in the baseline)",
}


# -- tolerances ----------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Tolerances:
    """How much worse the current run may be than the baseline before it is a regression.

    * ``map_drop``: absolute drop allowed in mAP and in any class's AP (0.01 = one AP point).
    * ``latency_pct``: relative increase of a p50/p99 allowed, in percent (10.0 = +10 %).
    * ``latency_ms``: absolute increase of a p50/p99 allowed, in ms. A latency regression exceeds both
      this and ``latency_pct``, so stages of a few microseconds do not flap.
    * ``status_changes``: frames of a drive allowed to turn worse (ok -> degraded -> dropped -> missing).
    """

    map_drop: float = 0.01
    latency_pct: float = 10.0
    latency_ms: float = 1.0
    status_changes: int = 0

    def __post_init__(self) -> None:
        for name in ("map_drop", "latency_pct", "latency_ms"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ConfigError(f"must be a number, got {value!r}", key=TOLERANCE_KEYS[name])
            if not math.isfinite(value) or value < 0:
                raise ConfigError(f"must be a finite number >= 0, got {value!r}", key=TOLERANCE_KEYS[name])
        n = self.status_changes
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise ConfigError(f"must be a whole number >= 0, got {n!r}", key=TOLERANCE_KEYS["status_changes"])

    def as_dict(self) -> dict[str, float | int]:
        return {
            "map_drop": self.map_drop,
            "latency_pct": self.latency_pct,
            "latency_ms": self.latency_ms,
            "status_changes": self.status_changes,
        }


# -- results -------------------------------------------------------------------------------------------------
def _delta(baseline: float | None, current: float | None) -> float | None:
    return None if baseline is None or current is None else current - baseline


@dataclass(frozen=True, slots=True)
class ClassDelta:
    """One class's AP in both runs, with the ground-truth objects and detections behind it
    (``None``: undefined, the class has no ground truth)."""

    label: str
    baseline_ap: float | None
    current_ap: float | None
    baseline_gt: int
    current_gt: int
    baseline_detections: int
    current_detections: int

    @property
    def delta(self) -> float | None:
        return _delta(self.baseline_ap, self.current_ap)

    def as_dict(self) -> dict[str, Any]:
        return {
            "baseline_ap": self.baseline_ap,
            "current_ap": self.current_ap,
            "delta": self.delta,
            "ground_truth": {"baseline": self.baseline_gt, "current": self.current_gt},
            "detections": {"baseline": self.baseline_detections, "current": self.current_detections},
        }


@dataclass(frozen=True, slots=True)
class QualityDelta:
    """mAP and per-class AP of a drive (or the GT-weighted totals) in both runs."""

    protocol: str
    baseline_map: float | None
    current_map: float | None
    baseline_gt: int
    current_gt: int
    classes: tuple[ClassDelta, ...]

    @property
    def delta(self) -> float | None:
        return _delta(self.baseline_map, self.current_map)

    def as_dict(self) -> dict[str, Any]:
        return {
            "protocol": self.protocol,
            "baseline_map": self.baseline_map,
            "current_map": self.current_map,
            "delta": self.delta,
            "ground_truth": {"baseline": self.baseline_gt, "current": self.current_gt},
            "classes": {c.label: c.as_dict() for c in self.classes},
        }


@dataclass(frozen=True, slots=True)
class LatencyDelta:
    """One percentile (``stat``: p50/p99) of one scope in both runs, in ms. ``kind`` is ``total``,
    ``stage`` (``name`` = the stage) or ``sensor`` (``name`` = the sensor; its total)."""

    kind: LatencyKind
    name: str
    stat: str
    baseline_ms: float
    current_ms: float
    baseline_n: int
    current_n: int
    regressed: bool

    @property
    def scope(self) -> str:
        return "total" if self.kind == "total" else f"{self.kind} {self.name}"

    @property
    def delta_ms(self) -> float:
        return self.current_ms - self.baseline_ms

    @property
    def delta_pct(self) -> float | None:
        """Relative change in percent (``None`` when the baseline is 0 ms)."""
        return None if self.baseline_ms <= 0 else 100.0 * self.delta_ms / self.baseline_ms

    def as_dict(self) -> dict[str, Any]:
        pct = self.delta_pct
        return {
            "baseline_ms": self.baseline_ms,
            "current_ms": self.current_ms,
            "delta_ms": round(self.delta_ms, 3),
            "delta_pct": None if pct is None else round(pct, 2),
            "n": {"baseline": self.baseline_n, "current": self.current_n},
            "regressed": self.regressed,
        }


@dataclass(frozen=True, slots=True)
class StatusChange:
    """A frame whose status changed; ``sensors``: ``(sensor, before, after)`` for each sensor whose status
    changed (``absent``: the sensor is not in that run's record)."""

    frame_id: int
    before: str
    after: str
    sensors: tuple[tuple[str, str, str], ...] = ()

    def text(self) -> str:
        detail = ", ".join(f"{s} {b}→{a}" for s, b, a in self.sensors)
        return f"frame {self.frame_id} {self.before}→{self.after}" + (f" ({detail})" if detail else "")

    def as_dict(self) -> dict[str, Any]:
        return {
            "frame_id": self.frame_id,
            "before": self.before,
            "after": self.after,
            "sensors": {s: {"before": b, "after": a} for s, b, a in self.sensors},
        }


@dataclass(frozen=True, slots=True)
class StatusDelta:
    """Frame statuses of a drive in both runs, matched by ``frame_id``.

    ``compared``: frames in the baseline; ``worse`` / ``better``: frames whose status moved along
    ``ok`` < ``degraded`` < ``dropped`` < ``missing`` (a baseline frame absent from the current run is
    ``missing``: ``missing_in_current`` of the ``worse``); ``new_in_current``: frames only in the
    current run. ``transitions``: ``("ok→degraded", count)`` pairs; ``first``: the first few changes."""

    compared: int
    worse: int
    better: int
    missing_in_current: int
    new_in_current: int
    transitions: tuple[tuple[str, int], ...]
    first: tuple[StatusChange, ...]

    @property
    def changed(self) -> int:
        return self.worse + self.better

    def as_dict(self) -> dict[str, Any]:
        return {
            "compared": self.compared,
            "worse": self.worse,
            "better": self.better,
            "missing_in_current": self.missing_in_current,
            "new_in_current": self.new_in_current,
            "transitions": dict(self.transitions),
            "first": [c.as_dict() for c in self.first],
        }


@dataclass(frozen=True, slots=True)
class DriveComparison:
    """One drive: its state (:data:`DriveState`), what was compared, notes and its regressions."""

    name: str
    state: DriveState
    quality: QualityDelta | None = None
    latency: tuple[LatencyDelta, ...] = ()
    status: StatusDelta | None = None
    notes: tuple[str, ...] = ()
    regressions: tuple[str, ...] = ()

    def latency_of(self, kind: str, name: str, stat: str) -> LatencyDelta | None:
        return _find_latency(self.latency, kind, name, stat)

    def as_dict(self) -> dict[str, Any]:
        return {
            "state": self.state,
            "quality": None if self.quality is None else self.quality.as_dict(),
            "latency": _latency_dict(self.latency),
            "status": None if self.status is None else self.status.as_dict(),
            "notes": list(self.notes),
            "regressions": list(self.regressions),
        }


def _find_latency(deltas: Iterable[LatencyDelta], kind: str, name: str, stat: str) -> LatencyDelta | None:
    return next((d for d in deltas if d.kind == kind and d.name == name and d.stat == stat), None)


def _latency_dict(deltas: Iterable[LatencyDelta]) -> dict[str, Any]:
    out: dict[str, Any] = {"total": {}, "stages": {}, "sensors": {}}
    for d in deltas:
        where = out["total"] if d.kind == "total" else out[f"{d.kind}s"].setdefault(d.name, {})
        where[d.stat] = d.as_dict()
    return out


@dataclass(frozen=True, slots=True)
class BaselineComparison:
    """The current run against the baseline: per drive (sorted by name), in total, and the regressions
    (drives first, in drive order, then the totals). :attr:`ok` when there are none."""

    current: Path
    baseline: Path
    tolerances: Tolerances
    drives: tuple[DriveComparison, ...]
    #: GT-weighted quality over the drives whose quality was compared (``None``: none was).
    quality: QualityDelta | None
    #: Pooled latency over the drives compared with ``detections.jsonl`` in both runs.
    latency: tuple[LatencyDelta, ...]
    #: Status changes summed over the compared drives (``first``: the first few of all drives).
    status: StatusDelta | None
    regressions: tuple[str, ...] = field(default=())

    @property
    def ok(self) -> bool:
        return not self.regressions

    def drive(self, name: str) -> DriveComparison:
        for d in self.drives:
            if d.name == name:
                return d
        raise KeyError(name)

    def _named(self, *states: str) -> list[str]:
        return [d.name for d in self.drives if d.state in states]

    def as_dict(self) -> dict[str, Any]:
        """JSON-serialisable (``OUT/fleet.json``'s ``baseline`` section)."""
        return {
            "current": str(self.current),
            "baseline": str(self.baseline),
            "ok": self.ok,
            "tolerances": self.tolerances.as_dict(),
            "regressions": list(self.regressions),
            "totals": {
                "drives_compared": len(self._named("compared")),
                "quality": None if self.quality is None else self.quality.as_dict(),
                "quality_weighting": "the baseline's ground-truth objects, in both runs",
                "latency": _latency_dict(self.latency),
                "latency_pooling": "percentiles of every non-dropped frame of the compared drives",
                "status": None if self.status is None else self.status.as_dict(),
            },
            "missing_in_current": self._named("missing"),
            "failed_in_current": self._named("failed"),
            "only_in_current": self._named("new", "new_failed"),
            "not_comparable": self._named("not_comparable"),
            "drives": {d.name: d.as_dict() for d in self.drives},
        }

    def markdown_lines(self) -> list[str]:
        """A ``## Baseline comparison`` section for ``fleet.md``: the verdict and the regressions first,
        then one row per drive, the totals, and the details of the drives that changed."""
        return _markdown(self)


# -- reading runs --------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class _Frame:
    status: str
    sensors: Mapping[str, str]
    #: ``(kind, name) -> ms`` for kinds total/stage/sensor; empty for a dropped frame (not timed).
    latency: Mapping[_LatencyKey, float]


@dataclass(frozen=True, slots=True)
class _Drive:
    name: str
    path: Path
    report: RunReport | None  # None: the directory has no report.json
    frames: Mapping[int, _Frame] | None  # None: no detections.jsonl


def _error(message: str, path: Path, key: str | None = None) -> ConfigError:
    return ConfigError(message, file=str(path), key=key)




def _number(value: Any, path: Path, key: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise _error(f"expected a number, got {value!r}", path, key)
    return float(value)


def _mapping(value: Any, path: Path, key: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _error(f"expected an object, got {type(value).__name__}", path, key)
    return value


def _frame(rec: FrameRecord) -> _Frame:
    latency: dict[_LatencyKey, float] = {}
    if rec.status != "dropped":  # dropped frames are not timed (LatencyAccumulator leaves them out)
        latency["total", "total"] = rec.total_ms
        latency.update({("stage", k): ms for k, ms in rec.stage_ms.items()})
        latency.update({("sensor", s): ms for s, ms in rec.sensor_total_ms.items()})
    return _Frame(rec.status, {name: s.status for name, s in rec.sensors.items()}, latency)


def _load_frames(path: Path) -> dict[int, _Frame]:
    """The frame records of a ``detections.jsonl`` (:func:`perception.metrics.read_frame_records`)."""
    return {rec.frame_id: _frame(rec) for rec in read_frame_records(path)}


def _drive(name: str, path: Path) -> _Drive:
    report_path = path / REPORT_FILE
    if not report_path.is_file():
        return _Drive(name, path, None, None)
    report = RunReport.from_json(report_path)
    jsonl = path / DETECTIONS_FILE
    return _Drive(name, path, report, _load_frames(jsonl) if jsonl.is_file() else None)


def check_baseline(baseline: Path, out: Path) -> None:
    """Refuse (:class:`ConfigError` naming it), before a run, a ``baseline`` that :func:`compare_runs` would
    refuse after it -- no fleet or replay output -- or that the run writes into: ``out`` itself, or a
    directory holding it or held by it (the run would replace what it is compared with)."""
    _run_dirs(baseline, "baseline", strict=True)
    base, dest = baseline.resolve(), out.resolve()
    if base == dest or base in dest.parents or dest in base.parents:
        raise _error(
            f"the baseline would be written by this run (--out {out}): pass an earlier run's output directory",
            baseline,
        )


def _run_dirs(root: Path, role: str, *, strict: bool) -> list[Path] | None:
    """The drive directories of a run (``None``: ``root`` is a single replay output). ``strict`` (the
    baseline): a directory that holds no drive at all is an error."""
    if not root.exists():
        raise _error(f"{role} run not found", root)
    if not root.is_dir():
        raise _error(f"{role} run is not a directory (expected a fleet or replay output directory)", root)
    if (root / REPORT_FILE).is_file():  # a single replay output
        return None
    try:
        subdirs = sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    except OSError as e:
        raise _error(f"cannot list the {role} run: {e.strerror or e}", root) from e
    if strict and not any((p / REPORT_FILE).is_file() for p in subdirs) and not (root / FLEET_JSON).is_file():
        raise _error(f"not a fleet or replay output: no {REPORT_FILE} in it or in any of its subdirectories", root)
    return subdirs


def _load_run(root: Path, role: str, *, strict: bool, replayed: Collection[str] | None = None) -> dict[str, _Drive]:
    """The drives of a run by name. ``strict`` (the baseline): a directory that holds no drive at all
    is an error; the current run may have lost every drive (each is then a regression). ``replayed``: the
    names of the drives the run replayed (other directories are an earlier run's, in a reused output)."""
    subdirs = _run_dirs(root, role, strict=strict)
    if subdirs is None:
        d = _drive(root.name, root)
        assert d.report is not None
        drive = d.report.drive
        name = Path(drive).stem if drive else root.name
        return {name: _Drive(name, root, d.report, d.frames)}
    if replayed is not None:
        ours = set(replayed)
        subdirs = [p for p in subdirs if p.name in ours]
    return {p.name: _drive(p.name, p) for p in subdirs}


def _listed_drives(root: Path) -> list[str] | None:
    """The drives a fleet run's ``fleet.json`` lists -- the ones that run replayed -- or None without one
    (a replay output, a fleet output of a run that did not finish)."""
    path = root / FLEET_JSON
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise _error(f"cannot read: {getattr(exc, 'strerror', None) or exc}", path) from exc
    except ValueError as exc:
        raise _error(f"not valid JSON: {exc}", path) from exc
    drives = data.get("drives") if isinstance(data, dict) else None
    if not isinstance(drives, list) or not all(isinstance(d, dict) and isinstance(d.get("name"), str) for d in drives):
        raise _error("expected a list of drives, each with a name", path, "drives")
    return [d["name"] for d in drives]


# -- comparing -----------------------------------------------------------------------------------------------
def _fmt(value: float | None, nd: int = 3) -> str:
    return "-" if value is None else f"{value:.{nd}f}"


def _class_table(quality: Mapping[str, Any], path: Path) -> dict[str, tuple[float | None, int, int]]:
    """label -> (AP, ground-truth objects, detections) of a report's ``quality``."""
    aps = _mapping(quality.get("per_class_ap"), path, "quality.per_class_ap")
    gts = _mapping(quality.get("num_ground_truth"), path, "quality.num_ground_truth")
    dets = _mapping(quality.get("num_detections"), path, "quality.num_detections")
    out: dict[str, tuple[float | None, int, int]] = {}
    for label in sorted(set(aps) | set(gts)):
        ap = aps.get(label)
        ap_value = None if ap is None else _number(ap, path, f"quality.per_class_ap.{label}")
        gt = int(_number(gts.get(label, 0), path, f"quality.num_ground_truth.{label}"))
        det = int(_number(dets.get(label, 0), path, f"quality.num_detections.{label}"))
        out[label] = (ap_value, gt, det)
    return out


def _map_of(quality: Mapping[str, Any], path: Path) -> float | None:
    value = quality.get("mAP")
    return None if value is None else _number(value, path, "quality.mAP")


def _compare_quality(
    name: str, base: _Drive, cur: _Drive, tol: Tolerances, notes: list[str], regressions: list[str]
) -> QualityDelta | None:
    assert base.report is not None and cur.report is not None
    b_path, c_path = base.path / REPORT_FILE, cur.path / REPORT_FILE
    bq = base.report.quality or {}
    cq = cur.report.quality or {}
    if not bq:
        if cq:
            notes.append("quality only in the current run (the baseline has no ground-truth evaluation)")
        return None
    if not cq:
        regressions.append(
            f"{name}: quality not checked: the baseline has it (mAP {_fmt(_map_of(bq, b_path))}) but the "
            "current run has none (ground-truth evaluation off?)"
        )
        return None
    b_proto, c_proto = str(bq.get("protocol", "native")), str(cq.get("protocol", "native"))
    if b_proto != c_proto:
        regressions.append(f"{name}: quality not comparable: protocol {b_proto} in the baseline, {c_proto} now")
        return None
    b_cls, c_cls = _class_table(bq, b_path), _class_table(cq, c_path)
    classes = []
    for label in sorted(set(b_cls) | set(c_cls)):
        b_ap, b_gt, b_det = b_cls.get(label, (None, 0, 0))
        c_ap, c_gt, c_det = c_cls.get(label, (None, 0, 0))
        classes.append(ClassDelta(label, b_ap, c_ap, b_gt, c_gt, b_det, c_det))
    q = QualityDelta(
        b_proto,
        _map_of(bq, b_path),
        _map_of(cq, c_path),
        sum(c.baseline_gt for c in classes),
        sum(c.current_gt for c in classes),
        tuple(classes),
    )
    _quality_regressions(name, q, tol, notes, regressions)
    return q


def _quality_regressions(name: str, q: QualityDelta, tol: Tolerances, notes: list[str], regressions: list[str]) -> None:
    if q.delta is not None and -q.delta > tol.map_drop + _EPS:
        regressions.append(
            f"{name}: mAP {q.baseline_map:.3f} -> {q.current_map:.3f} (Δ {q.delta:+.3f}, "
            f"a drop of at most {tol.map_drop:g} allowed; ground truth {q.baseline_gt} -> {q.current_gt})"
        )
    elif q.baseline_map is not None and q.current_map is None:
        notes.append("mAP undefined in the current run (no ground truth counted)")
    for c in q.classes:
        if c.delta is not None and -c.delta > tol.map_drop + _EPS:
            regressions.append(
                f"{name}: class {c.label} AP {c.baseline_ap:.3f} -> {c.current_ap:.3f} (Δ {c.delta:+.3f}, a drop "
                f"of at most {tol.map_drop:g} allowed; ground truth {c.baseline_gt} -> {c.current_gt}, "
                f"detections {c.baseline_detections} -> {c.current_detections})"
            )
        elif c.baseline_ap is not None and c.current_ap is None:
            notes.append(f"class {c.label}: AP undefined in the current run (no ground truth counted)")


def _report_latency(report: RunReport) -> dict[_LatencyKey, LatencyStats]:
    """``(kind, name) -> percentiles`` of a report's ``latency_ms``: the total, each stage, each sensor's total."""
    lat = report.latency
    out: dict[_LatencyKey, LatencyStats] = {}
    if lat.total is not None:
        out["total", "total"] = lat.total
    for stage, p in lat.stages.items():
        out["stage", stage] = p
    for sensor, stages in lat.sensors.items():
        total = stages.get("total")
        if total is not None:
            out["sensor", sensor] = total
    return out


def _latency_deltas(
    base: Mapping[_LatencyKey, LatencyStats],
    cur: Mapping[_LatencyKey, LatencyStats],
    tol: Tolerances,
    notes: list[str],
) -> list[LatencyDelta]:
    """Δ p50/p99 of every scope timed in both runs (``n`` > 0 in both)."""
    order = {"total": 0, "stage": 1, "sensor": 2}
    out: list[LatencyDelta] = []
    for key in sorted(set(base) | set(cur), key=lambda k: (order.get(k[0], 3), k[1])):
        kind, name = key
        if key not in base or key not in cur:
            notes.append(
                f"{'total' if kind == 'total' else f'{kind} {name}'}: timed only in the "
                f"{'baseline' if key in base else 'current run'}"
            )
            continue
        b, c = base[key], cur[key]
        b_n, c_n = b.n, c.n
        if b_n == 0 or c_n == 0:
            continue
        for stat in LATENCY_STATS:
            b_ms, c_ms = float(getattr(b, stat)), float(getattr(c, stat))
            d = c_ms - b_ms
            regressed = d > tol.latency_ms + _EPS and (b_ms <= 0 or 100.0 * d / b_ms > tol.latency_pct + _EPS)
            out.append(LatencyDelta(kind, name, stat, b_ms, c_ms, b_n, c_n, regressed))
    return out


def _latency_regressions(who: str, deltas: Iterable[LatencyDelta], tol: Tolerances) -> list[str]:
    return [
        f"{who}: {d.scope} {d.stat} {d.baseline_ms:.2f} -> {d.current_ms:.2f} ms ({d.delta_ms:+.2f} ms, "
        + ("from 0" if d.delta_pct is None else f"{d.delta_pct:+.1f} %")
        + f"; at most +{tol.latency_pct:g} % or +{tol.latency_ms:g} ms allowed)"
        for d in deltas
        if d.regressed
    ]


def _status_change(fid: int, b: _Frame, c: _Frame | None) -> StatusChange:
    if c is None:
        return StatusChange(fid, b.status, "missing")
    sensors = tuple(
        (s, b.sensors.get(s, "absent"), c.sensors.get(s, "absent"))
        for s in sorted(set(b.sensors) | set(c.sensors))
        if b.sensors.get(s) != c.sensors.get(s)
    )
    return StatusChange(fid, b.status, c.status, sensors)


def _compare_status(base: Mapping[int, _Frame], cur: Mapping[int, _Frame]) -> StatusDelta:
    worse = better = missing = 0
    transitions: Counter[str] = Counter()
    first: list[StatusChange] = []
    for fid in sorted(base):
        b, c = base[fid], cur.get(fid)
        after = "missing" if c is None else c.status
        if after == b.status:
            continue
        transitions[f"{b.status}→{after}"] += 1
        if _RANK[after] > _RANK[b.status]:
            worse += 1
            missing += c is None
        else:
            better += 1
        if len(first) < FIRST_CHANGES:
            first.append(_status_change(fid, b, c))
    new = sum(1 for fid in cur if fid not in base)
    return StatusDelta(len(base), worse, better, missing, new, tuple(sorted(transitions.items())), tuple(first))


def _transitions_text(s: StatusDelta) -> str:
    return ", ".join(f"{t} {n}" for t, n in s.transitions)


def _compare_drive(name: str, base: _Drive | None, cur: _Drive | None, tol: Tolerances) -> DriveComparison:
    if base is None:
        assert cur is not None
        return DriveComparison(name, "new" if cur.report is not None else "new_failed")
    if base.report is None:
        return DriveComparison(name, "not_comparable", notes=(f"no {REPORT_FILE} in {base.path}",))
    if cur is None:
        return DriveComparison(name, "missing", regressions=(f"{name}: missing from the current run",))
    if cur.report is None:
        return DriveComparison(
            name, "failed", regressions=(f"{name}: failed in the current run (no {REPORT_FILE} in {cur.path})",)
        )
    notes: list[str] = []
    regressions: list[str] = []
    quality = _compare_quality(name, base, cur, tol, notes, regressions)
    b_sensors = set(base.report.counters.sensor_status)
    c_sensors = set(cur.report.counters.sensor_status)
    regressions += [
        f"{name}: sensor {s} ran in the baseline but not in the current run" for s in sorted(b_sensors - c_sensors)
    ]
    notes += [f"sensor {s} ran only in the current run" for s in sorted(c_sensors - b_sensors)]
    latency = _latency_deltas(
        _report_latency(base.report), _report_latency(cur.report), tol, notes
    )
    regressions += _latency_regressions(name, latency, tol)
    status = None
    if base.frames is None or cur.frames is None:
        side = "the baseline" if base.frames is None else "the current run"
        notes.append(f"statuses not compared: no {DETECTIONS_FILE} in {side}")
    else:
        status = _compare_status(base.frames, cur.frames)
        if status.worse > tol.status_changes:
            listed = "; ".join(c.text() for c in status.first)
            regressions.append(
                f"{name}: {status.worse} of {status.compared} frames turned worse ({_transitions_text(status)}; "
                f"at most {tol.status_changes} allowed): {listed}"
            )
    return DriveComparison(name, "compared", quality, tuple(latency), status, tuple(notes), tuple(regressions))


def _weighted(pairs: Iterable[tuple[float | None, int]]) -> float | None:
    """The mean of the defined values weighted by their counts (``None`` when nothing is defined)."""
    defined = [(v, w) for v, w in pairs if v is not None and w > 0]
    total = sum(w for _, w in defined)
    return sum(v * w for v, w in defined) / total if total else None


def _total_quality(drives: Sequence[DriveComparison]) -> QualityDelta | None:
    """GT-weighted means over the drives whose quality was compared (see the module docstring)."""
    qs = [d.quality for d in drives if d.quality is not None]
    if not qs:
        return None
    by_label: dict[str, list[ClassDelta]] = {}
    for q in qs:
        for c in q.classes:
            by_label.setdefault(c.label, []).append(c)
    classes = tuple(
        ClassDelta(
            label,
            _weighted((c.baseline_ap, c.baseline_gt) for c in cs),
            _weighted((c.current_ap, c.baseline_gt) for c in cs),  # the same weights (module docs)
            sum(c.baseline_gt for c in cs),
            sum(c.current_gt for c in cs),
            sum(c.baseline_detections for c in cs),
            sum(c.current_detections for c in cs),
        )
        for label, cs in sorted(by_label.items())
    )
    protocols = sorted({q.protocol for q in qs})
    return QualityDelta(
        "+".join(protocols),
        _weighted((q.baseline_map, q.baseline_gt) for q in qs),
        _weighted((q.current_map, q.baseline_gt) for q in qs),
        sum(q.baseline_gt for q in qs),
        sum(q.current_gt for q in qs),
        classes,
    )


def _pooled(frames: Iterable[Mapping[int, _Frame]]) -> dict[_LatencyKey, LatencyStats]:
    values: dict[_LatencyKey, list[int]] = {}
    for run in frames:
        for f in run.values():
            for key, ms in f.latency.items():
                values.setdefault(key, []).append(round(ms * 1e6))
    return {key: LatencyStats.of(percentiles(ns)) for key, ns in values.items()}


def _total_status(statuses: Sequence[StatusDelta]) -> StatusDelta | None:
    if not statuses:
        return None
    transitions: Counter[str] = Counter()
    for s in statuses:
        transitions.update(dict(s.transitions))
    first = tuple(c for s in statuses for c in s.first)[:FIRST_CHANGES]
    return StatusDelta(
        sum(s.compared for s in statuses),
        sum(s.worse for s in statuses),
        sum(s.better for s in statuses),
        sum(s.missing_in_current for s in statuses),
        sum(s.new_in_current for s in statuses),
        tuple(sorted(transitions.items())),
        first,
    )


def compare_runs(
    current: Path, baseline: Path, tolerances: Tolerances, *, replayed: Collection[str] | None = None
) -> BaselineComparison:
    """Compare the fleet (or replay) output ``current`` with ``baseline`` (see the module docstring).

    ``replayed``: the names of the drives the current run replayed (a fleet run gives them): other
    directories of ``current`` -- an earlier run's, in a reused output directory -- are not this run's.
    The baseline's drives are the ones its ``fleet.json`` lists, when it has one, for the same reason.

    Raises :class:`ConfigError` naming the file for bad input: a run directory that does not exist, a
    baseline that is no fleet/replay output, a report or frame record that cannot be read or is not
    valid JSON of the expected shape."""
    current, baseline = Path(current), Path(baseline)
    base_run = _load_run(baseline, "baseline", strict=True, replayed=_listed_drives(baseline))
    cur_run = _load_run(current, "current", strict=False, replayed=replayed)
    names = sorted(set(base_run) | set(cur_run))
    drives = tuple(_compare_drive(n, base_run.get(n), cur_run.get(n), tolerances) for n in names)
    regressions = [r for d in drives for r in d.regressions]

    compared = [d for d in drives if d.state == "compared"]
    quality = _total_quality(compared)
    if quality is not None:
        _quality_regressions("all drives", quality, tolerances, [], regressions)
    pooled = [n for n in (d.name for d in compared) if base_run[n].frames is not None and cur_run[n].frames is not None]
    latency: list[LatencyDelta] = []
    if pooled:
        latency = _latency_deltas(
            _pooled(base_run[n].frames or {} for n in pooled),
            _pooled(cur_run[n].frames or {} for n in pooled),
            tolerances,
            [],
        )
        regressions += _latency_regressions("all drives", latency, tolerances)
    status = _total_status([d.status for d in compared if d.status is not None])
    log.debug("baseline %s: %d drives compared, %d regressions", baseline, len(compared), len(regressions))
    return BaselineComparison(
        current, baseline, tolerances, drives, quality, tuple(latency), status, tuple(regressions)
    )


# -- markdown ------------------------------------------------------------------------------------------------
def _ms_delta(d: LatencyDelta | None) -> str:
    if d is None:
        return "-"
    pct = "" if d.delta_pct is None else f" ({d.delta_pct:+.0f} %)"
    return f"{d.baseline_ms:.1f} → {d.current_ms:.1f}{pct}" + (" **!**" if d.regressed else "")


def _signed(value: float | None) -> str:
    return "-" if value is None else f"{value:+.3f}"


def _latency_table(deltas: Sequence[LatencyDelta]) -> list[str]:
    lines = ["| scope | p50 ms | p99 ms |", "|---|---:|---:|"]
    scopes = list(dict.fromkeys((d.kind, d.name) for d in deltas))
    for kind, name in scopes:
        p50, p99 = (_find_latency(deltas, kind, name, s) for s in LATENCY_STATS)
        scope = "total" if kind == "total" else f"{kind} {name}"
        lines.append(f"| {scope} | {_ms_delta(p50)} | {_ms_delta(p99)} |")
    return lines


def _quality_lines(q: QualityDelta) -> list[str]:
    lines = [
        f"mAP ({q.protocol}): {_fmt(q.baseline_map)} → {_fmt(q.current_map)} (Δ {_signed(q.delta)}), "
        f"ground truth {q.baseline_gt} → {q.current_gt}",
        "",
        "| class | AP baseline | AP current | Δ AP | ground truth | detections |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for c in q.classes:
        lines.append(
            f"| {c.label} | {_fmt(c.baseline_ap)} | {_fmt(c.current_ap)} | {_signed(c.delta)} | "
            f"{c.baseline_gt} → {c.current_gt} | {c.baseline_detections} → {c.current_detections} |"
        )
    return lines


def _markdown(cmp: BaselineComparison) -> list[str]:
    t = cmp.tolerances
    verdict = "**ok**: no regression" if cmp.ok else f"**{len(cmp.regressions)} regression(s)**"
    lines = [
        "## Baseline comparison",
        "",
        f"Current run `{cmp.current}` against the baseline `{cmp.baseline}`: {verdict}.",
        f"Tolerances: mAP / class AP drop {t.map_drop:g}; latency p50/p99 +{t.latency_pct:g} % and "
        f"+{t.latency_ms:g} ms; {t.status_changes} frame(s) per drive turning worse.",
        "",
    ]
    if cmp.regressions:
        lines += ["### Regressions", "", *(f"- {r}" for r in cmp.regressions), ""]
    lines += [
        "### Per drive",
        "",
        "| drive | state | mAP | Δ mAP | total p50 ms | total p99 ms | frames worse / better | regressions |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for d in cmp.drives:
        q = d.quality
        m = "-" if q is None else f"{_fmt(q.baseline_map)} → {_fmt(q.current_map)}"
        st = "-" if d.status is None else f"{d.status.worse} / {d.status.better}"
        p50, p99 = (_ms_delta(d.latency_of("total", "total", s)) for s in LATENCY_STATS)
        lines.append(
            f"| {d.name} | {_STATE_TEXT[d.state]} | {m} | {_signed(None if q is None else q.delta)} | "
            f"{p50} | {p99} | {st} | {len(d.regressions)} |"
        )
    lines += ["", "### Totals", ""]
    n = len(cmp._named("compared"))
    lines.append(f"{n} drive(s) compared.")
    if cmp.quality is not None:
        lines += ["", "Quality: means over the drives weighted by their ground-truth objects.", ""]
        lines += _quality_lines(cmp.quality)
    if cmp.latency:
        lines += ["", "Latency: percentiles of every non-dropped frame of the compared drives.", ""]
        lines += _latency_table(cmp.latency)
    if cmp.status is not None:
        s = cmp.status
        lines += [
            "",
            f"Frame statuses: {s.changed} of {s.compared} frames changed: {s.worse} worse, {s.better} better"
            + (f" ({_transitions_text(s)})" if s.transitions else "")
            + (f"; {s.new_in_current} frame(s) only in the current run" if s.new_in_current else "")
            + ".",
        ]
    changed = [d for d in cmp.drives if d.state == "compared" and (d.regressions or (d.status and d.status.changed))]
    for d in changed:
        lines += [*([""] if lines[-1] else []), f"### Drive {d.name}", ""]
        if d.quality is not None:
            lines += [*_quality_lines(d.quality), ""]
        if d.latency:
            lines += [*_latency_table(d.latency), ""]
        if d.status is not None and d.status.changed:
            lines.append(
                f"Status changes: {_transitions_text(d.status)}; first: " + "; ".join(c.text() for c in d.status.first)
            )
        lines += [f"- note: {note}" for note in d.notes]
    others = [d for d in cmp.drives if d.state != "compared"]
    if others:
        lines += [
            *([""] if lines[-1] else []),
            "### Drives not compared",
            "",
            *(f"- {d.name}: {_STATE_TEXT[d.state]}" for d in others),
        ]
    while lines and lines[-1] == "":
        lines.pop()
    return lines
