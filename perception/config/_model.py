"""Typed, immutable runtime configuration (the launch profile).

Every class here is a frozen dataclass; ``from_data`` builds them from YAML. Durations in YAML are
milliseconds (``*_ms``) for readability and exposed as integer nanoseconds (``*_ns``) to the code.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import ClassVar, Literal

from perception.config._convert import first_duplicate, reject_duplicates
from perception.config._drive_source import is_simulated
from perception.kinds import accumulate_problem, kind_def, known_kinds

__all__ = [
    "GRPC_NAMES",
    "BudgetConfig",
    "CameraGuidedConfig",
    "CircuitConfig",
    "FaultConfig",
    "FusionConfig",
    "KindDefaults",
    "LiveConfig",
    "PipelineConfig",
    "RosConfig",
    "RuntimeConfig",
    "SensorConfig",
    "SensorDefaults",
    "ServerConfig",
    "TLSConfig",
    "TriggerConfig",
    "headers_problem",
    "reference_problem",
    "required_sensors_problem",
    "tls_problem",
    "url_problem",
]

Transport = Literal["grpc", "shm", "auto"]
#: Where an image sensor's samples are decoded: ``client`` (the runtime decodes at the model's scale and
#: sends pixels), ``server`` (the runtime sends the bytes as recorded; the model decodes them, as a GPU
#: server would with nvJPEG or DALI; a model without the encoded input fails the start naming the
#: sensor) or ``auto``, the default (``server`` when the served model takes the encoded input and answers
#: an image it cannot decode on its own -- its kind's ``decode_error`` output -- as the committed camera
#: models do, else ``client``). The cameras of one model share one batched request; such a model answers
#: an undecodable image as that camera's error alone, the batch's other cameras detected, as the client's
#: decode would. On the 2-core host both ways cost the same CPU in all (client + server); ``server`` takes
#: the decode off the client (bench/bench_client_cpu.py). ``server`` only for kinds whose contract has an
#: ``encoded`` input (cameras); with a model lacking ``decode_error`` one undecodable image fails its batch.
Decode = Literal["auto", "client", "server"]
Overflow = Literal["drop-oldest", "drop-newest", "block"]

_MS = 1_000_000


def _ns(ms: float) -> int:
    return round(ms * _MS)


#: gRPC target names taken as they are (gRPC's naming): no host:port form to check.
GRPC_NAMES = ("unix:", "unix-abstract:", "dns:", "ipv4:", "ipv6:")


def url_problem(url: str) -> str | None:
    """What is wrong with the form of a Triton gRPC URL (``host:port``, the port 1..65535, or a gRPC name
    such as ``unix:/path``), or ``None``. The one check of a profile's ``server.url`` and ``replicas``, the
    CLI's ``--url`` and ``perception model-quality``'s: a bad one waited 10 s for a name that cannot resolve."""
    if url.startswith(("http://", "https://")):
        return f"gRPC URLs are host:port (no http:// scheme), got {url!r}"
    if url.startswith(GRPC_NAMES):
        return None
    host, sep, port = url.rpartition(":")
    if not sep or not host.strip("[]").strip() or not port.isdigit() or not 0 < int(port) < 65536:
        return f"must be 'embedded' or host:port (port 1..65535), got {url!r}"
    return None


_HEADER_NAME = re.compile(r"[0-9a-z_.-]+")


def headers_problem(headers: Mapping[str, str]) -> tuple[str, str] | None:
    """``(key, message)`` of the first header sent as gRPC metadata that gRPC would refuse (``headers.<name>``),
    or ``None``: the one check of a profile's ``server.headers``, :class:`perception.triton.ClientOptions`'
    ``headers`` and a call's own. gRPC refused such a call in a traceback of its own (``Metadata key
    'Authorization' is invalid``). The value is never quoted: it is often a secret."""
    for name, value in headers.items():
        if not _HEADER_NAME.fullmatch(name):
            why = f"not a gRPC metadata key: lower-case letters, digits, '-', '_' and '.' only, got {name!r}"
        elif name.endswith("-bin"):
            why = "binary metadata (a key ending in '-bin') is not supported: header values are text"
        elif not all(" " <= c <= "~" for c in value):
            why = "the value must be printable ASCII (no line break, tab or non-ASCII character)"
        else:
            continue
        return f"headers.{name}", why
    return None


def tls_problem(
    enabled: bool, root_certificates: object, private_key: object, certificate_chain: object, *, switch: str
) -> tuple[str, str] | None:
    """``(field, message)`` of what is wrong with a TLS setting, or ``None``: the one check of a profile's
    ``server.tls`` and :class:`perception.triton.ClientOptions`' (``switch``: the name of its on/off field).
    A file given with TLS off was not used; a client key without its certificate chain (or the reverse)
    aborted the process inside gRPC."""
    files = {"root_certificates": root_certificates, "private_key": private_key, "certificate_chain": certificate_chain}
    given = [name for name, path in files.items() if path]
    if given and not enabled:
        return given[0], f"given but TLS is off ({switch} is false)"
    if bool(private_key) != bool(certificate_chain):
        has, lacks = ("private_key", "certificate_chain") if private_key else ("certificate_chain", "private_key")
        return has, f"given without {lacks}: a client certificate (mutual TLS) takes both"
    return None


#: A sensor's ``sync_window_ms`` and ``max_staleness_ms`` when neither its entry in ``sensors:`` nor its
#: kind's ``sensor_defaults`` (for the drive's sensors) sets them.
SYNC_WINDOW_MS = 50.0
MAX_STALENESS_MS = 150.0


def _positive(name: str, value: float) -> None:
    if value <= 0:
        raise ValueError(f"{name}: must be > 0, got {value}")


def _non_negative(name: str, value: float) -> None:
    if value < 0:
        raise ValueError(f"{name}: must be >= 0, got {value}")


@dataclass(frozen=True, slots=True)
class TLSConfig:
    enabled: bool = False
    root_certificates: Path | None = None
    private_key: Path | None = None
    certificate_chain: Path | None = None

    def __post_init__(self) -> None:
        problem = tls_problem(
            self.enabled, self.root_certificates, self.private_key, self.certificate_chain, switch="enabled"
        )
        if problem is not None:
            raise ValueError(": ".join(problem))


@dataclass(frozen=True, slots=True)
class ServerConfig:
    """Where Triton is: ``url: embedded`` starts the bundled server; otherwise ``host:port`` (gRPC)."""

    url: str = "embedded"
    replicas: tuple[str, ...] = ()  # extra gRPC URLs serving the same models (round-robin)
    models: tuple[Path, ...] = (Path("models"),)  # repositories for the embedded server
    channels: int = 2
    #: Server start-up and model loading, until every model is READY; also ``perception server``'s and
    #: ``perception model-quality``'s (the same server and models).
    startup_timeout_s: float = 120.0
    connect_timeout_s: float = 10.0  # an external URL that does not answer at all for this long fails at once
    tls: TLSConfig = field(default_factory=TLSConfig)
    headers: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    #: The embedded server traces every request of a replay (Triton's timestamps per request id), so each
    #: frame's latency tree gets Triton's own time per request at any number of frames in flight.
    trace: bool = True
    #: The embedded server is restarted (on its ports) when it dies on its own, at most this many times
    #: within 10 minutes: a crash loop is left down (``perception.server.EmbeddedTriton.supervise``); 0: a
    #: crash leaves it down.
    restarts: int = 3

    def __post_init__(self) -> None:
        problem = None if self.embedded else url_problem(self.url)
        if problem is not None:
            raise ValueError(f"url: {problem}")
        for replica in self.replicas:
            problem = url_problem(replica)
            if problem is not None:
                raise ValueError(f"replicas: {problem}")
        # the embedded server's URL is known once it runs: replicas are checked among themselves
        urls = self.replicas if self.embedded else (self.url, *self.replicas)
        found = first_duplicate(urls)
        if found is not None:
            first = 0 if self.embedded else 1  # index of replicas[0] in urls
            i, j = found
            also = "url" if j < first else f"replicas[{j - first}]"
            raise ValueError(f"replicas[{i - first}]: duplicate URL {urls[i]!r} (also {also})")
        header = headers_problem(self.headers)
        if header is not None:
            raise ValueError(": ".join(header))
        if not 0 <= self.restarts <= 1000:
            raise ValueError(f"restarts: must be within 0..1000, got {self.restarts}")
        if self.channels < 1 or self.channels > 64:
            raise ValueError(f"channels: must be within 1..64, got {self.channels}")
        _positive("startup_timeout_s", self.startup_timeout_s)
        _positive("connect_timeout_s", self.connect_timeout_s)

    @property
    def embedded(self) -> bool:
        return self.url == "embedded"


@dataclass(frozen=True, slots=True)
class SensorConfig:
    name: str
    kind: str  # a registered sensor kind (perception.kinds)
    model: str
    topic: str | None = None  # default: the drive's conventional topic for this sensor
    transport: Transport = "auto"
    sync_window_ms: float = SYNC_WINDOW_MS  # max |sample time - frame time| to be used
    max_staleness_ms: float = MAX_STALENESS_MS  # a sample older than this (vs. frame time) is never used
    enabled: bool = True
    #: Point-cloud sensors: merge the sensor's earlier sweeps captured up to this long before the one a
    #: frame uses into it, moved by the ego motion (``perception.scheduler``, sweep accumulation); 0 sends
    #: each sweep alone. ``None``: the kind's default (``SensorKindDef.accumulate_ms``; lidar 120 ms).
    accumulate_ms: float | None = None
    #: Image kinds: who decodes the images (:data:`Decode`; ``bench/bench_client_cpu.py`` measures both).
    decode: Decode = "auto"

    def __post_init__(self) -> None:
        if not self.name or not self.name.replace("_", "").replace("-", "").isalnum():
            raise ValueError(f"name: must be a non-empty identifier, got {self.name!r}")
        if self.kind not in known_kinds():
            raise ValueError(f"kind: expected one of the sensor kinds {', '.join(known_kinds())}, got {self.kind!r}")
        if not self.model:
            raise ValueError("model: must be a non-empty model name")
        _non_negative("sync_window_ms", self.sync_window_ms)
        _positive("max_staleness_ms", self.max_staleness_ms)
        _accumulate_ok(self.kind, self.accumulate_ms)
        _decode_ok(self.kind, self.decode, self.name)

    @property
    def sync_window_ns(self) -> int:
        return _ns(self.sync_window_ms)

    @property
    def max_staleness_ns(self) -> int:
        return _ns(self.max_staleness_ms)

    @property
    def accumulate_ns(self) -> int:
        """The sweep accumulation window as applied (``None`` resolved to the kind's default)."""
        ms = kind_def(self.kind).accumulate_ms if self.accumulate_ms is None else self.accumulate_ms
        return _ns(ms)


def _decode_ok(kind: str, decode: Decode, sensor: str | None = None) -> None:
    if decode == "server" and kind in known_kinds() and kind_def(kind).contract.encoded is None:
        who = f"sensor {sensor!r} is a {kind}" if sensor else f"a {kind}"
        raise ValueError(f"decode: 'server' is for image sensors whose model takes the encoded image; {who}")


def _accumulate_ok(kind: str, accumulate_ms: float | None) -> None:
    if accumulate_ms is None:
        return
    problem = accumulate_problem(accumulate_ms, kind, image=kind in known_kinds() and kind_def(kind).is_image)
    if problem:
        raise ValueError(f"accumulate_ms: {problem}")


@dataclass(frozen=True, slots=True)
class KindDefaults:
    """How a sensor of one kind is served when the profile does not list it (sensors from the drive).

    ``model: auto`` picks the reference model by the drive's source where that matters (cameras:
    :func:`perception.config.default_camera_model`)."""

    model: str
    transport: Transport = "auto"
    sync_window_ms: float = SYNC_WINDOW_MS
    max_staleness_ms: float = MAX_STALENESS_MS
    accumulate_ms: float | None = None  # None: the kind's default (see SensorConfig.accumulate_ms)
    decode: Decode = "auto"  # image kinds (see SensorConfig.decode)

    def __post_init__(self) -> None:
        if not self.model:
            raise ValueError("model: must be a non-empty model name")
        _non_negative("sync_window_ms", self.sync_window_ms)
        _positive("max_staleness_ms", self.max_staleness_ms)
        _accumulate_ok("", self.accumulate_ms)


def _default_model(kind: str) -> str:
    model = kind_def(kind).default_model
    assert model is not None
    return model


@dataclass(frozen=True, slots=True)
class SensorDefaults:
    """The default model and timing of each sensor kind, for the sensors a profile leaves to the drive."""

    #: ``auto``: by the drive's source (:func:`perception.config.default_camera_model`).
    camera: KindDefaults = field(default_factory=lambda: KindDefaults("auto"))
    lidar: KindDefaults = field(default_factory=lambda: KindDefaults(_default_model("lidar"), sync_window_ms=60.0))
    radar: KindDefaults = field(default_factory=lambda: KindDefaults(_default_model("radar"), transport="grpc"))

    def __post_init__(self) -> None:
        for kind in ("lidar", "radar"):
            try:
                _decode_ok(kind, getattr(self, kind).decode)
            except ValueError as exc:
                raise ValueError(f"{kind}.{exc}") from None

    def of(self, kind: str) -> KindDefaults:
        """The defaults of ``kind``: this profile's for a built-in kind, else the registered kind's
        default model (:attr:`perception.kinds.SensorKindDef.default_model`); KeyError if it has none."""
        if kind in ("camera", "lidar", "radar"):
            defaults: KindDefaults = getattr(self, kind)
            return defaults
        model = kind_def(kind).default_model if kind in known_kinds() else None
        if model is None:
            raise KeyError(kind)
        return KindDefaults(model)


@dataclass(frozen=True, slots=True)
class TriggerConfig:
    """A frame is triggered by each sample of ``sensor``, or at a fixed ``rate_hz``.

    Neither set means *auto*: the first lidar of the sensors (by name), else the first camera, else the
    first radar. :func:`perception.config.resolve_sensors` makes that choice against a rig.
    """

    sensor: str | None = None
    rate_hz: float | None = None

    def __post_init__(self) -> None:
        if self.sensor is not None and self.rate_hz is not None:
            raise ValueError("set at most one of 'sensor' or 'rate_hz'")
        if self.rate_hz is not None and not 0 < self.rate_hz <= 1000:
            raise ValueError(f"rate_hz: must be within (0, 1000], got {self.rate_hz}")

    @property
    def automatic(self) -> bool:
        """Neither ``sensor`` nor ``rate_hz``: the trigger is chosen from the sensors (class docs)."""
        return self.sensor is None and self.rate_hz is None


#: ``budget.recorded_total_ms`` of a profile without a ``budget:`` section: the 12-sensor nuScenes rig
#: measured 230 ms p50 / 400 ms p99 lockstep on the 2-core host, KITTI (64-beam lidar) 223 / 343 ms
#: (``bench/results/real.json``).
RECORDED_TOTAL_MS = 450.0


@dataclass(frozen=True, slots=True)
class BudgetConfig:
    """Per-frame latency budget. The join deadline is ``total - fusion_reserve`` after frame start.

    The defaults are the 2-core CPU host's (a GPU host would use ~100 ms). A profile without a ``budget:``
    section also gets :data:`RECORDED_TOTAL_MS` for recordings of real sensors (``RuntimeConfig.budget``);
    one that gives the section and leaves ``recorded_total_ms`` out holds every drive to its ``total_ms``."""

    total_ms: float = 200.0
    fusion_reserve_ms: float = 15.0
    stages: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))  # stage -> ms
    #: ``total_ms`` for a drive recorded by real sensors (``perception import``) and for live input, when
    #: set; see :meth:`for_drive`. ``None``: ``total_ms`` for every drive.
    recorded_total_ms: float | None = None

    def __post_init__(self) -> None:
        for key, total in (("total_ms", self.total_ms), ("recorded_total_ms", self.recorded_total_ms)):
            if total is None:
                continue
            _positive(key, total)
            if self.fusion_reserve_ms >= total:
                raise ValueError(f"fusion_reserve_ms: must be below {key} ({total}), got {self.fusion_reserve_ms}")
        _non_negative("fusion_reserve_ms", self.fusion_reserve_ms)
        for stage, ms in self.stages.items():
            if ms <= 0:
                raise ValueError(f"stages: budget of stage {stage!r} must be > 0, got {ms}")

    def for_drive(self, metadata: Mapping[str, str]) -> BudgetConfig:
        """The budget of a drive with this metadata: ``recorded_total_ms`` (when set) for a recording of
        real sensors, ``total_ms`` for a drive of the simulator
        (:func:`perception.config._drive_source.is_simulated`)."""
        if self.recorded_total_ms is None:
            return self
        total = self.total_ms if is_simulated(metadata) else self.recorded_total_ms
        return dataclasses.replace(self, total_ms=total, recorded_total_ms=None)

    @property
    def total_ns(self) -> int:
        return _ns(self.total_ms)

    @property
    def join_ns(self) -> int:
        return _ns(self.total_ms - self.fusion_reserve_ms)


