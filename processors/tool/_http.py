"""HTTP tools: ``POST {base}{call_path}`` and ``GET {base}{health}`` with httpx.

Every request runs under one overall deadline (a server dripping bytes cannot stretch
it), its body is read with a hard size cap, redirects are not followed, and the final
URL's host is checked against the allow-list and its path against the base path on every
call.
"""

from __future__ import annotations

import asyncio
import string
import time
from collections.abc import Callable
from typing import Any, Final

import httpx

from hermesbus.errors import ToolError
from hermesbus.processors.protocol import OK, TIMEOUT, UNAVAILABLE, VERIFICATION_FAILED
from hermesbus.processors.tool._executor import SIGNATURE_HEADER, Execution, Progress
from hermesbus.processors.tool._spec import DEFAULT_MAX_RESULT_BYTES

__all__ = ["IDEMPOTENCY_HEADER", "HttpExecutor", "join_url", "path_problem"]

IDEMPOTENCY_HEADER = "Idempotency-Key"
_NOT_FOUND = 404
_SUCCESS = range(200, 300)


_PATH_CHARS: Final = frozenset(string.ascii_letters + string.digits + "/-._~!$&'()*+,=:")
"""What a tool path may hold: RFC 3986 path characters, less ``%`` (encoding hides
traversal), ``;`` (``/..;/`` is ``/../`` to some servers) and ``@``."""


_PATH_RULES: Final[tuple[tuple[Callable[[str], bool], str], ...]] = (
    (lambda path: not path.startswith("/"), "must start with / (it is a path, not a URL)"),
    (lambda path: "//" in path, "must not contain // (a leading // names another host)"),
    (lambda path: "%" in path, "must not be percent-encoded (%2e%2e and %2f hide .. and /)"),
    (lambda path: "\\" in path, "must not contain a backslash (servers read it as /)"),
    (
        lambda path: any(segment in (".", "..") for segment in path.split("/")),
        "must not contain a . or .. segment (servers resolve them: .. leaves the base path)",
    ),
)
"""What a tool path must not do, checked in this order; the first broken rule is named."""


def path_problem(what: str, path: str) -> str | None:
    """Why ``path`` cannot be appended to a tool's base URL (None: it can): it must stay
    under the base path, on the base's host, as written."""
    if not path:
        return None
    for broken, rule in _PATH_RULES:
        if broken(path):
            return f"{what} {path!r} {rule}"
    refused = "".join(sorted({c for c in path if c not in _PATH_CHARS}))
    if not refused:
        return None
    return (
        f"{what} {path!r} must not contain {refused!r} "
        "(only ASCII letters, digits and /-._~!$&'()*+,=: may appear)"
    )


def join_url(base: str, path: str) -> httpx.URL:
    """``base`` with ``path`` appended to its path, on ``base``'s host and under its path;
    raises :class:`~hermesbus.errors.ToolError` for a path that is refused or would not
    stay under the base path (httpx folds ``..`` away: ``/api`` + ``/../x`` is ``/x``)."""
    problem = path_problem("path", path)
    if problem is not None:
        raise ToolError(problem)
    url = httpx.URL(base)
    prefix = url.path.rstrip("/")
    wanted = (prefix + path) or "/"
    joined = url.copy_with(path=wanted)
    segments = joined.path.split("/")
    if joined.path != wanted or joined.host != url.host or ".." in segments or "." in segments:
        raise ToolError(f"path {path!r} does not stay under the base path {prefix or '/'!r}")
    return joined


class HttpExecutor:
    """An HTTP tool: ``POST {base}{call_path}`` with the JSON arguments, ``GET {base}{health}``."""

    def __init__(
        self,
        name: str,
        base: str,
        call_path: str,
        health_path: str,
        client: httpx.AsyncClient,
        *,
        hosts: frozenset[str] | None = None,
        max_bytes: int = 4 * DEFAULT_MAX_RESULT_BYTES,
    ) -> None:
        self.name = name
        self._base = base
        self._call_path = call_path
        self._health_path = health_path
        self._client = client
        self._hosts = hosts if hosts is not None else frozenset({httpx.URL(base).host.lower()})
        self._max_bytes = max_bytes

    def _url(self, role: str) -> httpx.URL | str:
        """The request URL, or why it is refused."""
        path = self._health_path if role == "probe" else self._call_path
        try:
            url = join_url(self._base, path)
        except ToolError as exc:
            return f"{self.name}: refused: {exc}"
        except (httpx.InvalidURL, TypeError, ValueError) as exc:
            return f"{self.name}: not a URL: {exc}"
        if url.userinfo:
            return f"{self.name}: refused: the URL carries credentials"
        if url.host.lower() not in self._hosts:
            return f"{self.name}: refused: host {url.host!r} is not on HERMES_TOOL_HOSTS"
        return url

    async def run(
        self,
        role: str,
        arguments: Any,
        timeout_s: float,
        key: str = "",
        *,
        progress: Progress | None = None,
    ) -> Execution:
        del progress  # an HTTP tool reports none
        url = self._url(role)
        if isinstance(url, str):
            return Execution(UNAVAILABLE, error=url)
        start = time.perf_counter()
        try:
            async with asyncio.timeout(timeout_s):
                status, body, headers = await self._request(role, url, arguments, timeout_s, key)
        except TimeoutError:
            return Execution(TIMEOUT, error=f"{self.name} timed out after {timeout_s:g} s")
        except httpx.TimeoutException:
            return Execution(TIMEOUT, error=f"{self.name} timed out after {timeout_s:g} s")
        except _TooLarge:
            error = f"{self.name}: the response is over {self._max_bytes} bytes"
            return Execution(VERIFICATION_FAILED, error=error)
        except httpx.HTTPError as exc:
            return Execution(UNAVAILABLE, error=f"{self.name}: {type(exc).__name__}: {exc}")
        latency = (time.perf_counter() - start) * 1000
        return self._execution(status, body, headers, latency)

    async def _request(
        self, role: str, url: httpx.URL, arguments: Any, timeout_s: float, key: str
    ) -> tuple[int, bytes, httpx.Headers]:
        if role == "probe":
            request = self._client.build_request("GET", url, timeout=timeout_s)
        else:
            headers = {IDEMPOTENCY_HEADER: key} if key else {}
            request = self._client.build_request(
                "POST", url, json=arguments, headers=headers, timeout=timeout_s
            )
        response = await self._client.send(request, stream=True, follow_redirects=False)
        try:
            chunks: list[bytes] = []
            size = 0
            async for chunk in response.aiter_bytes():
                size += len(chunk)
                if size > self._max_bytes:
                    raise _TooLarge
                chunks.append(chunk)
        finally:
            await response.aclose()
        return response.status_code, b"".join(chunks), response.headers

    def _execution(
        self, status: int, body: bytes, headers: httpx.Headers, latency: float
    ) -> Execution:
        if status in _SUCCESS:
            return Execution(OK, body, headers.get(SIGNATURE_HEADER), latency_ms=latency)
        text = body[:200].decode("utf-8", errors="replace")
        error = f"{self.name} answered HTTP {status}: {text}"
        if status < 400 or status == _NOT_FOUND:  # noqa: PLR2004 - a redirect or a wrong path
            return Execution(VERIFICATION_FAILED, error=error, latency_ms=latency)
        return Execution(status, error=error, latency_ms=latency)

    async def close(self) -> None:
        return None  # the client belongs to the service


class _TooLarge(Exception):
    """The response body went past the cap."""
