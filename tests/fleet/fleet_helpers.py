"""The fleet tests' Ray head, started once per session as an operator starts one (imported by name:
tests/fleet is on sys.path).

Fleet runs that are not about starting and stopping a cluster join it (``--address``) instead of each
starting a local cluster and stopping it again (~5.5 s each on two cores). ``test_fleet.py`` ends by
stopping it as an operator does and checking that nothing is left; a module that needs it afterwards gets a
new one (:meth:`RayHeads.current`).
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from perception.server import free_port

#: In the environment of every process the fleet tests start (the CLI and, inheriting it, Ray's processes,
#: the workers, their Triton servers and backend stubs): what is left running is judged by it, so
#: the clusters and servers of others on a shared machine (and this session's own server) do not count.
MARK = ("PERCEPTION_FLEET_TEST", str(os.getpid()))

#: In the environment of the session's shared Ray head and so of everything its raylet starts (workers,
#: a node's embedded Triton): the head outlives single runs, so it is judged apart.
HEAD_MARK = ("PERCEPTION_FLEET_TEST_HEAD", str(os.getpid()))


def marked_env() -> dict[str, str]:
    """This process's environment with :data:`MARK`."""
    return {**os.environ, MARK[0]: MARK[1]}


def ray_cli(*args: str, env: dict[str, str], timeout_s: float = 60.0) -> subprocess.CompletedProcess[str]:
    ray = Path(sys.executable).with_name("ray")
    return subprocess.run([str(ray), *args], env=env, capture_output=True, text=True, timeout=timeout_s, check=False)


@dataclass
class RayHead:
    """A Ray head started as an operator does (``ray start --head --block``, in a process of its own),
    with token authentication and a token of its own."""

    address: str
    #: For a ``perception fleet --address`` joining it: the token, and :data:`MARK`.
    env: dict[str, str]
    proc: subprocess.Popen[bytes]
    log: Path

    def join(self, grpc_url: str | None = None) -> list[str]:
        """The arguments that run a fleet on this head (and on the Triton at ``grpc_url``: no server of its own)."""
        return ["--address", self.address, *(["--url", grpc_url] if grpc_url is not None else [])]

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def logs_tail(self, lines: int = 30) -> str:
        """The end of its ``ray start`` output and of its GCS's and raylet's logs: what a failure message needs,
        since the head's directory goes at the session's end (a fleet that could not reach the GCS, once in a
        CI run, left nothing to read)."""
        files = [self.log, *sorted(self.log.parent.glob("ray/session_*/logs/gcs_server.*"))]
        files += sorted(self.log.parent.glob("ray/session_*/logs/raylet.*"))
        out = []
        for f in files:
            try:
                text = f.read_text(errors="replace").splitlines()[-lines:]
            except OSError as exc:
                text = [f"(unreadable: {exc})"]
            out.append(f"--- {f.name}:\n" + "\n".join(text))
        return "\n".join(out)

    def stop(self) -> None:
        """Signal its ``ray start --block`` process, which stops the node's processes (not ``ray stop``:
        that stops every Ray process of the machine, other people's clusters too)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(60)
        finally:
            if self.proc.poll() is None:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


def start_head() -> RayHead:
    """Start a head in a short temporary directory (Ray's socket paths are limited) and wait until it
    answers ``ray status``."""
    tmp = Path(tempfile.mkdtemp(prefix="fleet-ray-", dir="/tmp"))
    token = tmp / "auth_token"
    token.write_text(secrets.token_hex(32))
    auth = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token)}
    head_env = {**os.environ, HEAD_MARK[0]: HEAD_MARK[1], **auth}
    head_env.pop("RAY_ADDRESS", None)
    env = {**marked_env(), **auth}
    env.pop("RAY_ADDRESS", None)
    address = f"127.0.0.1:{free_port()}"
    ports = [
        f"--port={address.rsplit(':', 1)[1]}",
        f"--ray-client-server-port={free_port()}",
        f"--dashboard-agent-listen-port={free_port()}",
    ]
    argv = ["start", "--head", *ports, "--num-cpus=2", "--include-dashboard=false", f"--temp-dir={tmp / 'ray'}"]
    with (tmp / "head.log").open("w") as log:
        proc = subprocess.Popen(
            [str(Path(sys.executable).with_name("ray")), *argv, "--block"],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=head_env,
            start_new_session=True,
        )
    started = RayHead(address, env, proc, tmp / "head.log")
    try:
        deadline = time.monotonic() + 120
        while ray_cli("status", f"--address={address}", env=env).returncode != 0:
            assert proc.poll() is None, started.log.read_text()
            assert time.monotonic() < deadline, "the head did not answer `ray status`"
            time.sleep(0.5)
    except BaseException:
        remove_head(started)
        raise
    return started


def remove_head(head: RayHead) -> None:
    try:
        head.stop()
    finally:
        shutil.rmtree(head.log.parent, ignore_errors=True)


class RayHeads:
    """The session's head: :meth:`current` starts one when there is none or the last one was stopped."""

    def __init__(self) -> None:
        self._heads: list[RayHead] = []

    def current(self) -> RayHead:
        if not self._heads or not self._heads[-1].alive:
            self._heads.append(start_head())
        return self._heads[-1]

    def close(self) -> None:
        for head in self._heads:
            remove_head(head)