@dataclass(frozen=True, slots=True)
class CircuitConfig:
    failure_threshold: int = 3  # consecutive failures (error or late) that open the circuit
    reset_after_ms: float = 2000.0  # open -> half-open after this much sensor (frame) time

    def __post_init__(self) -> None:
        if self.failure_threshold < 1:
            raise ValueError(f"failure_threshold: must be >= 1, got {self.failure_threshold}")
        _positive("reset_after_ms", self.reset_after_ms)

    @property
    def reset_after_ns(self) -> int:
        return _ns(self.reset_after_ms)


@dataclass(frozen=True, slots=True)
class PipelineConfig:
    #: At most K frames processed concurrently. ``admission: adaptive`` (the default) starts at one and
    #: admits more only while the servers turn them into throughput within the deadline
    #: (:mod:`perception.scheduler._admission`); ``fixed`` keeps K in flight (to measure a depth).
    max_in_flight: int = 2
    admission: Literal["adaptive", "fixed"] = "adaptive"
    queue_size: int = 4  # frames waiting for a pipeline slot
    overflow: Overflow = "drop-oldest"
    #: Frames arriving faster than the servers finish them (a source that does not wait: ``overflow``
    #: not ``block``): ``shed`` runs the freshest frame that can finish within its budget and sheds the
    #: others before any request is sent (:mod:`perception.scheduler._shedding`); ``queue`` queues them
    #: under ``queue_size`` and ``overflow``.
    overload: Literal["shed", "queue"] = "shed"
    #: The sensors a frame cannot do without, besides the trigger sensor (always required). While frames
    #: are shed under overload, the others are decimated: a frame reuses each one's latest result while
    #: it is at most ``reuse_max_age_ms / 2`` old (sensor time) instead of sending its request
    #: (:mod:`perception.scheduler._reuse`). A name that is not a configured sensor is a ConfigError.
    required_sensors: tuple[str, ...] = ()
    reuse_max_age_ms: float = 300.0
    camera_requests: Literal["batched", "per_camera"] = "batched"
    retry_unavailable: bool = True  # one retry on UNAVAILABLE when the remaining budget allows
    min_retry_budget_ms: float = 20.0
    circuit: CircuitConfig = field(default_factory=CircuitConfig)
    drain_timeout_s: float = 5.0

    def __post_init__(self) -> None:
        if not 1 <= self.max_in_flight <= 64:
            raise ValueError(f"max_in_flight: must be within 1..64, got {self.max_in_flight}")
        if not 0 <= self.queue_size <= 4096:
            raise ValueError(f"queue_size: must be within 0..4096, got {self.queue_size}")
        _non_negative("min_retry_budget_ms", self.min_retry_budget_ms)
        _positive("drain_timeout_s", self.drain_timeout_s)
        _non_negative("reuse_max_age_ms", self.reuse_max_age_ms)


