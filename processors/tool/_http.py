"""HTTP tools: ``POST {base}{call_path}`` and ``GET {base}{health}`` with httpx.

Every request runs under one overall deadline (a server dripping bytes cannot stretch
it), its body is read with a hard size cap, redirects are not followed, and the final
URL's host is checked against the allow-list on every call.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx

from hermesbus.processors.protocol import OK, TIMEOUT, UNAVAILABLE, VERIFICATION_FAILED

from ._executor import SIGNATURE_HEADER, Execution
from ._spec import DEFAULT_MAX_RESULT_BYTES

__all__ = ["IDEMPOTENCY_HEADER", "HttpExecutor", "join_url", "path_problem"]

IDEMPOTENCY_HEADER = "Idempotency-Key"
_NOT_FOUND = 404
_SUCCESS = range(200, 300)


def path_problem(what: str, path: str) -> str | None:
    """Why ``path`` cannot be appended to a tool's base URL (None: it can)."""
    if path and not path.startswith("/"):
        return f"{what} {path!r} must start with /"
    if any(c in path for c in "@?#\\") or path.startswith("//"):
        return f"{what} {path!r} must not contain @, ?, #, \\ or start with //"
    return None


def join_url(base: str, path: str) -> httpx.URL:
    """``base`` with ``path`` appended to its path; the host always stays ``base``'s."""
    url = httpx.URL(base)
    joined = url.path.rstrip("/") + path
    return url.copy_with(path=joined or "/")


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
        problem = path_problem("path", path)
        if problem is not None:
            return f"{self.name}: refused: {problem}"
        try:
            url = join_url(self._base, path)
        except (httpx.InvalidURL, TypeError, ValueError) as exc:
            return f"{self.name}: not a URL: {exc}"
        if url.userinfo:
            problem = "the URL carries credentials"
        if problem is None and url.host.lower() not in self._hosts:
            problem = f"host {url.host!r} is not on HERMES_TOOL_HOSTS"
        return url if problem is None else f"{self.name}: refused: {problem}"

    async def run(self, role: str, arguments: Any, timeout_s: float, key: str = "") -> Execution:
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
