"""HTTP tools against a real local HTTP server: /schema, /health, the call and its signature."""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

import pytest

from hermesbus.errors import AdmissionError
from hermesbus.processors.tool import Fallback, SignatureConfig, ToolService, ToolSpec, chaos

from .conftest import ECHO_IN, ECHO_OUT, SAMPLES
from .test_executor import NOW, alone, call

SECRET = "http-tool-secret"  # noqa: S105 - a test key
KEY_ENV = "HERMES_TEST_HTTP_TOOL_KEY"


class _Tool(BaseHTTPRequestHandler):
    """A tiny signed echo service: POST / (and /backup), GET /health, GET /schema."""

    calls: ClassVar[list[str]] = []

    def log_message(self, format: str, *args: object) -> None:
        return

    def _send(self, status: int, payload: object, signature: str | None = None) -> None:
        body = json.dumps(payload, ensure_ascii=False).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        if signature is not None:
            self.send_header("X-Verification-Signature", signature)
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        if self.path == "/health":
            self._send(200, {"latency_ms": 5.0, "success_rate": 0.97, "quota_remaining": 99})
        elif self.path == "/schema":
            self._send(200, {"input": ECHO_IN, "output": ECHO_OUT})
        else:
            self._send(404, {"error": "no such path"})

    def do_POST(self) -> None:
        arguments = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        text = arguments.get("text", "")
        type(self).calls.append(f"{self.path} {text}")
        if text == "boom" and self.path == "/":
            self._send(500, {"error": "down"})
            return
        if text == "slow" and self.path == "/":
            time.sleep(1.5)
        echo = "from backup" if self.path == "/backup" else text
        body = json.dumps({"echo": echo, "verification_steps": ["已验签"]}, ensure_ascii=False)
        signature = hmac.new(SECRET.encode(), body.encode(), hashlib.sha256).hexdigest()
        if text == "tamper":
            signature = "0" * 64
        payload = json.loads(body)
        self._send(200, payload, signature)


@pytest.fixture
def server() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Tool)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    _Tool.calls = []
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)


def http_spec(base: str, **fields: object) -> ToolSpec:
    values: dict[str, object] = {
        "name": "web_echo",
        "kind": "http",
        "target": base,
        "verifier": f"{SAMPLES}:verify",
        "fallback": Fallback(strategy="proxy", backup=f"{base}/backup"),
        "signature": SignatureConfig(alg="hmac-sha256", key_env=KEY_ENV),
        "timeout_s": 1.0,
    }
    return ToolSpec.model_validate({**values, **fields})


@pytest.fixture(autouse=True)
def _key(environ: dict[str, str]) -> None:
    environ[KEY_ENV] = SECRET


async def test_registration_fetches_the_schemas(tools: ToolService, server: str) -> None:
    admitted = await tools.register(http_spec(server))
    assert (admitted.input_schema, admitted.output_schema) == (ECHO_IN, ECHO_OUT)
    assert (await tools.registry.get("web_echo")) == admitted


async def test_registration_fails_when_schema_is_unreachable(tools: ToolService) -> None:
    with pytest.raises(AdmissionError, match=r"GET http://127.0.0.1:9/schema failed"):
        await tools.register(http_spec("http://127.0.0.1:9"))


async def test_a_signed_call_is_verified_and_released(tools: ToolService, server: str) -> None:
    await tools.register(http_spec(server))
    report = await tools.call(call("web_echo", "k", text="你好"), now=NOW)
    result = report.result
    assert (result.status_code, result.verified, result.fallback) == (200, True, None)
    assert json.loads(result.result_json)["echo"] == "你好"
    assert result.verification_steps == ("已验签",)
    assert _Tool.calls == ["/ 你好"]


async def test_a_bad_signature_header_discards_the_result(tools: ToolService, server: str) -> None:
    await tools.register(http_spec(server))
    report = await tools.call(alone(call("web_echo", "k", text="tamper")), now=NOW)
    assert report.result.status_code == 502 and report.result.result_json == "null"
    assert report.alert == "verification failed: signature: HMAC-SHA256 does not match the body"


async def test_server_errors_and_timeouts_go_to_the_backup(tools: ToolService, server: str) -> None:
    await tools.register(http_spec(server))
    failed = await tools.call(call("web_echo", "k1", text="boom"), now=NOW)
    assert (failed.result.status_code, failed.result.fallback) == (200, "proxy")
    assert json.loads(failed.result.result_json)["echo"] == "from backup"
    slow = await tools.call(call("web_echo", "k2", text="slow"), now=NOW)
    assert slow.result.fallback == "proxy"
    assert _Tool.calls == ["/ boom", "/backup boom", "/ slow", "/backup slow"]


async def test_a_timeout_without_a_fallback_answer_is_504(tools: ToolService, server: str) -> None:
    await tools.register(http_spec(server, fallback=Fallback(strategy="cache", stale_after_s=5)))
    report = await tools.call(call("web_echo", "k", text="slow"), now=NOW)
    assert report.result.status_code == 504
    assert "timed out after 1 s" in (report.result.error or "")


async def test_the_health_endpoint_is_probed(tools: ToolService, server: str) -> None:
    await tools.register(http_spec(server))
    probes = await tools.probe_all()
    assert probes["web_echo"].quota_remaining == 99
    health = await tools.health("web_echo")
    assert health is not None
    assert (health.latency_ms, health.success_rate, health.quota_remaining) == (5.0, 0.97, 99)
    assert health.healthy and not health.slow


async def test_chaos_on_an_http_tool_holds_answers_in_front_and_kills_nothing(
    tools: ToolService, server: str
) -> None:
    """No process of its own here: latency and a hang are held in front of the executor,
    and there is nothing to kill; the rest reach the real tool."""
    mock = Fallback(strategy="mock", mock_result={"echo": "mocked"})
    spec = http_spec(server, fallback=mock, sample_arguments={"text": "hi"}, timeout_s=60.0)
    await tools.register(spec)  # not about timing: only the faults' budget (1 s) is tight
    report = await chaos(tools, "web_echo", recover_s=60.0)
    assert report.passed, report
    outcomes = {outcome.fault: outcome for outcome in report.outcomes}
    assert not outcomes["killed"].applies and "no process of its own" in outcomes["killed"].how
    for fault in ("latency", "hang"):
        assert "held back" in outcomes[fault].how
        assert outcomes[fault].primary.startswith("504: web_echo timed out after 1 s")
    assert outcomes["unverified"].alerted
    assert outcomes["unverified"].result is not None
    assert outcomes["unverified"].result.fallback == "mock"
