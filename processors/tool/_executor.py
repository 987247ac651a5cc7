"""Executors: where a tool actually runs, isolated from the processor.

Python tools run in a warm worker process each (``_worker.py``; an argv list, JSON lines
over stdin/stdout, its own session and process group, a minimal environment); a call
past its timeout kills the worker's whole process group and answers 504, and the next
call spawns a new one. Any answer that is not the one awaited (undecodable, another
request's id) kills the worker too and answers 503: a desynchronised worker never
answers the next call with an old result.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import json
import logging
import os
import signal
import sys
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from hermesbus.processors.protocol import OK, TIMEOUT, UNAVAILABLE

__all__ = [
    "IDEMPOTENCY_ENV",
    "SIGNATURE_HEADER",
    "Execution",
    "Executor",
    "Progress",
    "PythonWorker",
    "worker_env",
]

log = logging.getLogger(__name__)

_WORKER = Path(__file__).with_name("_worker.py")
_LINE_LIMIT = 32 * 1024 * 1024
"""Largest answer line read from a worker; larger ones are refused (the result cap is
applied later, on the verified body)."""
SIGNATURE_HEADER = "X-Verification-Signature"
IDEMPOTENCY_ENV = "HERMES_IDEMPOTENCY_KEY"
"""Set in a python tool's worker while a call runs: the call's idempotency key."""
_EXIT_GRACE_S = 2.0
"""How long a worker that closed its stdout gets to exit before it is killed."""
_REAP_S = 2.0
"""How long reaping a killed worker may take (a process that escaped its group may
hold the pipes open); after it the pipes are closed and the worker is forgotten."""
_BASE_ENV = ("PATH", "PYTHONPATH", "HOME", "LANG", "TZ", "TMPDIR", "SYSTEMROOT")


def worker_env(
    names: tuple[str, ...], secret: str | None, source: Mapping[str, str]
) -> dict[str, str]:
    """A worker's environment, taken from ``source`` (the environment the tool service was
    handed): the base variables, LC_*, and ``names``; never ``secret``."""
    wanted = set(_BASE_ENV) | set(names)
    env = {k: v for k, v in source.items() if k in wanted or k.startswith("LC_")}
    env.pop(secret or "", None)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    return env


@dataclass(frozen=True, slots=True)
class Execution:
    """One run of a tool: its status, the exact body bytes and the signature that came with
    them (python: from a ``SignedResult``; http: the ``X-Verification-Signature`` header)."""

    status: int
    body: bytes = b""
    signature: str | None = None
    error: str = ""
    latency_ms: float = 0.0
    queued_ms: float = 0.0
    """How long the call waited for a free worker of its tool's pool."""
    offered: dict[str, Any] | None = None
    """MCP: the definition the server offers instead of the pinned one (nothing was
    called; the tool awaits approval)."""

    @property
    def ok(self) -> bool:
        return self.status == OK


Progress = Callable[[float, float | None], Awaitable[None]]
"""Told while a call runs, each time its tool reports how far it is (done, total)."""


class Executor(Protocol):
    """Runs a tool's ``call`` (with arguments and the idempotency ``key``), ``probe``
    (without) or ``verify`` (the result's JSON value); ``progress`` hears what the tool
    reports while a call runs (only MCP servers report any)."""

    async def run(
        self,
        role: str,
        arguments: Any,
        timeout_s: float,
        key: str = "",
        *,
        progress: Progress | None = None,
    ) -> Execution: ...

    async def close(self) -> None: ...


