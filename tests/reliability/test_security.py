"""Security: TLS and auth headers reach the client, YAML is loaded safely, outputs stay in their
directory, shared-memory names are per process and the leftovers of a crashed run are removed.

(That headers are really sent on the wire is tested in tests/triton/test_transport_client.py.)
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import ssl
import subprocess
import sys
from pathlib import Path

import anyio
import numpy as np
import pytest
from reliability_helpers import REPO_ROOT, profile_data, shm_entries, write_profile

from perception.cli._main import main as cli_main
from perception.config import load_config
from perception.errors import ConfigError
from perception.replay import safe_output_path
from perception.scheduler import Runtime
from perception.server import EmbeddedTriton, free_port
from perception.triton import SharedMemoryPool, TritonClient, make_shm_prefix

REMOTE = "triton.example.invalid:8001"  # never contacted: channels connect lazily


def _tls_profile(tmp_path: Path, cert: str) -> Path:
    data = profile_data(REMOTE, {"lidar_top": "m"})
    data["server"] |= {
        "tls": {"enabled": True, "root_certificates": cert},
        "headers": {"authorization": "Bearer s3cret", "x-tenant": "fleet-7"},
    }
    return write_profile(tmp_path / "remote.yaml", data)


@pytest.mark.anyio
async def test_tls_and_headers_from_the_profile_reach_the_client(tmp_path: Path) -> None:
    (tmp_path / "certs").mkdir()
    ca = tmp_path / "certs" / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
    cfg = load_config(_tls_profile(tmp_path, "certs/ca.pem"))  # relative to the profile's directory
    with anyio.fail_after(30):
        async with Runtime(cfg, check_models=False) as rt:
            client = rt.client
            assert isinstance(client, TritonClient)
            options = client.options
    assert options.urls == (REMOTE,)
    assert options.ssl is True and options.root_certificates == str(ca)
    assert dict(options.headers) == {"authorization": "Bearer s3cret", "x-tenant": "fleet-7"}


@pytest.mark.anyio
async def test_tls_with_a_missing_certificate_is_a_config_error_naming_it(tmp_path: Path) -> None:
    cfg = load_config(_tls_profile(tmp_path, "certs/missing.pem"))
    with anyio.fail_after(30), pytest.raises(ConfigError) as info:
        async with Runtime(cfg, check_models=False):
            pass
    assert info.value.file == str(tmp_path / "certs" / "missing.pem")
    assert "TLS" in str(info.value)


def test_tls_error_through_the_cli_is_one_line_exit_2(
    tmp_path: Path, small_drive: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    profile = _tls_profile(tmp_path, "certs/missing.pem")
    code = cli_main(["replay", str(small_drive), "--config", str(profile), "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    lines = [line for line in err.splitlines() if ": error: " in line]
    assert len(lines) == 1 and "missing.pem" in lines[0], err


# -- YAML -----------------------------------------------------------------------------------------------

_UNSAFE = re.compile(r"yaml\.(unsafe_load|full_load|load_all|load)\s*\(|Loader\s*=\s*yaml\.(Unsafe|Full)?Loader\b")


def test_the_package_loads_yaml_only_with_the_safe_loader() -> None:
    offenders = []
    for path in sorted((REPO_ROOT / "perception").rglob("*.py")):
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if _UNSAFE.search(line):
                offenders.append(f"{path.relative_to(REPO_ROOT)}:{n}: {line.strip()}")
    assert offenders == []


def test_a_python_object_payload_is_refused_and_never_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    marker = tmp_path / "pwned"
    profile = tmp_path / "evil.yaml"
    profile.write_text(f'server: !!python/object/apply:os.system ["touch {marker}"]\n')
    with pytest.raises(ConfigError) as info:
        load_config(profile)
    assert info.value.file == str(profile)
    code = cli_main(["config", str(profile)])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err and str(profile) in err
    assert not marker.exists()


# -- output paths ---------------------------------------------------------------------------------------


def test_output_paths_stay_inside_the_output_directory(tmp_path: Path) -> None:
    out = tmp_path / "out"
    (out / "sub").mkdir(parents=True)
    assert safe_output_path(out, "detections.jsonl") == (out / "detections.jsonl").resolve()
    assert safe_output_path(out, "sub/frame_0001.png") == (out / "sub" / "frame_0001.png").resolve()
    outside = tmp_path / "precious.txt"
    outside.write_text("keep me")
    (out / "report.json").symlink_to(outside)  # a planted link must not redirect a write
    for name in ("../escape.json", "/etc/passwd", "sub/../../escape.json", "report.json"):
        with pytest.raises(ConfigError, match="escapes the output directory"):
            safe_output_path(out, name)
    assert outside.read_text() == "keep me"


# -- shared memory ----------------------------------------------------------------------------------------


def test_shared_memory_names_are_unique_per_process_and_instance() -> None:
    mine = f"perception_{os.getpid()}_"
    prefixes = {make_shm_prefix() for _ in range(50)} | {SharedMemoryPool().prefix for _ in range(5)}
    assert len(prefixes) == 55 and all(p.startswith(mine) for p in prefixes)
    child = subprocess.run(
        [
            sys.executable,
            "-c",
            "import os; from perception.triton import make_shm_prefix; print(os.getpid(), make_shm_prefix())",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert child[1].startswith(f"perception_{child[0]}_") and not child[1].startswith(mine)


def _dead_pid() -> int:
    """A pid that no longer runs: regions named after it are leftovers of a crashed run."""
    proc = subprocess.Popen(["/bin/true"])
    proc.wait()
    return proc.pid


@pytest.mark.triton  # starts a server of its own
@pytest.mark.anyio
async def test_leftovers_of_a_crashed_run_are_removed_at_the_next_start(tmp_path: Path) -> None:
    dead = _dead_pid()
    leftovers = [Path("/dev/shm") / f"perception_{dead}_0badc0de_{i}" for i in range(3)]
    live = Path("/dev/shm") / f"{make_shm_prefix()}0"  # this live process's: must be kept
    for p in [*leftovers, live]:
        p.write_bytes(b"\0" * 64)
    try:
        repo = tmp_path / "empty_repo"  # no model: the server starts in well under a second
        repo.mkdir()
        with anyio.fail_after(60):
            async with EmbeddedTriton([repo], grpc_port=free_port()):
                assert shm_entries(f"perception_{dead}_") == []
                assert live.exists()
    finally:
        for p in [*leftovers, live]:
            p.unlink(missing_ok=True)


def _self_signed(tmp_path: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 (and localhost), made with the openssl command."""
    cert, key = tmp_path / "server.pem", tmp_path / "server.key"
    args = ["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert), "-days", "1"]
    subprocess.run(
        ["openssl", *args, "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return cert, key


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, ssl.SSLError):
        pass
    finally:
        writer.close()


@pytest.mark.anyio
@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command to make a certificate")
async def test_a_real_tls_handshake_and_inference_through_a_tls_terminating_proxy(
    triton: EmbeddedTriton, tmp_path: Path
) -> None:
    # A TLS-terminating proxy (as in front of a remote Triton) forwards to the session's server; the
    # runtime's client, built from a profile with `tls:`, verifies the proxy's certificate against the
    # profile's root certificate and runs an inference through it.
    cert, key = _self_signed(tmp_path)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    context.set_alpn_protocols(["h2"])  # gRPC is HTTP/2
    host, port = triton.grpc_url.rsplit(":", 1)
    sessions: list[tuple[str | None, str | None]] = []

    async def forward(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        tls = client_w.get_extra_info("ssl_object")
        sessions.append((tls.version(), tls.selected_alpn_protocol()))
        server_r, server_w = await asyncio.open_connection(host, int(port))
        await asyncio.gather(_pipe(client_r, server_w), _pipe(server_r, client_w))

    proxy = await asyncio.start_server(forward, "127.0.0.1", 0, ssl=context)
    proxy_url = f"127.0.0.1:{proxy.sockets[0].getsockname()[1]}"
    try:
        data = profile_data(proxy_url, {"lidar_top": "m"})
        data["server"] |= {"tls": {"enabled": True, "root_certificates": str(cert)}}
        cfg = load_config(write_profile(tmp_path / "tls.yaml", data))
        x = np.arange(6, dtype=np.float32).reshape(2, 3)
        with anyio.fail_after(60):
            async with Runtime(cfg, check_models=False) as rt:
                assert isinstance(rt.client, TritonClient) and rt.client.options.ssl is True
                result = await rt.client.infer("echo", {"INPUT": x}, sensor="lidar_top", frame=1)
        np.testing.assert_array_equal(result.outputs["OUTPUT"], 2 * x)  # the model's answer, through TLS
        assert sessions and all(v is not None and v.startswith("TLS") and alpn == "h2" for v, alpn in sessions)
    finally:
        proxy.close()
        with anyio.fail_after(10):  # watchdog (Python 3.12 waits for the proxy's connections to close)
            await proxy.wait_closed()
