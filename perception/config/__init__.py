"""Launch profiles: YAML loaded with a safe loader into typed, immutable config objects."""

from __future__ import annotations

from perception.config._convert import from_data
from perception.config._loader import load_config, load_yaml, with_overrides
from perception.config._model import (
    BudgetConfig,
    CircuitConfig,
    FaultConfig,
    FusionConfig,
    KindDefaults,
    LiveConfig,
    OutputConfig,
    PipelineConfig,
    RuntimeConfig,
    SensorConfig,
    SensorDefaults,
    ServerConfig,
    TLSConfig,
    TriggerConfig,
)
from perception.config._resolve import resolve_sensors

__all__ = [
    "BudgetConfig",
    "CircuitConfig",
    "FaultConfig",
    "FusionConfig",
    "KindDefaults",
    "LiveConfig",
    "OutputConfig",
    "PipelineConfig",
    "RuntimeConfig",
    "SensorConfig",
    "SensorDefaults",
    "ServerConfig",
    "TLSConfig",
    "TriggerConfig",
    "from_data",
    "load_config",
    "load_yaml",
    "resolve_sensors",
    "with_overrides",
]
