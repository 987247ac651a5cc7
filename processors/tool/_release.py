"""Turning an execution into a releasable ``ToolResult``: verify, then cap the size."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from hermesbus.contract.payloads import ToolResult
from hermesbus.errors import VerificationError
from hermesbus.processors.protocol import OK, VERIFICATION_FAILED
from hermesbus.processors.tool._executor import Execution
from hermesbus.processors.tool._spec import ToolSpec
from hermesbus.processors.tool._verify import DEFAULT_MAX_DEPTH, Verified, check_result, finish

__all__ = ["arguments_digest", "failure", "release", "truncate"]


def arguments_digest(arguments: Any) -> str:
    """A stable digest of the arguments (canonical JSON): the cache key with the tool name."""
    canonical = json.dumps(arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()[:32]


def failure(tool: str, status: int, error: str) -> ToolResult:
    return ToolResult(tool=tool, status_code=status, error=error)


async def release(
    spec: ToolSpec,
    execution: Execution,
    verifier: Callable[[Any], Awaitable[None]],
    fallback: str | None,
    *,
    env: Mapping[str, str],
    max_depth: int = DEFAULT_MAX_DEPTH,
) -> tuple[ToolResult, str | None]:
    """The verified result (truncated past the cap), or a 502 and the alert message.

    ``verifier`` runs the spec's verifier on the JSON value (in the tool's worker) and
    raises :class:`VerificationError` when it says no; ``env`` holds the key the spec's
    signature names."""
    try:
        verified = await _verified(spec, execution, verifier, env, max_depth)
    except VerificationError as exc:
        error = f"verification failed: {exc}"
        return ToolResult(tool=spec.name, status_code=VERIFICATION_FAILED, error=error), error
    text, truncated = truncate(execution.body, spec.max_result_bytes)
    result = ToolResult(
        tool=spec.name,
        status_code=OK,
        result_json=text,
        verified=True,
        verification_steps=verified.steps,
        fallback=fallback,
        truncated=truncated,
    )
    return result, None


async def _verified(
    spec: ToolSpec,
    execution: Execution,
    verifier: Callable[[Any], Awaitable[None]],
    env: Mapping[str, str],
    max_depth: int,
) -> Verified:
    value = check_result(spec, execution.body, execution.signature, env, max_depth)
    await verifier(value)
    return finish(spec, value)


def truncate(body: bytes, cap: int) -> tuple[str, bool]:
    """The body as text, or past ``cap`` bytes ``{"truncated": true, "preview": ...}`` (<= cap)."""
    text = body.decode("utf-8", errors="replace")
    if len(body) <= cap:
        return text, False
    keep = cap
    while True:
        marker = json.dumps({"truncated": True, "preview": text[:keep]}, ensure_ascii=False)
        size = len(marker.encode())
        if size <= cap:
            return marker, True
        keep = min(keep - 1, keep * cap // size)
