"""The Prometheus endpoint: a port it cannot serve on is a usage error naming the option and the port."""

from __future__ import annotations

import socket

import pytest

from perception.errors import ConfigError
from perception.metrics import PrometheusExporter


def test_a_taken_port_is_a_config_error_naming_the_option_and_port() -> None:
    # `perception replay --metrics-port P` with P taken ended "error: Address already in use" (exit 1),
    # naming neither the option nor the port (--live-port on a taken port names both, exit 2).
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        exporter = PrometheusExporter(port=port)
        with pytest.raises(ConfigError) as err:
            exporter.start()
    assert err.value.key == "--metrics-port"
    assert f"cannot serve Prometheus metrics on 127.0.0.1:{port}: Address already in use" in str(err.value)
    assert exporter.port == port  # nothing was started
    exporter.close()
