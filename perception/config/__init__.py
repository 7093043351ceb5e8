"""Launch profiles: YAML loaded with a safe loader into typed, immutable config objects."""

from __future__ import annotations

from perception.config._convert import first_duplicate, from_data, reject_duplicates
from perception.config._drive_source import CAMERA_MODEL_SIMULATED, default_camera_model
from perception.config._loader import load_config, load_yaml, sensor_names, with_overrides
from perception.config._model import (
    GRPC_NAMES,
    CameraGuidedConfig,
    CircuitConfig,
    FaultConfig,
    FusionConfig,
    KindDefaults,
    LiveConfig,
    PipelineConfig,
    RosConfig,
    RuntimeConfig,
    SensorConfig,
    SensorDefaults,
    ServerConfig,
    TriggerConfig,
    headers_problem,
    required_sensors_problem,
    tls_problem,
    url_problem,
)
from perception.config._resolve import auto_trigger, resolve_sensors

__all__ = [
    "CAMERA_MODEL_SIMULATED",
    "GRPC_NAMES",
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
    "TriggerConfig",
    "auto_trigger",
    "default_camera_model",
    "first_duplicate",
    "from_data",
    "headers_problem",
    "load_config",
    "load_yaml",
    "reject_duplicates",
    "required_sensors_problem",
    "resolve_sensors",
    "sensor_names",
    "tls_problem",
    "url_problem",
    "with_overrides",
]