class PythonWorker:
    """One warm worker process for a python tool's call, probe and verify targets; ``env``
    is its whole environment (:func:`worker_env`), nothing is inherited."""

    def __init__(
        self,
        name: str,
        targets: dict[str, str],
        memory_mb: int,
        spawn_timeout_s: float,
        env: Mapping[str, str],
    ) -> None:
        self.name = name
        self._config = json.dumps(
            {"targets": targets, "memory_mb": memory_mb, "path": [p for p in sys.path if p]}
        )
        self._env = dict(env)
        self._spawn_timeout_s = spawn_timeout_s
        self._proc: asyncio.subprocess.Process | None = None
        self._lock = asyncio.Lock()
        self._seq = 0

    @property
    def pid(self) -> int | None:
        """The live worker's pid (None: no worker is running)."""
        return None if self._proc is None else self._proc.pid

    async def start(self) -> None:
        """Start the worker process now if none runs (OSError: it did not start)."""
        async with self._lock:
            await self._ensure()

    async def run(
        self,
        role: str,
        arguments: Any,
        timeout_s: float,
        key: str = "",
        *,
        progress: Progress | None = None,
    ) -> Execution:
        del progress  # a python tool reports none
        async with self._lock:
            try:
                proc = await self._ensure()
            except OSError as exc:
                return Execution(UNAVAILABLE, error=f"{self.name}: worker did not start: {exc}")
            return await self._exchange(proc, role, arguments, timeout_s, key)

    async def _exchange(
        self,
        proc: asyncio.subprocess.Process,
        role: str,
        arguments: Any,
        timeout_s: float,
        key: str,
    ) -> Execution:
        self._seq += 1
        request = {"id": self._seq, "role": role, "arguments": arguments, "key": key}
        start = time.perf_counter()
        try:
            # asyncio.timeout, not wait_for: on Python 3.11 wait_for can drop a cancellation
            async with asyncio.timeout(timeout_s):
                line = await _roundtrip(proc, _line(request))
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
        return await self._decode(line, self._seq, latency)

    async def _decode(self, line: bytes, ident: int, latency: float) -> Execution:
        if not line:  # stdout closed: the worker is gone or going
            code = await self._kill(grace_s=_EXIT_GRACE_S)
            return Execution(UNAVAILABLE, error=f"{self.name}: worker exited ({code})")
        answer = _parse(line, ident)
        if isinstance(answer, str):  # desynchronised: never trust this worker again
            await self._kill()
            return Execution(UNAVAILABLE, error=f"{self.name}: protocol error: {answer}")
        if not answer.get("ok"):
            status = _int(answer.get("status"))
            if status == 507:  # noqa: PLR2004 - the worker exits after running out of memory
                await self._kill(grace_s=_EXIT_GRACE_S)
            return Execution(status, error=str(answer.get("error", "")), latency_ms=latency)
        signature = answer.get("signature")
        signature = signature if isinstance(signature, str) else None
        return Execution(OK, answer["body"], signature, latency_ms=latency)

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
            env=self._env,
            start_new_session=True,
        )
        self._proc = proc
        await self._await_ready(proc)
        log.info("tool %s: worker %d ready", self.name, proc.pid)
        return proc

    async def _await_ready(self, proc: asyncio.subprocess.Process) -> None:
        try:
            if proc.stdout is None:
                raise OSError("no stdout pipe")
            async with asyncio.timeout(self._spawn_timeout_s):
                line = await proc.stdout.readline()
            ready = json.loads(line) if line else {"error": "exited before it was ready"}
        except (TimeoutError, ValueError) as exc:
            await self._kill()
            raise OSError(f"not ready: {exc!r}") from exc
        if not isinstance(ready, dict) or not ready.get("ready"):
            await self._kill()
            error = ready.get("error", "not ready") if isinstance(ready, dict) else ready
            raise OSError(f"not ready: {error!r}")

    async def _kill(self, grace_s: float = 0.0) -> int | None:
        """Kill the worker's process group (after ``grace_s`` to exit by itself) and reap
        it within ``_REAP_S``; its exit code (None when it could not be reaped).

        A worker that is exiting anyway gets the grace: killing it polls the process, which
        would reap it behind asyncio's child watcher and lose its exit code.
        """
        proc, self._proc = self._proc, None
        if proc is None:
            return None
        if grace_s > 0:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(grace_s):
                    await proc.wait()
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)  # the worker leads its own group
        if proc.stdin is not None:
            proc.stdin.close()
        try:
            async with asyncio.timeout(_REAP_S):
                return await proc.wait()
        except TimeoutError:
            log.warning("tool %s: worker %d not reaped; its pipes are closed", self.name, proc.pid)
            transport = getattr(proc, "_transport", None)  # asyncio has no public close
            if transport is not None:
                transport.close()
            return proc.returncode

    async def close(self) -> None:
        """Ask the worker to exit (EOF on stdin); kill it if it does not within a second."""
        async with self._lock:
            proc = self._proc
            if proc is None:
                return
            if proc.stdin is not None and proc.returncode is None:
                proc.stdin.close()
            await self._kill(grace_s=1.0)


def _line(request: dict[str, Any]) -> bytes:
    return (json.dumps(request, ensure_ascii=True) + "\n").encode()


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 500


def _parse(line: bytes, ident: int) -> dict[str, Any] | str:
    """The answer to request ``ident`` with its ``body`` decoded; else what is wrong."""
    try:
        answer = json.loads(line)
    except ValueError:
        return f"undecodable answer {line[:80]!r}"
    if not isinstance(answer, dict):
        return f"answer is not an object: {line[:80]!r}"
    if answer.get("id") != ident:
        return f"answer to request {answer.get('id')!r} while awaiting {ident}"
    if answer.get("ok"):
        try:
            answer["body"] = base64.b64decode(str(answer["body_b64"]), validate=True)
        except (KeyError, ValueError, binascii.Error) as exc:
            return f"answer body is not base64: {exc}"
    return answer


async def _roundtrip(proc: asyncio.subprocess.Process, request: bytes) -> bytes:
    """Send one request line, read one answer line (b"" when the worker is gone)."""
    if proc.stdin is None or proc.stdout is None:
        raise OSError("the worker's pipes are closed")
    proc.stdin.write(request)
    await proc.stdin.drain()
    return await proc.stdout.readline()
