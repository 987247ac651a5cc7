"""Executors: where a tool actually runs, isolated from the processor.

Python tools run in a warm worker process each (``_worker.py``; an argv list, JSON lines
over stdin/stdout); a call past its timeout kills the worker and answers 504, and the
next call spawns a new one. HTTP tools are called with httpx under the tool's timeout.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import httpx

from hermesbus.processors.protocol import OK, TIMEOUT, UNAVAILABLE

__all__ = ["Execution", "Executor", "HttpExecutor", "PythonWorker"]

log = logging.getLogger(__name__)

_WORKER = Path(__file__).with_name("_worker.py")
_LINE_LIMIT = 32 * 1024 * 1024
"""Largest answer line read from a worker; larger ones are refused (the result cap is
applied later, on the verified body)."""
SIGNATURE_HEADER = "X-Verification-Signature"
_EXIT_GRACE_S = 2.0
"""How long a worker that closed its stdout gets to exit before it is killed."""


@dataclass(frozen=True, slots=True)
class Execution:
    """One run of a tool: its status, the exact body bytes and the signature that came with
    them (python: from a ``SignedResult``; http: the ``X-Verification-Signature`` header)."""

    status: int
    body: bytes = b""
    signature: str | None = None
    error: str = ""
    latency_ms: float = 0.0

    @property
    def ok(self) -> bool:
        return self.status == OK


class Executor(Protocol):
    """Runs a tool's ``call`` (with arguments) or ``probe`` (without)."""

    async def run(self, role: str, arguments: Any, timeout_s: float) -> Execution: ...

    async def close(self) -> None: ...


class PythonWorker:
    """One warm worker process for a python tool's call and probe targets."""

    def __init__(
        self, name: str, targets: dict[str, str], memory_mb: int, spawn_timeout_s: float
    ) -> None:
        self.name = name
        self._config = json.dumps(
            {"targets": targets, "memory_mb": memory_mb, "path": [p for p in sys.path if p]}
        )
        self._spawn_timeout_s = spawn_timeout_s
        self._proc: asyncio.subprocess.Process | None = None
        self._lock = asyncio.Lock()
        self._seq = 0

    @property
    def pid(self) -> int | None:
        """The live worker's pid (None: no worker is running)."""
        return None if self._proc is None else self._proc.pid

    async def run(self, role: str, arguments: Any, timeout_s: float) -> Execution:
        async with self._lock:
            try:
                proc = await self._ensure()
            except OSError as exc:
                return Execution(UNAVAILABLE, error=f"{self.name}: worker did not start: {exc}")
            return await self._exchange(proc, role, arguments, timeout_s)

    async def _exchange(
        self, proc: asyncio.subprocess.Process, role: str, arguments: Any, timeout_s: float
    ) -> Execution:
        self._seq += 1
        request = json.dumps({"id": self._seq, "role": role, "arguments": arguments}) + "\n"
        start = time.perf_counter()
        try:
            line = await asyncio.wait_for(_roundtrip(proc, request.encode()), timeout_s)
        except TimeoutError:
            await self._kill()
            return Execution(TIMEOUT, error=f"{self.name} timed out after {timeout_s:g} s")
        except OSError as exc:  # a broken pipe: the worker is gone
            await self._kill(grace_s=_EXIT_GRACE_S)
            return Execution(UNAVAILABLE, error=f"{self.name}: worker failed: {exc}")
        except ValueError as exc:  # an answer line over the limit
            await self._kill()
            return Execution(UNAVAILABLE, error=f"{self.name}: answer refused: {exc}")
        latency = (time.perf_counter() - start) * 1000
        return await self._decode(line, latency)

    async def _decode(self, line: bytes, latency: float) -> Execution:
        if not line:  # stdout closed: the worker is gone or going
            code = await self._kill(grace_s=_EXIT_GRACE_S)
            return Execution(UNAVAILABLE, error=f"{self.name}: worker exited ({code})")
        answer = json.loads(line)
        if not answer.get("ok"):
            status = int(answer.get("status", 500))
            if status == 507:  # noqa: PLR2004 - the worker exits after running out of memory
                await self._kill(grace_s=_EXIT_GRACE_S)
            return Execution(status, error=str(answer.get("error", "")), latency_ms=latency)
        body = base64.b64decode(answer["body_b64"])
        return Execution(OK, body, answer.get("signature"), latency_ms=latency)

    async def _ensure(self) -> asyncio.subprocess.Process:
        if self._proc is not None and self._proc.returncode is None:
            return self._proc
        self._proc = None
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            str(_WORKER),
            self._config,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            limit=_LINE_LIMIT,
        )
        self._proc = proc
        await self._await_ready(proc)
        log.info("tool %s: worker %d ready", self.name, proc.pid)
        return proc

    async def _await_ready(self, proc: asyncio.subprocess.Process) -> None:
        try:
            if proc.stdout is None:
                raise OSError("no stdout pipe")
            line = await asyncio.wait_for(proc.stdout.readline(), self._spawn_timeout_s)
            ready = json.loads(line) if line else {"error": "exited before it was ready"}
        except (TimeoutError, ValueError) as exc:
            await self._kill()
            raise OSError(f"not ready: {exc!r}") from exc
        if not ready.get("ready"):
            await self._kill()
            raise OSError(str(ready.get("error", "not ready")))

    async def _kill(self, grace_s: float = 0.0) -> int | None:
        """Kill the worker (after ``grace_s`` to exit by itself) and reap it; its exit code.

        A worker that is exiting anyway gets the grace: killing it polls the process, which
        would reap it behind asyncio's child watcher and lose its exit code.
        """
        proc, self._proc = self._proc, None
        if proc is None:
            return None
        if grace_s > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(proc.wait(), grace_s)
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
        code = await proc.wait()
        if proc.stdin is not None:
            proc.stdin.close()
        return code

    async def close(self) -> None:
        """Ask the worker to exit (EOF on stdin); kill it if it does not within a second."""
        async with self._lock:
            proc = self._proc
            if proc is None:
                return
            if proc.stdin is not None and proc.returncode is None:
                proc.stdin.close()
            await self._kill(grace_s=1.0)


