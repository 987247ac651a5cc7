"""Turning an execution into a releasable ``ToolResult``: verify, then cap the size."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Any

from hermesbus.errors import VerificationError
from hermesbus.payloads import ToolResult
from hermesbus.processors.protocol import OK, VERIFICATION_FAILED

from ._executor import Execution
from ._spec import ToolSpec
from ._verify import verify

__all__ = ["arguments_digest", "failure", "release", "truncate"]


def arguments_digest(arguments: Any) -> str:
    """A stable digest of the arguments (canonical JSON): the cache key with the tool name."""
    canonical = json.dumps(arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()[:32]


def failure(tool: str, status: int, error: str) -> ToolResult:
    return ToolResult(tool=tool, status_code=status, error=error)


def release(
    spec: ToolSpec, execution: Execution, verifier: Callable[[Any], Any], fallback: str | None
) -> tuple[ToolResult, str | None]:
    """The verified result (truncated past the cap), or a 502 and the alert message."""
    try:
        verified = verify(spec, execution.body, execution.signature, verifier)
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