#: ``FusionConfig.radar_truck_returns`` on recordings of real sensors: chosen by
#: ``bench/bench_fusion_tuning.py`` on the nuScenes scene (5 radars, ARS 408). Of the radar clusters
#: within 4 m of a truck 28 % have >= 5 returns, of those near a car 7 %; with the rule, radar-only truck
#: AP went from 0 to 0.006 and fused mAP from 0.187 to 0.191 (4: 0.188, 6: 0.190, 8: 0.185).
RADAR_TRUCK_RETURNS_RECORDED = 5


@dataclass(frozen=True, slots=True)
class CameraGuidedConfig:
    """Camera-guided lidar objects (``fusion.camera_guided``; as Autoware's ``roi_cluster_fusion``).

    A camera detection that no lidar object explains takes the lidar points inside its frustum: the
    ground removed (``ground_height`` above ``base_link``'s ground plane), the points of objects already
    found left out, clustered along the ray (a gap over ``cluster_gap`` starts a new cluster); the
    nearest cluster whose depth agrees with the class's height-prior depth within ``depth_ratio`` wins,
    whatever its number of points (one is enough), and what lies behind it is occlusion. The box is the
    class's size prior, its near face on the cluster's nearest point and its centre on the detection's
    ray, ``width / 2 + face_offset * (length - width) / 2`` beyond the face (0: seen side-on, 1: end-on); its score is
    the camera's times ``score_factor``. Such objects name the pseudo-source ``camera_guided``.
    """

    #: On, and the settings below, by bench/bench_real.py (re-fusing one replay's outputs per setting; the
    #: scene, its two halves, KITTI and the simulated drive: bench/README.md).
    enabled: bool = True
    min_score: float = 0.1  # camera detections below it are not tried
    #: A detection overlapping an object's projected box by this IoU is that object, not tried (above the
    #: matching's own absorb threshold, 0.2: a far car behind parked ones overlaps their projections).
    absorb_iou: float = 0.6
    ground_height: float = 0.3  # m above base_link's ground plane: lower points are ground
    box_shrink: float = 0.25  # share of the 2D box width left out at each side (background bleeding in)
    cluster_gap: float = 1.0  # m along the ray between two clusters
    depth_ratio: float = 2.0  # the cluster's depth within [prior / ratio, prior * ratio] of the height prior's
    face_offset: float = 0.5  # see above: 0 places the centre half a width beyond the face, 1 half a length
    score_factor: float = 0.8
    max_depth: float = 60.0  # m

    def __post_init__(self) -> None:
        for name in ("min_score", "box_shrink", "face_offset", "absorb_iou"):
            value = getattr(self, name)
            if not 0 <= value <= (0.45 if name == "box_shrink" else 1):
                raise ValueError(f"{name}: must be within 0..{0.45 if name == 'box_shrink' else 1}, got {value}")
        if not 0 < self.score_factor <= 1:
            raise ValueError(f"score_factor: must be within (0, 1], got {self.score_factor}")
        if not -1.0 <= self.ground_height <= 2.0:
            raise ValueError(f"ground_height: must be within -1..2 m, got {self.ground_height}")
        if not 0 < self.cluster_gap <= 20:
            raise ValueError(f"cluster_gap: must be within (0, 20] m, got {self.cluster_gap}")
        if not self.depth_ratio >= 1:
            raise ValueError(f"depth_ratio: must be >= 1, got {self.depth_ratio}")
        if not 0 < self.max_depth <= 500:
            raise ValueError(f"max_depth: must be within (0, 500] m, got {self.max_depth}")


