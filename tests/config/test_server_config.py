"""The profile's ``server`` section is checked when it is loaded, naming the file and the key: TLS files,
the replicas' URLs and the headers were taken as given and failed (or aborted the process) only once the
client opened or sent its first call, after an embedded server had started."""

from __future__ import annotations

from pathlib import Path

import pytest

from perception.config import load_config, with_overrides
from perception.errors import ConfigError


def _load(tmp_path: Path, server: str) -> Path:
    path = tmp_path / "profile.yaml"
    path.write_text(f"server: {server}\n")
    return path


@pytest.mark.parametrize(
    ("server", "key", "fragment"),
    [
        # mutual TLS needs both: one alone aborted the process inside gRPC (SIGABRT, exit 134)
        ("{url: 'h:1', tls: {enabled: true, private_key: key.pem}}", "server.tls.private_key", "certificate_chain"),
        ("{url: 'h:1', tls: {enabled: true, certificate_chain: c.pem}}", "server.tls.certificate_chain", "private_key"),
        # a TLS file with TLS off was not used (the client said 'triton.ssl: ...' once opened)
        ("{url: 'h:1', tls: {root_certificates: ca.pem}}", "server.tls.root_certificates", "TLS is off"),
        ("{url: 'h:1', tls: {private_key: k.pem, certificate_chain: c.pem}}", "server.tls.private_key", "TLS is off"),
        # one server listed twice (the client said 'triton.urls: duplicate URLs' once opened)
        ("{url: 'h:1', replicas: ['h:1']}", "server.replicas[0]", "duplicate URL 'h:1' (also url)"),
        ("{url: 'h:1', replicas: ['h:2', 'h:3', 'h:2']}", "server.replicas[2]", "(also replicas[0])"),
        ("{url: embedded, replicas: ['h:2', 'h:2']}", "server.replicas[1]", "(also replicas[0])"),
        # not gRPC metadata: gRPC refused the first call in a traceback of its own
        ("{url: 'h:1', headers: {Authorization: 'Bearer x'}}", "server.headers.Authorization", "lower-case"),
        ("{url: 'h:1', headers: {'x-api key': a}}", "server.headers.x-api key", "not a gRPC metadata key"),
        ("{url: 'h:1', headers: {'': a}}", "server.headers.", "not a gRPC metadata key"),
        ("{url: 'h:1', headers: {x-token-bin: a}}", "server.headers.x-token-bin", "binary metadata"),
        ("{url: 'h:1', headers: {x-token: \"a\\nb\"}}", "server.headers.x-token", "printable ASCII"),
        ("{url: 'h:1', headers: {x-token: \"é\"}}", "server.headers.x-token", "printable ASCII"),
    ],
)
def test_a_bad_server_section_names_the_file_and_key(tmp_path: Path, server: str, key: str, fragment: str) -> None:
    path = _load(tmp_path, server)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert info.value.file == str(path) and info.value.key == key, str(info.value)
    assert fragment in info.value.message
    assert "Bearer" not in str(info.value)  # a header's value is a secret: never quoted


def test_a_good_server_section_loads(tmp_path: Path) -> None:
    server = (
        "{url: 'h:1', replicas: ['h:2'], headers: {authorization: 'Bearer x', x-tenant_id.v2: '7'},"
        " tls: {enabled: true, root_certificates: ca.pem, private_key: k.pem, certificate_chain: c.pem}}"
    )
    cfg = load_config(_load(tmp_path, server)).server
    assert cfg.replicas == ("h:2",) and dict(cfg.headers) == {"authorization": "Bearer x", "x-tenant_id.v2": "7"}
    assert cfg.tls.private_key == tmp_path / "k.pem" and cfg.tls.certificate_chain == tmp_path / "c.pem"


def test_a_duplicate_url_given_to_with_overrides_is_a_config_error(tmp_path: Path) -> None:
    cfg = load_config(_load(tmp_path, "{url: 'h:1'}"))
    with pytest.raises(ConfigError) as info:
        with_overrides(cfg, url="h:5", replicas=["h:6", "h:5"])
    assert info.value.key == "--url" and "duplicate URL 'h:5'" in info.value.message