async def _roundtrip(proc: asyncio.subprocess.Process, request: bytes) -> bytes:
    """Send one request line, read one answer line (b"" when the worker is gone)."""
    if proc.stdin is None or proc.stdout is None:
        raise OSError("the worker's pipes are closed")
    proc.stdin.write(request)
    await proc.stdin.drain()
    return await proc.stdout.readline()


class HttpExecutor:
    """An HTTP tool: ``POST {base}{call_path}`` with the JSON arguments, ``GET {base}{health}``."""

    def __init__(
        self, name: str, base: str, call_path: str, health_path: str, client: httpx.AsyncClient
    ) -> None:
        self.name = name
        self._base = base.rstrip("/")
        self._call_path = call_path
        self._health_path = health_path
        self._client = client

    async def run(self, role: str, arguments: Any, timeout_s: float) -> Execution:
        start = time.perf_counter()
        try:
            if role == "probe":
                response = await self._client.get(self._base + self._health_path, timeout=timeout_s)
            else:
                url = self._base + self._call_path
                response = await self._client.post(url, json=arguments, timeout=timeout_s)
        except httpx.TimeoutException:
            return Execution(TIMEOUT, error=f"{self.name} timed out after {timeout_s:g} s")
        except httpx.HTTPError as exc:
            return Execution(UNAVAILABLE, error=f"{self.name}: {type(exc).__name__}: {exc}")
        latency = (time.perf_counter() - start) * 1000
        if response.status_code != OK:
            error = f"{self.name} answered HTTP {response.status_code}: {response.text[:200]}"
            return Execution(response.status_code, error=error, latency_ms=latency)
        signature = response.headers.get(SIGNATURE_HEADER)
        return Execution(OK, response.content, signature, latency_ms=latency)

    async def close(self) -> None:
        return None  # the client belongs to the service