@dataclass(frozen=True, slots=True)
class FusionConfig:
    enabled: bool = True
    #: Objects scoring below it are not emitted. 0.15 by bench/bench_fusion_tuning.py (one run, the same
    #: model outputs re-fused): fused mAP 0.178 -> 0.187 on the nuScenes scene, 0.596 -> 0.663 on the
    #: simulated drive against 0.3; 0.1 gains nothing more. Scores are kept: filter higher downstream.
    score_threshold: float = 0.15
    nms_iou: float = 0.3
    radar_only: bool = True  # emit radar-only objects at lower confidence
    camera_only: bool = True  # emit camera-only objects (ground-plane depth) at lower confidence
    tracking: bool = True
    #: A confirmed track coasts through this many frames without a detection. 5 by bench/bench_real.py
    #: (issue 32): with the tracker's standing-still model a parked car's track no longer drifts while it
    #: coasts, and 3 lost to 5 on the simulated drive (mAP -0.013 beyond noise) and nowhere gained.
    track_max_misses: int = 5
    track_min_hits: int = 2  # detections before a track is confirmed (tentative tracks show at lower score)
    #: A radar-only object formed from at least this many radar returns (the radar model's ``RETURNS``,
    #: summed over the radars that see it) is a truck, whatever its RCS; 0 turns the rule off. How many
    #: returns a vehicle gives depends on the radar, so ``None`` picks by the drive's source
    #: (:meth:`for_drive`): :data:`RADAR_TRUCK_RETURNS_RECORDED` for a recording of real sensors (and
    #: for live input), off for the simulator, whose radar returns many points from every car.
    radar_truck_returns: int | None = None
    camera_guided: CameraGuidedConfig = CameraGuidedConfig()

    def __post_init__(self) -> None:
        if self.radar_truck_returns is not None and not 0 <= self.radar_truck_returns <= 10_000:
            raise ValueError(f"radar_truck_returns: must be within 0..10000, got {self.radar_truck_returns}")
        if not 0 <= self.score_threshold <= 1:
            raise ValueError(f"score_threshold: must be within 0..1, got {self.score_threshold}")
        if not 0 < self.nms_iou <= 1:
            raise ValueError(f"nms_iou: must be within (0, 1], got {self.nms_iou}")
        if self.track_max_misses < 0:
            raise ValueError(f"track_max_misses: must be >= 0, got {self.track_max_misses}")
        if not 1 <= self.track_min_hits <= 100:
            raise ValueError(f"track_min_hits: must be within 1..100, got {self.track_min_hits}")

    def for_drive(self, metadata: Mapping[str, str]) -> FusionConfig:
        """The fusion settings for a drive with this metadata: ``radar_truck_returns`` chosen by its
        source when the profile leaves it open (``None``)."""
        if self.radar_truck_returns is not None:
            return self
        return dataclasses.replace(self, radar_truck_returns=self.truck_returns(simulated=is_simulated(metadata)))

    def truck_returns(self, *, simulated: bool = False) -> int:
        """``radar_truck_returns`` as fusion applies it (``None``: by the source, see the field)."""
        if self.radar_truck_returns is not None:
            return self.radar_truck_returns
        return 0 if simulated else RADAR_TRUCK_RETURNS_RECORDED


