"""HTTP tools against real local servers that misbehave: the host allow-list holds for
every URL, deadlines are overall, bodies are capped, redirects and 4xx are failures."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

import httpx
import pytest

from hermesbus.errors import AdmissionError, ToolError
from hermesbus.processors.tool import Fallback, HttpExecutor, ToolService, ToolSpec
from hermesbus.processors.tool._http import join_url

from .conftest import ECHO_IN, ECHO_OUT, SAMPLES
from .test_executor import NOW, alone, call

EMPTY_CACHE = Fallback(strategy="cache", stale_after_s=5)


class _Hostile(BaseHTTPRequestHandler):
    """POST /drip (1 byte every 0.3 s), /big (1 MiB), /redirect (307), /missing (404),
    anything else: an echo; every request is recorded with its headers."""

    seen: ClassVar[list[tuple[str, str, dict[str, str]]]] = []

    def log_message(self, format: str, *args: object) -> None:
        return

    def _send(self, status: int, body: bytes, **headers: str) -> None:
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        type(self).seen.append((self.server.server_address[0], self.path, dict(self.headers)))  # type: ignore[index]
        self._send(200, json.dumps({"input": ECHO_IN, "output": ECHO_OUT}).encode())

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        host = self.server.server_address[0]  # type: ignore[index]
        type(self).seen.append((host, self.path, dict(self.headers)))
        if self.path == "/drip":
            body = b'{"echo":"drip"}'
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            for byte in body:
                self.wfile.write(bytes([byte]))
                self.wfile.flush()
                time.sleep(0.3)
        elif self.path == "/big":
            self._send(200, b'{"echo":"' + b"x" * (1024 * 1024) + b'"}')
        elif self.path == "/redirect":
            self._send(307, b"{}", Location="http://127.0.0.2:1/elsewhere")
        elif self.path == "/missing":
            self._send(404, b'{"error":"no such path"}')
        else:
            self._send(200, json.dumps({"echo": f"from {host}"}).encode())


def _serve(host: str) -> Iterator[str]:
    httpd = ThreadingHTTPServer((host, 0), _Hostile)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://{host}:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)


@pytest.fixture
def server() -> Iterator[str]:
    _Hostile.seen = []
    yield from _serve("127.0.0.1")


@pytest.fixture
def outside() -> Iterator[str]:
    """A server on 127.0.0.2: not on the tests' HERMES_TOOL_HOSTS."""
    yield from _serve("127.0.0.2")


def spec(base: str, call_path: str = "/", **fields: object) -> ToolSpec:
    values: dict[str, object] = {
        "name": "web",
        "kind": "http",
        "target": base,
        "call_path": call_path,
        "verifier": f"{SAMPLES}:verify",
        "fallback": EMPTY_CACHE,
        "timeout_s": 1.0,
    }
    return ToolSpec.model_validate({**values, **fields})


@pytest.mark.parametrize("path", ["@127.0.0.2:80/run", "run", "/a?b=1", "/a#x", "//127.0.0.2/x"])
async def test_a_call_path_that_could_change_the_host_is_refused(
    tools: ToolService, server: str, path: str
) -> None:
    with pytest.raises(AdmissionError, match="call_path"):
        await tools.register(spec(server, path))


async def test_a_url_with_credentials_is_refused(tools: ToolService, server: str) -> None:
    with_secret = server.replace("http://", "http://user:s3cret@")
    with pytest.raises(AdmissionError, match="carries credentials") as refused:
        await tools.register(spec(with_secret))
    assert "s3cret" not in str(refused.value)
    backup = Fallback(strategy="proxy", backup=with_secret + "/backup")
    with pytest.raises(AdmissionError, match="proxy backup carries credentials"):
        await tools.register(spec(server, fallback=backup))


async def test_a_planted_spec_cannot_reach_a_host_off_the_list(
    tools: ToolService, server: str, outside: str
) -> None:
    port = outside.rsplit(":", 1)[1]
    planted = spec(server, f"@127.0.0.2:{port}/run", input_schema=ECHO_IN, output_schema=ECHO_OUT)
    await tools.store.save_spec(planted)  # as if written to SQLite behind the registry
    report = await tools.call(call("web", "k"), now=NOW)
    assert report.result.status_code == 503
    assert "refused" in (report.result.error or "")
    assert all(host != "127.0.0.2" for host, _, _ in _Hostile.seen)


async def test_the_executor_checks_the_host_on_every_call(outside: str) -> None:
    async with httpx.AsyncClient() as client:
        executor = HttpExecutor(
            "web", outside, "/run", "/health", client, hosts=frozenset({"127.0.0.1"})
        )
        execution = await executor.run("call", {}, 1.0)
    assert execution.status == 503
    assert "host '127.0.0.2' is not on HERMES_TOOL_HOSTS" in execution.error
    assert _Hostile.seen == []


async def test_a_dripping_server_meets_the_overall_deadline(
    tools: ToolService, server: str
) -> None:
    await tools.register(spec(server, "/drip"))
    start = time.perf_counter()
    report = await tools.call(call("web", "k"), now=NOW)
    assert report.result.status_code == 504
    assert time.perf_counter() - start < 2.5


async def test_a_body_over_the_cap_is_a_502(tools: ToolService, server: str) -> None:
    await tools.register(spec(server, "/big", max_result_bytes=1024))
    report = await tools.call(alone(call("web", "k")), now=NOW)
    assert report.result.status_code == 502
    assert "the response is over 4096 bytes" in (report.result.error or "")


