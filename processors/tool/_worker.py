"""The worker process of a python tool: JSON lines in on stdin, JSON lines out on stdout.

Run by path (``python _worker.py CONFIG_JSON``), so that it imports nothing of hermesbus
itself; stdlib only. CONFIG_JSON: ``{"targets": {"call": "mod:fn", "probe": ...,
"verify": ...}, "memory_mb": N, "path": [sys.path of the parent]}``. It imports the
targets, caps its address space at what it uses after the imports plus ``memory_mb``
(RLIMIT_AS), says ``{"ready": true}``, then answers each request ``{"id", "role",
"arguments", "key"}`` with ``{"id", "ok": true, "body_b64", "signature"}`` or ``{"id",
"ok": false, "status", "error"}``. The protocol runs on private copies of fds 0 and 1;
fd 1 then points at stderr and fd 0 at /dev/null, so nothing the tool (or its
subprocesses, or C code) writes or reads can corrupt or steal the protocol. While a call
runs, ``HERMES_IDEMPOTENCY_KEY`` holds the call's idempotency key.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import importlib
import inspect
import json
import os
import sys
from collections.abc import Callable
from typing import Any, TextIO

__all__ = ["main"]

_TOOL_ERROR = 500
_MEMORY = 507
"""Insufficient storage: the call went past the worker's memory limit."""
_KEY_ENV = "HERMES_IDEMPOTENCY_KEY"


def _resolve(target: str) -> Callable[..., Any]:
    module, _, name = target.partition(":")
    function: Callable[..., Any] = getattr(importlib.import_module(module), name)
    return function


def _address_space() -> int:
    """Bytes of address space in use now (Linux ``/proc``; 0 elsewhere)."""
    try:
        with open("/proc/self/statm", encoding="ascii") as statm:
            return int(statm.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def _limit_memory(memory_mb: int) -> None:
    import resource  # noqa: PLC0415 - POSIX only; the limit applies in the worker alone

    limit = _address_space() + memory_mb * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def _body(value: Any) -> tuple[bytes, str | None]:
    body, signature = getattr(value, "body", None), getattr(value, "signature", None)
    if isinstance(body, bytes) and isinstance(signature, str):
        return body, signature
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True)
    return text.encode(), None


def _run(function: Callable[..., Any], role: str, arguments: Any) -> Any:
    value = function() if role == "probe" else function(arguments)
    if inspect.isawaitable(value):
        value = asyncio.run(_awaited(value))
    return value


async def _awaited(value: Any) -> Any:
    return await value


def _status(exc: BaseException) -> int:
    """The exception's ``status_code`` when it is an error status (4xx/5xx); else 500."""
    status = getattr(exc, "status_code", _TOOL_ERROR)
    ok = isinstance(status, int) and not isinstance(status, bool) and 400 <= status <= 599  # noqa: PLR2004
    return status if ok else _TOOL_ERROR


def _answer(functions: dict[str, Callable[..., Any]], request: dict[str, Any]) -> dict[str, Any]:
    ident, role = request.get("id"), request.get("role", "call")
    function = functions.get(role)
    if function is None:
        return {"id": ident, "ok": False, "status": _TOOL_ERROR, "error": f"no {role} target"}
    os.environ[_KEY_ENV] = str(request.get("key") or "")
    try:
        with contextlib.redirect_stdout(sys.stderr):
            body, signature = _body(_run(function, role, request.get("arguments")))
    except MemoryError:
        return {"id": ident, "ok": False, "status": _MEMORY, "error": "memory limit exceeded"}
    except Exception as exc:  # every tool failure is an answer, not a crash
        error = f"{type(exc).__name__}: {exc}"
        return {"id": ident, "ok": False, "status": _status(exc), "error": error}
    finally:
        os.environ.pop(_KEY_ENV, None)
    encoded = base64.b64encode(body).decode("ascii")
    return {"id": ident, "ok": True, "body_b64": encoded, "signature": signature}


def _send(out: TextIO, message: dict[str, Any]) -> None:
    out.write(json.dumps(message, ensure_ascii=True) + "\n")
    out.flush()


def _protocol_streams() -> tuple[TextIO, TextIO]:
    """Private copies of stdin/stdout for the protocol; fd 0 <- /dev/null, fd 1 -> stderr."""
    requests = os.fdopen(os.dup(0), "r", encoding="utf-8")
    answers = os.fdopen(os.dup(1), "w", encoding="utf-8")
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)
    return requests, answers


def main(argv: list[str]) -> int:
    config = json.loads(argv[1])
    sys.path[:0] = [p for p in config.get("path", []) if p not in sys.path]
    requests, out = _protocol_streams()
    try:
        functions = {role: _resolve(t) for role, t in config["targets"].items()}
        _limit_memory(int(config["memory_mb"]))
    except Exception as exc:  # reported to the parent, then exit
        _send(out, {"ready": False, "error": f"{type(exc).__name__}: {exc}"})
        return 1
    _send(out, {"ready": True})
    for line in requests:
        if not line.strip():
            continue
        request: dict[str, Any] = {}
        try:
            request = json.loads(line)
            answer = _answer(functions, request)
        except MemoryError:
            answer = {"id": request.get("id"), "ok": False, "status": _MEMORY}
            answer["error"] = "memory limit exceeded"
        _send(out, answer)
        if answer.get("status") == _MEMORY:
            return 3  # a process that ran out of memory is not trusted with the next call
    return 0


if __name__ == "__main__":
    if sys.path and os.path.abspath(sys.path[0]) == os.path.dirname(os.path.abspath(__file__)):
        del sys.path[0]  # the processor's own folder is not the tool's import path
    sys.exit(main(sys.argv))