@dataclass(frozen=True, slots=True)
class FaultConfig:
    """Client-side fault injection on one model (works against any Triton)."""

    model: str
    delay_ms: float = 0.0
    jitter_ms: float = 0.0
    error_probability: float = 0.0
    probability: float = 1.0  # probability the delay applies to a request

    def __post_init__(self) -> None:
        _non_negative("delay_ms", self.delay_ms)
        _non_negative("jitter_ms", self.jitter_ms)
        for name in ("error_probability", "probability"):
            value = getattr(self, name)
            if not 0 <= value <= 1:
                raise ValueError(f"{name}: must be within 0..1, got {value}")


@dataclass(frozen=True, slots=True)
class LiveConfig:
    """Live ingestion (:mod:`perception.live`): frames assembled on the host's monotonic clock.

    ``time_base``: what the samples' stamps are. ``monotonic``: the host's monotonic clock already;
    ``offset``: that clock plus ``offset_ms`` (a fixed, known offset such as PTP to monotonic);
    ``estimate``: another clock whose offset is estimated per sensor from arrival times (the smallest
    arrival - stamp over the last samples, so it absorbs the fastest transport delay) and re-anchored when
    it jumps by more than ``max_stamp_skew_ms``.
    """

    time_base: Literal["monotonic", "offset", "estimate"] = "monotonic"
    offset_ms: float = 0.0
    #: A stamp further than this from its arrival time (after the offset) is a clock jump: counted;
    #: re-anchored when estimating, dropped otherwise.
    max_stamp_skew_ms: float = 1000.0
    #: A frame waits for samples still in transit this long past its sync windows, at most.
    transit_ms: float = 20.0
    #: The trigger is silent after its period plus this: frames come from the timer until it is back.
    trigger_tolerance_ms: float = 50.0
    #: Samples pushed but not yet taken by the assembler; beyond it the oldest is dropped (counted).
    intake_queue: int = 1024
    #: A frame carries the odometry nearest its time only within this; past it the frame's ego motion is
    #: unknown (no pose, counted ``ego_stale``) rather than the last twist extrapolated over the gap.
    ego_max_age_ms: float = 300.0

    def __post_init__(self) -> None:
        _positive("max_stamp_skew_ms", self.max_stamp_skew_ms)
        _positive("ego_max_age_ms", self.ego_max_age_ms)
        _non_negative("transit_ms", self.transit_ms)
        _positive("trigger_tolerance_ms", self.trigger_tolerance_ms)
        if not 1 <= self.intake_queue <= 1_000_000:
            raise ValueError(f"intake_queue: must be within 1..1000000, got {self.intake_queue}")

    @property
    def offset_ns(self) -> int:
        return _ns(self.offset_ms)

    @property
    def max_stamp_skew_ns(self) -> int:
        return _ns(self.max_stamp_skew_ms)

    @property
    def transit_ns(self) -> int:
        return _ns(self.transit_ms)

    @property
    def trigger_tolerance_ns(self) -> int:
        return _ns(self.trigger_tolerance_ms)

    @property
    def ego_max_age_ns(self) -> int:
        return _ns(self.ego_max_age_ms)


