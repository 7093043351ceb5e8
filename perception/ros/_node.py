"""``perception_fusion``: the runtime as a ROS 2 lifecycle node, built on :class:`perception.live.LiveRuntime`.

Lifecycle (what each transition holds and releases):

* **configure** — loads the profile and the rig (a drive or a simulator rig file), assembles the
  session against it (:class:`Session`, as every entry point does), resolves each sensor's topic,
  starts the embedded Triton (unless the profile names a server) and checks every model's readiness
  and tensor contract by opening the runtime once; creates the publishers;
* **activate** — opens the :class:`LiveRuntime` on that server and subscribes (sensor-data QoS);
* **deactivate** — unsubscribes and closes the live runtime (pending frames are completed and drained;
  channels, shared memory and threads released; a reopen under way given up);
* **cleanup** — destroys the publishers and stops the embedded server. Shutdown from any state does
  whatever of this is still held.

Callbacks only convert the message (a view of its buffer) and call :meth:`LiveRuntime.push`, which never
blocks (while a reopen hands its held messages over, a callback waits for it: :meth:`FusionNode._rewind`);
results are published from the live runtime's callback thread. A message that cannot be taken,
whatever the exception, is an input error of its sensor (:meth:`FusionNode.inputs`): counted in
``/diagnostics``, logged at a bounded rate, never raised into the executor.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import anyio
from anyio.from_thread import start_blocking_portal
from builtin_interfaces.msg import Duration, Time
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from geometry_msgs.msg import Point
from nav_msgs.msg import Odometry
from rclpy.clock import JumpThreshold
from rclpy.duration import Duration as RosDuration
from rclpy.exceptions import InvalidParameterTypeException
from rclpy.lifecycle import LifecycleNode, LifecycleState, TransitionCallbackReturn
from rclpy.parameter import Parameter
from rclpy.qos import qos_profile_sensor_data
from sensor_msgs.msg import CameraInfo, CompressedImage, Image, PointCloud2
from std_msgs.msg import Float64, Header
from visualization_msgs import msg as viz_msgs

from perception.config import LiveConfig, RuntimeConfig, load_config, sensor_names, with_overrides
from perception.errors import ConfigError, InputError, PerceptionError, RuntimeClosedError
from perception.kinds import SensorKindDef, ego_problem, kind_def, sample_problem
from perception.live import HOST_CLOCK, LiveRuntime, check_trigger
from perception.record import RunRecorder
from perception.ros._convert import (
    calibration_mismatch,
    cloud_to_sample,
    compressed_to_sample,
    odometry_to_ego,
    raw_to_sample,
    stamp_ns,
    to_stamp,
)
from perception.ros._diagnostics import ERROR, DiagnosticsTracker, Status
from perception.ros._markers import detections_array, marker_array
from perception.ros._topics import SensorTopics, sensor_topics
from perception.scheduler import RunObserver, Runtime, Session, ThreadHost
from perception.types import EgoPose, FrameResult, FrameStatus, Sample, SensorSpec, SessionSource

if TYPE_CHECKING:
    from perception.server import EmbeddedTriton

__all__ = ["NODE_NAME", "FusionNode", "rig_session", "rig_source"]

log = logging.getLogger(__name__)

NODE_NAME = "perception_fusion"
_MAX_ARRIVALS = 1024
_MAX_ERROR_CHARS = 400  # an input error as /diagnostics and the log say it


def _vision_msgs() -> Any:
    """``vision_msgs.msg`` where the host has it (no wheel on PyPI), else None."""
    try:
        return importlib.import_module("vision_msgs.msg")
    except ImportError:
        return None


@dataclasses.dataclass(frozen=True)
class _Publishers:
    objects: Any
    processing: Any
    pipeline: Any
    diagnostics: Any
    detections: Any  # None without vision_msgs

    def all(self) -> list[Any]:
        return [p for p in (self.objects, self.processing, self.pipeline, self.diagnostics, self.detections) if p]


class _Markers:
    """``visualization_msgs.msg`` with ``Point`` (what :func:`marker_array` builds from)."""

    MarkerArray = viz_msgs.MarkerArray
    Marker = viz_msgs.Marker
    Point = Point


def rig_source(path: Path) -> SessionSource:
    """The node's source: the rig of a drive (``.mcap``: the rig it was recorded with, resolved as that
    drive is) or of a simulator rig file (``.yaml``: resolved as a drive of the simulator). Its poses
    come from the host (``/odom``), never from a file."""
    if not path.exists():
        raise ConfigError("rig not found (a drive .mcap or a rig .yaml)", file=str(path))
    if path.is_dir():  # it said "is a directory, expected a YAML file" (a ROS 2 bag's too: its drive has the rig)
        bag = (
            " (a ROS 2 bag: import it, perception import ros2, and give the drive)"
            if (path / "metadata.yaml").is_file()
            else ""
        )
        raise ConfigError(f"is a directory, expected a drive (.mcap) or a rig file (.yaml){bag}", file=str(path))
    if path.suffix == ".mcap":
        from perception.drives import DriveReader

        with DriveReader(path, strict=False) as reader:
            return dataclasses.replace(reader.source, ego_at=None, gt_at=None)
    from perception.sim import load_rig as load_sim_rig

    return SessionSource.simulated({s.name: s.spec for s in load_sim_rig(path).sensors}, name=f"rig {path}")


def rig_session(path: Path, config: RuntimeConfig) -> Session:
    """The profile assembled against the rig at ``path`` (:func:`rig_source`), as every entry point
    assembles its session (:meth:`Session.assemble`)."""
    return Session.assemble(config, rig_source(path))


def frame_processing_ms(result: FrameResult, arrival_ns: int | None, now_ns: int) -> float | None:
    """``~/debug/processing_time_ms`` of a frame: from its trigger message's arrival at the node to now
    (its outputs); a frame the timer opened (trigger silent) has no trigger message: its own processing
    time. ``None`` (nothing published) for such a frame dropped before any processing: it had none, and
    a 0 would read as a frame processed in no time."""
    if arrival_ns is not None:
        return (now_ns - arrival_ns) / 1e6
    if result.latency.total_ns <= 0:
        return None
    return result.latency.total_ns / 1e6


def ros_time_base(live: LiveConfig, ros_minus_mono: int) -> tuple[LiveConfig, int]:
    """``live`` for stamps on the node's ROS clock, and the offset that takes a frame's host time to its ROS
    stamp. ``ros_minus_mono``: ROS now - monotonic now. With ``time_base: offset`` the live runtime adds
    ``-ros_minus_mono`` to each stamp as ``offset_ms`` (a float of some 1e12 ms: its ``offset_ns`` can be
    ~100 ns off): the value returned inverts exactly that, so a frame's published stamp is its trigger's."""
    if live.time_base != "offset":
        return live, ros_minus_mono
    # host (monotonic) = stamp + (monotonic - ROS now)
    live = dataclasses.replace(live, offset_ms=-ros_minus_mono / 1e6)
    return live, -live.offset_ns


def _intake_checked(sample: Sample, kind: SensorKindDef) -> Sample:
    """``sample``, or an :class:`InputError` saying why the live runtime's intake check would refuse it
    (counted here, against the sensor, where the node sees it)."""
    if (problem := sample_problem(sample, kind)) is not None:
        raise InputError(problem, sensor=sample.sensor)
    return sample


@contextlib.asynccontextmanager
async def _supervised(server: EmbeddedTriton, restarts: int) -> AsyncIterator[EmbeddedTriton]:
    """The embedded server and, while it runs, its supervisor: a crash of Triton is restarted on its
    ports (:meth:`~perception.server.EmbeddedTriton.supervise`), at most ``restarts`` times."""
    async with server, anyio.create_task_group() as tg:
        if restarts:
            tg.start_soon(server.supervise, restarts)
        yield server
        tg.cancel_scope.cancel()  # before the stop (which the supervisor would also take for no crash)


class FusionNode(LifecycleNode):
    """The lifecycle node (see module docs). Parameters: ``profile``, ``rig``, ``url`` (empty: the
    profile's server), ``sensors`` (comma-separated subset, empty: all), ``time_base`` (``auto``:
    the ROS clock mapped by its offset to the host's monotonic clock, or ``estimate`` when the profile
    says so; on simulated time the live assembly runs on the ROS clock itself, reopened when it goes back),
    and after configure ``topics.<sensor>`` and ``odometry_topic``: the profile's of that configure,
    unless set (``--ros-args -p``, ``parameter_overrides``, or set since, which is kept). ``defaults``: other
    defaults of the first five (``--ros-args -p`` and ``parameter_overrides`` override them). A parameter given
    that the node does not declare is named in a warning at configure; one of its own set while it is configured
    is taken at the next configure, with a warning."""

    def __init__(
        self,
        *,
        on_published: Callable[[FrameResult], None] | None = None,
        observer: RunObserver | None = None,
        defaults: Mapping[str, str] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(NODE_NAME, **kwargs)
        self._observer = observer  # each activation's live runtime's (a recorder)
        given = dict(defaults or {})
        for name, default in (("profile", ""), ("rig", ""), ("url", ""), ("sensors", ""), ("time_base", "auto")):
            self._declare(name, given.pop(name, default))
        if given:
            raise ValueError(f"no such parameter: {', '.join(given)}")
        #: The topic parameters this node declared with the profile's value (or an override), none set since:
        #: each configure declares them again, from its profile.
        self._from_profile: set[str] = set()
        self._declaring = False
        self.add_post_set_parameters_callback(self._parameters_set)
        self._on_published = on_published
        self.config: RuntimeConfig | None = None
        self.rig: dict[str, SensorSpec] = {}
        #: The profile assembled against the rig at configure (its source is the live runtime's).
        self.session: Session | None = None
        self.topics: dict[str, SensorTopics] = {}
        self.odometry_topic = ""
        self.live: LiveRuntime | None = None
        #: The embedded server (and its supervisor) on an event-loop thread, from configure to cleanup.
        self._server: ThreadHost[EmbeddedTriton] | None = None
        self._pubs: _Publishers | None = None
        self._subs: list[Any] = []
        self._timer: Any = None
        self._vision = _vision_msgs()
        self._diag: DiagnosticsTracker | None = None
        self._active = False
        self._ros_minus_mono = 0
        #: On simulated time: the ROS clock's jump callback, and whether it went back since the live runtime opened.
        self._jumps: Any = None
        self._rewound = False
        #: While a live runtime reopens (the clock went back): what came meanwhile (a sample or an ego pose, with
        #: its arrival on the ROS clock and the monotonic one), pushed into the new one once open (at most
        #: ``live.intake_queue``; the rest counted), and the thread reopening it.
        self._held: list[tuple[Sample | EgoPose, int, int]] | None = None
        self._reopening: threading.Thread | None = None
        #: The live runtime a reopen is opening (a deactivate gives its open up: LiveRuntime.cancel_open), and
        #: whether a deactivate is under way (a reopen opens none then).
        self._opening: LiveRuntime | None = None
        self._deactivating = False
        #: The live runtime found stopped serving (a push refused, RuntimeClosedError): said once.
        self._dead_said: LiveRuntime | None = None
        #: Reopens after a failure back off (:meth:`_backoff`): none before this (monotonic s), the next wait.
        self._reopen_after = 0.0
        self._reopen_delay = 0.0
        #: Whether the live runtimes run on the ROS clock (use_sim_time, at activate): what a held message's
        #: arrival is read on (:meth:`_hold`).
        self._sim_time = False
        #: Per frame a trigger message opened (by id, till published): its arrival (monotonic) and header stamp.
        self._arrivals: dict[int, tuple[int, int]] = {}
        self._seq: dict[str, int] = {}
        self._info_checked: set[str] = set()
        self._lock = threading.Lock()
        self.frames_published = 0
        #: Why the last configure or activate failed (it is logged, and the transition returns FAILURE).
        self.failure: PerceptionError | None = None

    # -- lifecycle --------------------------------------------------------------------------------
    def on_configure(self, state: LifecycleState) -> TransitionCallbackReturn:
        try:
            self._configure()
        except Exception as exc:  # rclpy takes any other exception to ERROR, silently
            self._failed("configure", exc)
            self._release_server()
            return TransitionCallbackReturn.FAILURE
        return TransitionCallbackReturn.SUCCESS

    def on_activate(self, state: LifecycleState) -> TransitionCallbackReturn:
        try:
            self._activate()
        except Exception as exc:  # as configure's
            self._failed("activate", exc)
            self._deactivate()
            return TransitionCallbackReturn.FAILURE
        return TransitionCallbackReturn.SUCCESS

    def _failed(self, transition: str, exc: Exception) -> None:
        """``exc`` as :attr:`failure`, logged: a :class:`PerceptionError` as it is, another exception (a
        fault of the node or of rclpy) as a :class:`PerceptionError` naming it (its traceback in the debug log)."""
        if isinstance(exc, PerceptionError):
            self.failure = exc
            self.get_logger().error(f"{transition} failed: {exc}")
            return
        self.failure = PerceptionError(f"{type(exc).__name__}: {exc}")
        self.get_logger().error(f"{transition} failed: {self.failure}")
        log.debug("%s failed", transition, exc_info=exc)

    def on_deactivate(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._deactivate()
        return TransitionCallbackReturn.SUCCESS

    def on_cleanup(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._cleanup()
        return TransitionCallbackReturn.SUCCESS

    def on_shutdown(self, state: LifecycleState) -> TransitionCallbackReturn:
        self.release()
        return TransitionCallbackReturn.SUCCESS

    def on_error(self, state: LifecycleState) -> TransitionCallbackReturn:
        self.release()
        return TransitionCallbackReturn.SUCCESS

    def release(self) -> None:
        """Everything still held, whatever the state (shutdown, a signal)."""
        self._deactivate()
        self._cleanup()

    # -- configure ----------------------------------------------------------------------------------
    def _declare(self, name: str, default: str) -> None:
        """A string parameter; a value of another type set for it (``-p time_base:=5``) is a
        :class:`ConfigError` naming it (rclpy's exception escaped the constructor as a traceback, and
        configure as an ERROR transition that logged nothing)."""
        try:
            self.declare_parameter(name, default)
        except InvalidParameterTypeException as exc:
            raise ConfigError(f"must be a string ({exc.args[0]})", key=name) from exc

    def _param(self, name: str) -> str:
        return str(self.get_parameter(name).value or "")

    def _declare_from_profile(self, name: str, default: str) -> None:
        """A topic parameter, the profile's ``default`` unless overridden (overrides apply at each declare)."""
        self._declaring = True
        try:
            self._declare(name, default)
        finally:
            self._declaring = False
        self._from_profile.add(name)

    def _parameters_set(self, parameters: list[Parameter[Any]]) -> None:
        """A topic parameter set from outside (``ros2 param set``, :meth:`set_parameters`) is the user's: kept.
        One of the node's set while it is configured is taken at the next configure: a warning says so."""
        if self._declaring:
            return
        self._from_profile.difference_update(p.name for p in parameters)
        own = [p.name for p in parameters if p.name in self._own_parameters()]
        if own and self.config is not None:
            self.get_logger().warning(
                f"parameter {', '.join(own)} set: it takes effect at the next configure (the node is configured: "
                "deactivate and clean it up, then configure)"
            )

    def _own_parameters(self) -> list[str]:
        """The parameters this node reads (declared so far), not rclpy's own (``use_sim_time``...)."""
        topics = sorted(f"topics.{n}" for n in self.get_parameters_by_prefix("topics"))
        fixed = ["profile", "rig", "url", "sensors", "time_base", *topics]
        return fixed + (["odometry_topic"] if self.has_parameter("odometry_topic") else [])

    def _warn_unused(self) -> None:
        """Name the parameters given (``-p``, a parameters file, ``parameter_overrides``) that the node does not
        declare: a misspelt name was dropped without a word."""
        unused = sorted(n for n in self._parameter_overrides if not self.has_parameter(n))
        if unused:
            self.get_logger().warning(
                f"parameters not used: {', '.join(unused)} (the node's: {', '.join(self._own_parameters())})"
            )

    def _configure(self) -> None:
        # Each configure checks each camera's first camera_info against the rig it loads (it was once per node:
        # a reconfigure with another camera or rig went unchecked).
        self._info_checked.clear()
        for name in self._from_profile:  # a previous configure's profile's: this one's are declared below
            self.undeclare_parameter(name)
        self._from_profile.clear()
        if not self._param("profile"):
            raise ConfigError("parameter 'profile' is required: a launch profile (.yaml)", key="profile")
        profile = Path(self._param("profile"))
        rig_path = self._param("rig")
        if not rig_path:
            raise ConfigError("parameter 'rig' is required: a drive (.mcap) or a rig file (.yaml)", key="rig")
        given = self._param("sensors")  # empty: every sensor; spaces around a name are not part of it
        sensors = sensor_names(given, key="sensors") if given.strip() else None
        session = rig_session(Path(rig_path), load_config(profile))
        session = session.with_overrides(url=self._param("url") or None, sensors=sensors)
        cfg, rig = session.config, dict(session.rig)
        chosen = self._param("time_base")
        if chosen not in ("auto", "offset", "estimate"):
            raise ConfigError(f"must be auto, offset or estimate, got {chosen!r}", key="time_base")
        time_base: Literal["offset", "estimate"] = "offset"
        if chosen == "estimate" or (chosen == "auto" and cfg.live.time_base == "estimate"):
            time_base = "estimate"
        cfg = dataclasses.replace(cfg, live=dataclasses.replace(cfg.live, time_base=time_base))
        topics = sensor_topics(rig, cfg.ros, file=str(profile))
        active = {s.name for s in cfg.active_sensors}
        check_trigger([s.name for s in cfg.active_sensors], cfg.trigger)  # at configure, not only at activate
        chosen_topics: dict[str, str] = {}
        for name, t in topics.items():
            if name in active:
                param = f"topics.{name}"
                if not self.has_parameter(param):
                    self._declare_from_profile(param, t.data)
                chosen_topics[name] = self._param(param)
        if not self.has_parameter("odometry_topic"):
            self._declare_from_profile("odometry_topic", cfg.ros.odometry_topic)
        try:  # the parameters' topics, checked as the profile's are
            ros = dataclasses.replace(
                cfg.ros, topics={**cfg.ros.topics, **chosen_topics}, odometry_topic=self._param("odometry_topic")
            )
        except ValueError as exc:  # "topics.<sensor>: ..." or "odometry_topic: ...": the parameter's name
            key, _, why = str(exc).partition(": ")
            raise ConfigError(why, key=key) from None
        cfg = dataclasses.replace(cfg, ros=ros)
        self._warn_unused()
        self.topics = {name: t for name, t in sensor_topics(rig, ros).items() if name in chosen_topics}
        self.odometry_topic = ros.odometry_topic
        self.rig = rig
        if cfg.server.embedded:
            cfg = with_overrides(cfg, url=self._start_server(cfg))
        self.config = cfg
        self.session = dataclasses.replace(session, config=cfg)
        self._check_models(self.session)
        self._diag = DiagnosticsTracker(self.get_name(), list(self.topics), cfg.ros)
        self._pubs = _Publishers(
            objects=self.create_publisher(viz_msgs.MarkerArray, "~/objects", 10),
            processing=self.create_publisher(Float64, "~/debug/processing_time_ms", 10),
            pipeline=self.create_publisher(Float64, "~/debug/pipeline_latency_ms", 10),
            diagnostics=self.create_publisher(DiagnosticArray, "/diagnostics", 10),
            detections=None
            if self._vision is None
            else self.create_publisher(self._vision.Detection3DArray, "~/detections", 10),
        )
        self.get_logger().info(
            f"configured: {len(self.topics)} sensors on {cfg.server.url} (trigger {cfg.trigger.sensor}), "
            f"time base {time_base}"
        )

    def _start_server(self, cfg: RuntimeConfig) -> str:
        from perception.server import EmbeddedTriton

        server = EmbeddedTriton(list(cfg.server.models), startup_timeout_s=cfg.server.startup_timeout_s)
        # The host's thread spawns the server and lives until cleanup (the server's parent-death signal
        # is tied to that thread). An error starting it is raised with the thread stopped.
        host = ThreadHost(lambda: _supervised(server, cfg.server.restarts), name="ros-triton")
        host.open()
        self._server = host
        return server.grpc_url

    def _check_models(self, session: Session) -> None:
        """Readiness and tensor contract of every model (the runtime's start-up checks), then closed."""

        async def check() -> None:
            async with Runtime(session):
                pass

        if self._server is not None:
            self._server.portal.call(check)
        else:
            with start_blocking_portal(backend="asyncio") as portal:
                portal.call(check)

    def _release_server(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.close(0.0)  # no frames to drain: the server's stop, bounded

    def _cleanup(self) -> None:
        pubs, self._pubs = self._pubs, None
        for pub in pubs.all() if pubs is not None else ():
            self.destroy_publisher(pub)
        self._release_server()
        self.config = None

    # -- activate -------------------------------------------------------------------------------------
    def waiting_for_clock(self) -> bool:
        """Whether the node is on simulated time (``use_sim_time``) and no ``/clock`` has come yet: its ROS
        clock reads 0, and an offset to the host clock measured on it would place every stamp decades off."""
        return bool(self.get_parameter("use_sim_time").value) and self.get_clock().now().nanoseconds == 0

    def _activate(self) -> None:
        cfg = self.config
        assert cfg is not None and self._diag is not None
        if self.waiting_for_clock():  # every sample was dropped as a clock jump, /diagnostics "ok"
            raise PerceptionError(
                "use_sim_time is true and no /clock has been received: start the clock (ros2 bag play --clock), "
                "then activate"
            )
        self._deactivating = False
        self._reopen_after = self._reopen_delay = 0.0
        self._sim_time = bool(self.get_parameter("use_sim_time").value)
        self._open_live(cfg)
        if self._sim_time:  # each /clock: forward, or back (a bag played --loop, or again)
            one, back = RosDuration(nanoseconds=1), RosDuration(nanoseconds=-1)
            threshold = JumpThreshold(min_forward=one, min_backward=back, on_clock_change=False)
            self._jumps = self.get_clock().create_jump_callback(threshold, post_callback=self._clock_jumped)
        self._active = True
        for msg_type, topic, callback in self.inputs():
            self._subs.append(self.create_subscription(msg_type, topic, callback, qos_profile_sensor_data))
        self._timer = self.create_timer(cfg.ros.diagnostics_period_ms / 1000.0, self._publish_diagnostics)
        self.get_logger().info(f"active: {len(self.topics)} sensor topics, odometry on {self.odometry_topic}")

    def _open_live(self, cfg: RuntimeConfig) -> None:
        """A new live runtime (:meth:`_new_live`) as :attr:`live`."""
        self.live = self._new_live(cfg)
        self._rewound = False

    def _new_live(self, cfg: RuntimeConfig) -> LiveRuntime:
        """A new live runtime on ``cfg``'s session, open: on simulated time (``use_sim_time``: a bag's ``/clock``, at
        any rate, paused) its assembly runs on the ROS clock itself, which the stamps are on (an offset to the
        monotonic clock measured once drifted past ``live.max_stamp_skew_ms`` at any rate but 1: every sample
        after was dropped as a clock jump); else on the monotonic clock, the stamps mapped by the offset of
        the ROS clock to it now (:func:`ros_time_base`)."""
        assert self._diag is not None and self.session is not None
        clock: Callable[[], int] | None = None
        clock_name = HOST_CLOCK
        # the node sets live.time_base (offset_ms too) from its parameter: what stamps on another clock need is that
        remedy = "the node's parameter time_base: estimate (-p time_base:=estimate)"
        if self.get_parameter("use_sim_time").value:
            clock_name = "the node's ROS clock (use_sim_time: /clock)"
            ros_clock = self.get_clock()

            def clock() -> int:
                return int(ros_clock.now().nanoseconds)

            live_cfg, self._ros_minus_mono = ros_time_base(cfg.live, 0)
        else:
            ros_now, mono_now = self.get_clock().now().nanoseconds, time.monotonic_ns()
            live_cfg, self._ros_minus_mono = ros_time_base(cfg.live, ros_now - mono_now)
            remedy += "; a bag's, its /clock (ros2 bag play --clock) and -p use_sim_time:=true"
        cfg = dataclasses.replace(cfg, live=live_cfg)
        # the session's source, resolved as configure resolved it (the config already is)
        live = LiveRuntime(
            cfg,
            self.session.source,
            on_result=self._publish,
            observer=self._observer,
            clock=clock,
            clock_name=clock_name,
            time_base_remedy=remedy,
        )
        self._opening = live
        if self._deactivating:  # a deactivate that looked before _opening was set: it gives up here
            live.cancel_open()
        try:
            live.__enter__()
        finally:
            self._opening = None
        self._arrivals.clear()
        return live

    def _close_live(self, live: LiveRuntime) -> None:
        """``live`` closed (its pending frames completed and published), no longer the node's: its counts kept in
        ``/diagnostics``' (the next runtime's count from 0), also when its close raised."""
        try:
            live.close()
        finally:
            if self._diag is not None:
                self._diag.live_closed(live.status())

    def _clock_jumped(self, jump: Any) -> None:
        """The ROS clock's jump callback, at each ``/clock`` (it must not block): forward, the live runtime makes
        the frames due by it now; back, it is replaced (:meth:`_rewind`)."""
        if jump.delta.nanoseconds < 0:
            self._rewound = True
            try:
                self._rewind()  # starts the reopen (it does not wait for it)
            except Exception as exc:  # (no thread for it): the next input tries again, the executor goes on
                self.get_logger().error(f"the live runtime could not be reopened: {exc}")
        elif (live := self.live) is not None:
            live.clock_moved()

    def _rewind(self) -> None:
        """Simulated time went back (a bag played ``--loop``, or again): the stamps that come now are behind
        those taken, every sample would be dropped as out of order, and the frames pending would wait for
        their deadlines until the clock came back to them. The live runtime is closed (its pending frames
        completed and published) and a new one opened: a new drive, its tracker fresh. That takes a few hundred
        ms (the runtime's open), on a thread of its own: the executor goes on taking messages (blocked, the
        subscriptions' queues of 5 dropped what came meanwhile, uncounted), held till the new runtime is open
        (:meth:`_hold`). Opening it may raise (the server gone): logged, what was held counted dropped, and the
        next input tries again. The same replaces a live runtime found stopped serving (:meth:`_take`)."""
        with self._lock:
            cfg, live = self.config, self.live
            if cfg is None or not self._active or self._deactivating or self._held is not None:
                return
            if time.monotonic() < self._reopen_after:  # backing off after a failure (_backoff)
                return
            self._rewound = False
            self.live = None
            self._held = []
            reopening = self._reopening = threading.Thread(
                target=self._reopen, args=(cfg, live), name="ros-reopen", daemon=True
            )
        self.get_logger().warning("live runtime reopening (the ROS clock went back, or the runtime stopped serving)")
        try:
            reopening.start()
        except BaseException:  # no thread: as it was, the next input tries again
            with self._lock:
                self.live, self._held, self._reopening, self._rewound = live, None, None, True
            raise

    def _reopen(self, cfg: RuntimeConfig, old: LiveRuntime | None) -> None:
        """The reopen thread: ``old`` closed, a new live runtime opened and given what was held meanwhile."""
        t0 = time.monotonic()
        live: LiveRuntime | None = None
        held: list[tuple[Sample | EgoPose, int, int]] = []
        try:
            if old is not None:
                self._close_live(old)
            if not self._deactivating:
                live = self._new_live(cfg)
        except Exception as exc:
            if not self._deactivating:
                delay = self._backoff()
                self.get_logger().error(f"the live runtime could not be reopened (tried again in {delay:g} s): {exc}")
            log.debug("reopen failed", exc_info=exc)
        finally:
            with self._lock:
                # what was held goes in before any message after it: the executor's next message waits in _hold
                # for this lock, and reads the new runtime only once _held is None (not before it is set). In one
                # batch: the frames the held messages open are due at once (their stamps are old), and are made
                # with all of them; their budgets start now (held, they would be spent before they began), their
                # arrivals on the runtime's clock kept (the stamps are aligned on them). The node's runtime first:
                # one that refuses them as closed (it failed at once) is found stopped serving (_stopped_serving)
                held = self._held or []
                try:
                    if live is None:
                        self._rewound = True
                    else:
                        self.live = live
                        handed = time.monotonic_ns()
                        with live.batch():
                            for sample, runtime_ns, arrival_ns in held:
                                try:
                                    self._take(live, sample, arrival_ns, (runtime_ns, handed))
                                except Exception as exc:  # refused by the intake: counted as at its subscription
                                    sensor = None if isinstance(sample, EgoPose) else sample.sensor
                                    t = self.topics.get(sensor) if sensor is not None else None
                                    topic = self.odometry_topic if t is None else t.data
                                    self._input_error(sensor, topic, f"held {type(sample).__name__}", exc)
                finally:
                    self._held = None
        if live is None:
            self._dropped_reopening(held)
        else:
            self.get_logger().info(
                f"live runtime reopened in {time.monotonic() - t0:.2f} s: {len(held)} message(s) held meanwhile taken"
            )

    def _backoff(self) -> float:
        """A reopen failed, or the runtime it opened stopped serving: the next waits 0.5 s, then twice as long
        each time, at most 30 s (reset once a frame is published); the messages meanwhile are counted
        (``dropped_reopening``). Returns the wait."""
        self._reopen_delay = min(30.0, max(0.5, 2 * self._reopen_delay))
        self._reopen_after = time.monotonic() + self._reopen_delay
        return self._reopen_delay

    def _hold(self, sample: Sample | EgoPose, arrival_ns: int) -> bool:
        """``sample`` (an ego pose), arrived at ``arrival_ns`` (monotonic), held while the live runtime reopens
        (False: none is reopening), its arrival read on the runtime's clock too (the ROS clock on simulated time,
        else the monotonic one); one past ``live.intake_queue`` held is counted dropped."""
        if self._held is None:
            return False
        item = (sample, self.get_clock().now().nanoseconds if self._sim_time else arrival_ns, arrival_ns)
        with self._lock:
            held = self._held
            if held is None:
                return False
            if self.config is not None and len(held) < self.config.live.intake_queue:
                held.append(item)
                return True
        self._dropped_reopening([item])
        return True

    def _dropped_reopening(self, items: list[tuple[Sample | EgoPose, int, int]]) -> None:
        """``items``, not taken by a reopen (past its hold, or it failed): counted per sensor in ``/diagnostics``."""
        if self._diag is None:
            return
        for sample, _, _ in items:
            self._diag.dropped_reopening(None if isinstance(sample, EgoPose) else sample.sensor)

    def _deactivate(self) -> None:
        if self._jumps is not None:
            self._jumps.unregister()
            self._jumps = None
        for sub in self._subs:
            self.destroy_subscription(sub)
        self._subs = []
        if self._timer is not None:
            self.destroy_timer(self._timer)
            self._timer = None
        self._deactivating = True  # a reopen opens no runtime now, and one opening gives up
        try:
            reopening, self._reopening = self._reopening, None
            if reopening is not None:
                if (opening := self._opening) is not None:
                    opening.cancel_open()
                reopening.join()  # bounded: the old runtime's close (its drain)
            with self._lock:  # a /diagnostics being made reads it before, none after (_publish_diagnostics)
                live, self.live = self.live, None
            if live is not None:
                self._close_live(live)  # its frames published (the publishers stay till cleanup)
        finally:
            self._active = False
            self._deactivating = False

    # -- inputs (executor thread: convert and push; a reopen's hand-over aside, never block) -------------
    def _next_seq(self, sensor: str) -> int:
        n = self._seq.get(sensor, 0)
        self._seq[sensor] = n + 1
        return n

    def _push(self, sample: Sample, arrival_ns: int) -> None:
        live = self._live_for(sample, arrival_ns)
        if live is not None:
            self._take(live, sample, arrival_ns)

    def _live_for(self, sample: Sample | EgoPose, arrival_ns: int) -> LiveRuntime | None:
        """The live runtime to take ``sample`` (None: held while one reopens, or none is active): one the clock
        going back or a failed runtime asked for is reopened first (:meth:`_rewind`), also when a reopen
        failed between the first look and the hold (the message would have found no runtime, uncounted)."""
        for _ in range(2):
            if self._rewound:
                self._rewind()
            if self._hold(sample, arrival_ns):
                return None
            live = self.live
            if live is not None or not self._rewound:
                return live
        if self._active and not self._deactivating:  # none open: its reopen failed, or waits (_backoff)
            self._dropped_reopening([(sample, 0, 0)])
        return None

    def _take(
        self, live: LiveRuntime, sample: Sample | EgoPose, arrival_ns: int, held: tuple[int, int] | None = None
    ) -> None:
        """``sample`` (an ego pose), arrived at ``arrival_ns`` (monotonic), handed to ``live`` (``held``: when it came,
        on its clock and the monotonic one, if held since; else now)."""
        try:
            if isinstance(sample, EgoPose):
                live.push_ego(sample, held)
                return
            future = live.push(sample, held)
        except RuntimeClosedError:
            self._stopped_serving(live, sample)
            return
        if future is not None:

            def arrived(fut: Any, arrival: int = arrival_ns, stamp: int = sample.t_ns) -> None:
                if not fut.cancelled() and fut.exception() is None:
                    self._arrivals[fut.result().frame_id] = (arrival, stamp)

            future.add_done_callback(arrived)

    def _stopped_serving(self, live: LiveRuntime, sample: Sample | EgoPose) -> None:
        """``live`` refused ``sample`` as closed. The node's own runtime (not one a deactivate or a reopen is
        closing) stopped serving (it failed: ``status()["failed"]["runtime"]``): the message is counted
        (``dropped_reopening``) and the next input reopens it; before, every message after was dropped uncounted."""
        if live is not self.live or not self._active or self._deactivating:
            return
        if self._dead_said is not live:
            self._dead_said = live
            delay = self._backoff()
            self.get_logger().error(f"the live runtime stopped serving (it failed, logged): reopens in {delay:g} s")
        self._dropped_reopening([(sample, 0, 0)])
        self._rewound = True

    def inputs(self) -> list[tuple[type, str, Callable[[Any], None]]]:
        """What activate subscribes to: ``(message type, topic, callback)`` for each sensor's data and
        camera_info topics and the odometry. A callback converts its message and hands it to the live
        runtime; a message that cannot be taken, whatever the exception (a malformed message, a message
        the intake check refuses, a fault of the conversion itself), is counted against its sensor (or
        the odometry) in ``/diagnostics`` and logged, never raised into the executor."""
        field_map = self.config.ros.field_map if self.config is not None else {}
        out: list[tuple[type, str, Callable[[Any], None]]] = []

        def add(msg_type: type, topic: str, sensor: str | None, take: Callable[[Any], None]) -> None:
            out.append((msg_type, topic, self._guarded(sensor, topic, msg_type.__name__, take)))

        for t in self.topics.values():
            if t.image is None:
                add(PointCloud2, t.data, t.sensor, self._cloud_cb(t, field_map))
                continue
            add(CompressedImage if t.image == "compressed" else Image, t.data, t.sensor, self._image_cb(t))
            if t.camera_info is not None:
                add(CameraInfo, t.camera_info, t.sensor, self._info_cb(t))
        add(Odometry, self.odometry_topic, None, self._on_odometry)
        return out

    def _guarded(
        self, sensor: str | None, topic: str, msg_type: str, take: Callable[[Any], None]
    ) -> Callable[[Any], None]:
        """``take`` as a subscription callback: any exception it raises is an input error of ``sensor``
        (None: the odometry's)."""

        def callback(msg: Any) -> None:
            try:
                take(msg)
            except Exception as exc:  # the executor (and with it the node) must never die of an input
                self._input_error(sensor, topic, msg_type, exc)

        return callback

    def _input_error(self, sensor: str | None, topic: str, msg_type: str, exc: Exception) -> None:
        kind = type(exc).__name__
        if isinstance(exc, InputError):
            error = str(exc)
        else:  # not a malformed message the conversion knows: a fault of its own, named as such
            error = f"{sensor or 'odometry'}: {msg_type} could not be converted ({kind}: {exc!s:.200})"
        if len(error) > _MAX_ERROR_CHARS:  # the message's own strings (field names...) are anyone's to choose
            error = error[: _MAX_ERROR_CHARS - 3] + "..."
        diag = self._diag
        if diag is None:
            n = 1
        elif sensor is None:
            n = diag.odometry_error(error, kind=kind)
        else:
            n = diag.input_error(sensor, error, kind=kind)
        if n:
            more = f" ({n - 1} more {kind} since the last such line)" if n > 1 else ""
            self.get_logger().error(f"{error} [{msg_type} on {topic}]{more}")

    def _cloud_cb(self, t: SensorTopics, field_map: Mapping[str, str]) -> Callable[[Any], None]:
        kind = kind_def(t.kind)

        def on_cloud(msg: Any) -> None:
            arrival = time.monotonic_ns()
            sample = cloud_to_sample(
                msg, t.sensor, t.kind, stamp_ns(msg.header.stamp), field_map, self._next_seq(t.sensor)
            )
            self._push(_intake_checked(sample, kind), arrival)

        return on_cloud

    def _image_cb(self, t: SensorTopics) -> Callable[[Any], None]:
        convert = compressed_to_sample if t.image == "compressed" else raw_to_sample
        kind = kind_def(t.kind)

        def on_image(msg: Any) -> None:
            arrival = time.monotonic_ns()
            sample = convert(msg, t.sensor, stamp_ns(msg.header.stamp), self._next_seq(t.sensor))
            self._push(_intake_checked(sample, kind), arrival)

        return on_image

    def _info_cb(self, t: SensorTopics) -> Callable[[Any], None]:
        def on_info(msg: Any) -> None:
            if t.sensor in self._info_checked:
                return
            self._info_checked.add(t.sensor)
            problem = calibration_mismatch(msg, self.rig[t.sensor].calibration)
            if problem is not None:
                self.get_logger().warning(f"sensor {t.sensor}: {problem}; the rig's calibration is used")

        return on_info

    def _on_odometry(self, msg: Any) -> None:
        if self.live is None and self._held is None and not self._rewound:
            return
        ego = odometry_to_ego(msg, stamp_ns(msg.header.stamp))
        if (problem := ego_problem(ego)) is not None:
            raise InputError(f"odometry: {problem}")
        if (live := self._live_for(ego, time.monotonic_ns())) is not None:
            self._take(live, ego, 0)

    # -- outputs (the live runtime's callback thread) ---------------------------------------------------
    def _publish(self, result: FrameResult) -> None:
        cfg = self.config
        pubs = self._pubs
        if not self._active or cfg is None or pubs is None:
            return
        if result.status is not FrameStatus.DROPPED:
            self._reopen_delay = 0.0  # a runtime that serves: a failure after it backs off from 0.5 s again
        # (answered before on_result is called: the frame's trigger message, if it had one)
        trigger = self._arrivals.pop(result.frame_id, None)
        arrival, stamp = trigger if trigger is not None else (None, result.t_ns + self._ros_minus_mono)
        if len(self._arrivals) > _MAX_ARRIVALS:
            self._arrivals.clear()
        header = Header(stamp=to_stamp(Time, stamp), frame_id=cfg.ros.frame_id)
        pubs.objects.publish(marker_array(_Markers, result, header, Duration(sec=0, nanosec=0)))
        if pubs.detections is not None:
            pubs.detections.publish(detections_array(self._vision, result, header))
        processing_ms = frame_processing_ms(result, arrival, time.monotonic_ns())
        if processing_ms is not None:
            pubs.processing.publish(Float64(data=processing_ms))
        pubs.pipeline.publish(Float64(data=(self.get_clock().now().nanoseconds - stamp) / 1e6))
        if self._diag is not None:
            self._diag.add(result)
        self.frames_published += 1
        if self._on_published is not None:
            self._on_published(result)

    def _publish_diagnostics(self) -> None:
        pubs, diag = self._pubs, self._diag
        if diag is None or pubs is None:
            return
        # under the lock that replaces the runtime: one being closed (its counts kept, _close_live) is read by
        # no status after that, and its last status before it is not counted twice
        with self._lock:
            live = self.live
            if live is None and not self._active:
                return
            statuses = diag.statuses(None if live is None else live.status())
            reopening = self._held is not None
        if live is None:  # the clock went back, or the runtime failed: reopening, or the reopen failed
            why = "reopening" if reopening else "the reopen failed (logged); the next input tries again"
            statuses.append(Status(f"{self.get_name()}: live runtime", ERROR, why, {}))
        msg = DiagnosticArray(header=Header(stamp=self.get_clock().now().to_msg()))
        if isinstance(self._observer, RunRecorder):  # --record: whether it still records, and its gaps
            rec = self._observer
            statuses.append(diag.recording(str(rec.path), rec.stats, rec.error))
        for s in statuses:
            level = bytes([s.level])
            values = [KeyValue(key=k, value=v) for k, v in s.values.items()]
            msg.status.append(
                DiagnosticStatus(level=level, name=s.name, message=s.message, hardware_id=NODE_NAME, values=values)
            )
        pubs.diagnostics.publish(msg)