async def test_a_max_result_bytes_over_one_mib_is_refused(tools: ToolService, server: str) -> None:
    with pytest.raises(AdmissionError, match="max_result_bytes 2097152 is over 1048576"):
        await tools.register(spec(server, max_result_bytes=2 * 1024 * 1024))


@pytest.mark.parametrize(("path", "answered"), [("/redirect", 307), ("/missing", 404)])
async def test_redirects_and_missing_paths_are_failures(
    tools: ToolService, server: str, path: str, answered: int
) -> None:
    await tools.register(spec(server, path))
    report = await tools.call(call("web", "k"), now=NOW)
    result = report.result
    assert (result.status_code, result.verified, result.result_json) == (502, False, "null")
    assert f"answered HTTP {answered}" in (result.error or "")
    assert all(host == "127.0.0.1" for host, _, _ in _Hostile.seen)  # not followed


async def test_http_tools_receive_the_idempotency_key(tools: ToolService, server: str) -> None:
    await tools.register(spec(server))
    report = await tools.call(call("web", "key-42", text="x"), now=NOW)
    assert report.result.status_code == 200
    (post,) = [headers for _, path, headers in _Hostile.seen if path == "/"]
    assert post["Idempotency-Key"] == "key-42"


ESCAPES = [
    ("/../../../../etc/passwd", "must not contain a . or .. segment"),
    ("/api/../../admin", "must not contain a . or .. segment"),
    ("/./run", "must not contain a . or .. segment"),
    ("/..", "must not contain a . or .. segment"),
    ("/%2e%2e/%2e%2e/etc/passwd", "must not be percent-encoded"),
    ("/%2E%2E/admin", "must not be percent-encoded"),
    ("/run%2f..%2fadmin", "must not be percent-encoded"),
    ("/run%00", "must not be percent-encoded"),
    ("/..\\admin", "must not contain a backslash"),
    ("/run\\x", "must not contain a backslash"),
    ("http://127.0.0.2/run", "must start with /"),
    ("https:/run", "must start with /"),
    ("//127.0.0.2/run", "must not contain //"),
    ("/run//../x", "must not contain //"),
    ("/..;/admin", "must not contain ';'"),
    ("/run @127.0.0.2", "must not contain ' @'"),
    ("/ru\u0335n", "must not contain"),
    ("/run\t", "must not contain '\\t'"),
]


@pytest.mark.parametrize(("path", "why"), ESCAPES)
async def test_a_call_path_that_escapes_the_base_path_is_refused(
    tools: ToolService, server: str, path: str, why: str
) -> None:
    with pytest.raises(AdmissionError) as refused:
        await tools.register(spec(server + "/api", path))
    assert f"call_path {path!r} {why}" in str(refused.value)
    assert await tools.registry.get("web") is None


@pytest.mark.parametrize("path", ["/../../../../etc/passwd", "/%2e%2e/%2e%2e/etc/passwd"])
async def test_a_health_path_that_escapes_is_refused_too(
    tools: ToolService, server: str, path: str
) -> None:
    with pytest.raises(AdmissionError, match="health probe path"):
        await tools.register(spec(server + "/api", "/run", health=path))


@pytest.mark.parametrize(
    ("base", "why"),
    [
        ("/api/%2e%2e/admin", "base URL path '/api/%2e%2e/admin' must not be percent-encoded"),
        ("/api?token=1", "must not carry a query or fragment"),
        ("/api#x", "must not carry a query or fragment"),
    ],
)
async def test_a_base_url_that_hides_a_traversal_is_refused(
    tools: ToolService, server: str, base: str, why: str
) -> None:
    with pytest.raises(AdmissionError) as refused:
        await tools.register(spec(server + base, "/run"))
    assert why in str(refused.value)


@pytest.mark.parametrize("path", ["/run", "/v1/tools/echo:run", "/run/", "", "/a-b_c.d~e"])
async def test_ordinary_call_paths_stay_admitted(
    tools: ToolService, server: str, path: str
) -> None:
    admitted = await tools.register(spec(server + "/api", path))
    assert join_url(admitted.target, path).path == "/api" + (path or "")


@pytest.mark.parametrize("path", ["/../../../../etc/passwd", "/%2e%2e/etc/passwd", "/a/../../x"])
async def test_a_planted_traversal_never_leaves_the_base_path_at_call_time(
    tools: ToolService, server: str, path: str
) -> None:
    planted = spec(server + "/api", path, input_schema=ECHO_IN, output_schema=ECHO_OUT)
    await tools.store.save_spec(planted)  # as if written to SQLite behind the registry
    report = await tools.call(call("web", "k"), now=NOW)
    assert report.result.status_code == 503
    assert f"web: refused: path {path!r} must not" in (report.result.error or "")
    assert _Hostile.seen == []  # nothing was sent at all


@pytest.mark.parametrize(
    ("base", "path", "why"),
    [
        ("/api", "/../../etc/passwd", "path '/../../etc/passwd' must not contain a . or .."),
        ("/api", "/%2e%2e/etc/passwd", "path '/%2e%2e/etc/passwd' must not be percent-encoded"),
        ("/api", "//127.0.0.2/x", "path '//127.0.0.2/x' must not contain //"),
        ("/api/%2e%2e", "/run", "path '/run' does not stay under the base path '/api/..'"),
    ],
)
def test_join_url_never_builds_a_url_outside_the_base_path(base: str, path: str, why: str) -> None:
    with pytest.raises(ToolError) as refused:
        join_url("http://127.0.0.1:1" + base, path)
    assert str(refused.value) == why or str(refused.value).startswith(why)