def _check_topic(key: str, topic: str) -> None:
    """A ``ValueError`` at ``key`` unless ``topic`` is a full ROS 2 topic name as rmw checks it (what
    ``create_subscription`` raises on): ``/``, then ``/``-separated tokens of ASCII letters, digits and ``_``,
    none empty or starting with a digit; at most 247 characters."""
    problem = None
    if not topic.startswith("/"):
        problem = "must be an absolute topic name (/...)"
    elif len(topic) > 247:  # rmw's RMW_TOPIC_MAX_NAME_LENGTH (255 less its DDS prefix)
        problem = f"must be at most 247 characters long ({len(topic)})"
    elif not all(
        t and t.isascii() and (t[0].isalpha() or t[0] == "_") and t.replace("_", "a").isalnum()
        for t in topic[1:].split("/")
    ):
        problem = "must be a ROS 2 topic name: /-separated tokens of letters, digits and _, none starting with a digit"
    if problem is not None:
        raise ValueError(f"{key}: {problem}, got {topic!r}")


@dataclass(frozen=True, slots=True)
class RosConfig:
    """The ROS 2 node (``perception ros node``, :mod:`perception.ros`).

    ``topics``: a sensor's data topic (default ``/sensors/<name>/points`` for point clouds and
    ``/sensors/<name>/image/compressed`` for cameras); a camera topic not ending in ``/compressed`` is
    subscribed as a raw ``sensor_msgs/Image``. These and ``odometry_topic`` are full ROS 2 topic names.
    ``field_map``: a ``PointCloud2`` field name -> the kind's point field it carries (e.g.
    ``{doppler: radial_velocity}``); unmapped names are taken as they are.
    Diagnostics: a sensor (or the frame budget) is WARN when at least ``warn_rate`` of the last
    ``diagnostics_window`` frames were not ok for it (deadline missed), ERROR from ``error_rate``.
    """

    topics: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    odometry_topic: str = "/odometry"
    field_map: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    frame_id: str = "base_link"  # of the published objects (detections are in base_link)
    diagnostics_period_ms: float = 1000.0
    diagnostics_window: int = 50
    warn_rate: float = 0.1
    error_rate: float = 0.5

    def __post_init__(self) -> None:
        _positive("diagnostics_period_ms", self.diagnostics_period_ms)
        if self.diagnostics_window < 1:
            raise ValueError(f"diagnostics_window: must be >= 1, got {self.diagnostics_window}")
        for name in ("warn_rate", "error_rate"):
            value = getattr(self, name)
            if not 0.0 < value <= 1.0:
                raise ValueError(f"{name}: must be within (0, 1], got {value}")
        if self.error_rate < self.warn_rate:
            raise ValueError(f"error_rate: must be >= warn_rate ({self.warn_rate}), got {self.error_rate}")
        for sensor, topic in self.topics.items():
            _check_topic(f"topics.{sensor}", topic)
        _check_topic("odometry_topic", self.odometry_topic)


#: What a key of a sensor rig's (launch/rigs/) says in a launch profile: the one file given for the other.
_A_RIG = (
    "a sensor rig's key: this file is a rig (launch/rigs/: perception sim --rig, perception ros node --rig), "
    "not a launch profile (launch/replay.yaml: --config)"
)


@dataclass(frozen=True, slots=True)
class RuntimeConfig:
    """The launch profile.

    ``sensors`` empty means *the drive's sensors*: every sensor of the rig it runs on, served by
    ``sensor_defaults`` for its kind (:func:`perception.config.resolve_sensors`). A listed sensor is
    used as listed, and then only the listed sensors run.
    """

    #: Keys a profile does not have, with what to do instead (the converter's message for them).
    NOT_KEYS: ClassVar[Mapping[str, str]] = MappingProxyType(
        {
            "output": "a run's outputs are given on the command line: --out DIR (perception replay writes "
            "DIR/fused.mcap unless --no-fused-mcap)",
            "source": "the profile's own file is its source; the drive is given on the command line",
            **dict.fromkeys(("name", "ego_pose_rate_hz", "ground_truth_rate_hz"), _A_RIG),
        }
    )

    sensors: tuple[SensorConfig, ...] = ()
    trigger: TriggerConfig = field(default_factory=TriggerConfig)
    sensor_defaults: SensorDefaults = field(default_factory=SensorDefaults)
    server: ServerConfig = field(default_factory=ServerConfig)
    #: No ``budget:`` section: the 2-core host's, recordings of real sensors included (class docs).
    budget: BudgetConfig = field(default_factory=lambda: BudgetConfig(recorded_total_ms=RECORDED_TOTAL_MS))
    pipeline: PipelineConfig = field(default_factory=PipelineConfig)
    fusion: FusionConfig = field(default_factory=FusionConfig)
    faults: tuple[FaultConfig, ...] = ()
    live: LiveConfig = field(default_factory=LiveConfig)
    ros: RosConfig = field(default_factory=RosConfig)
    #: The YAML file this came from (for messages): set by the loader, not a key of the profile.
    source: Path | None = field(default=None, metadata={"yaml": False})

    def __post_init__(self) -> None:
        reject_duplicates([s.name for s in self.sensors], "sensors", "name", "sensor name")
        reject_duplicates([f.model for f in self.faults], "faults", "model", "fault model")
        seen = {s.name for s in self.sensors}
        if self.sensors and self.trigger.sensor is not None and self.trigger.sensor not in seen:
            raise ValueError(
                f"trigger: sensor {self.trigger.sensor!r} is not one of the sensors ({', '.join(sorted(seen))})"
            )
        if self.sensors:
            problem = reference_problem(self, self.sensors)
            if problem is not None:
                raise ValueError(": ".join(problem))

    @property
    def resolved(self) -> bool:
        """True when the sensors and the trigger are known (not left to the drive)."""
        return bool(self.sensors) and (self.trigger.sensor is not None or self.trigger.rate_hz is not None)

    def sensor(self, name: str) -> SensorConfig:
        for s in self.sensors:
            if s.name == name:
                return s
        raise KeyError(name)

    @property
    def active_sensors(self) -> tuple[SensorConfig, ...]:
        return tuple(s for s in self.sensors if s.enabled)


def required_sensors_problem(required: Sequence[str], names: Sequence[str]) -> str | None:
    """What is wrong with ``pipeline.required_sensors`` (``required``) given the sensors ``names``, or ``None``:
    a name that is none of them."""
    unknown = [name for name in required if name not in names]
    if not unknown:
        return None
    return f"{', '.join(map(repr, unknown))} is not a configured sensor (configured: {', '.join(names)})"


def reference_problem(config: RuntimeConfig, sensors: Sequence[SensorConfig]) -> tuple[str, str] | None:
    """``(key, message)`` of the first name in ``config`` that ``sensors`` do not know, or ``None``: a
    ``pipeline.required_sensors`` entry that is none of them, a fault on a model none of them uses (it
    never applied: the run it was to probe looked as if it had passed). Checked once the sensors are
    known: a profile's own (:class:`RuntimeConfig`), or the drive's (:func:`perception.config.resolve_sensors`)."""
    required = required_sensors_problem(config.pipeline.required_sensors, [s.name for s in sensors])
    if required is not None:
        return "pipeline.required_sensors", required
    models = {s.model for s in sensors}
    for i, fault in enumerate(config.faults):
        if fault.model not in models:
            used = ", ".join(sorted(models))
            return f"faults[{i}].model", f"no sensor uses model {fault.model!r} (the sensors' models: {used})"
    return None
