"""The OpenAI-compatible intent port against a real local HTTP server, and its fallback."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

import pytest
from pydantic import SecretStr

from hermesbus.errors import IntentError
from hermesbus.processors.conversation import (
    ConversationSettings,
    HttpIntentParser,
    IntentName,
    RuleIntentParser,
    build_ports,
)

from .demo import Driver, moves

NOW = datetime(2024, 6, 3, 9, 0, tzinfo=UTC)
GOOD = {
    "intent": "expense_submit",
    "city": "Shenzhen",
    "category": "差旅",
    "period_start": "2024-05-01",
    "period_end": "2024-05-31",
    "hold": False,
}


class _Endpoint(BaseHTTPRequestHandler):
    """Answers chat completions with whatever the test put in ``answer``."""

    answer: ClassVar[dict[str, Any]] = {"status": 200, "content": "{}"}
    seen: ClassVar[list[dict[str, Any]]] = []

    def do_POST(self) -> None:
        length = int(self.headers["Content-Length"])
        body = json.loads(self.rfile.read(length))
        type(self).seen.append(
            {"path": self.path, "auth": self.headers.get("Authorization"), "body": body}
        )
        answer = type(self).answer
        if "raw" in answer:
            payload = answer["raw"].encode()
        else:
            message = {"role": "assistant", "content": answer["content"]}
            payload = json.dumps({"choices": [{"index": 0, "message": message}]}).encode()
        self.send_response(answer["status"])
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format: str, *args: Any) -> None:
        return


@pytest.fixture
def endpoint() -> Iterator[str]:
    _Endpoint.seen.clear()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Endpoint)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def _answer(**answer: Any) -> None:
    _Endpoint.answer = {"status": 200, **answer}


async def test_a_json_intent_is_validated_and_normalised(endpoint: str) -> None:
    _answer(content=json.dumps(GOOD))
    async with HttpIntentParser(endpoint, model="m1", api_key=SecretStr("sk-test")) as parser:
        intent = await parser.parse("我要报上个月去深圳的差旅费", now=NOW, context={"state": "S1"})
    assert intent.name is IntentName.EXPENSE_SUBMIT and intent.source == "llm"
    assert (intent.city, intent.month) == ("深圳", "2024-05")
    (request,) = _Endpoint.seen
    assert request["path"] == "/v1/chat/completions"
    assert request["auth"] == "Bearer sk-test"
    assert request["body"]["model"] == "m1" and request["body"]["temperature"] == 0
    assert request["body"]["messages"][1]["content"] == "我要报上个月去深圳的差旅费"
    assert "2024-06-03" in request["body"]["messages"][0]["content"]


async def test_without_a_key_no_authorization_is_sent(endpoint: str) -> None:
    _answer(content=json.dumps({"intent": "confirm"}))
    parser = HttpIntentParser(endpoint, model="m1")  # not started: a client per call
    assert (await parser.parse("确认", now=NOW, context={})).name is IntentName.CONFIRM
    assert _Endpoint.seen[0]["auth"] is None


@pytest.mark.parametrize(
    "answer",
    [
        {"content": "I think the user wants to submit an expense"},
        {"content": json.dumps({"intent": "book_flight"})},
        {"content": json.dumps(["expense_submit"])},
        {"raw": "<html>oops</html>"},
        {"raw": json.dumps({"choices": []})},
        {"status": 500, "content": json.dumps(GOOD)},
    ],
)
async def test_any_bad_answer_is_an_intent_error(
    endpoint: str, answer: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    _answer(**answer)
    caplog.set_level(logging.DEBUG)
    async with HttpIntentParser(endpoint, model="m1", api_key=SecretStr("sk-secret")) as parser:
        with pytest.raises(IntentError):
            await parser.parse("确认", now=NOW, context={})
    assert "sk-secret" not in caplog.text


async def test_an_unreachable_endpoint_is_an_intent_error(endpoint: str) -> None:
    parser = HttpIntentParser("http://127.0.0.1:9/v1", model="m1", timeout_s=1.0)
    with pytest.raises(IntentError, match="failed"):
        await parser.parse("确认", now=NOW, context={})


async def test_the_handler_falls_back_to_the_rules_on_garbage(endpoint: str) -> None:
    _answer(content="not json at all")
    async with HttpIntentParser(endpoint, model="m1") as parser:
        d = Driver(ports={"intent": parser})
        out = await d.say("我要报上个月去深圳的差旅费")
    assert _Endpoint.seen  # the endpoint was asked
    assert moves(out) == [(None, "S1")]  # ... and the rules understood the turn
    assert d.cycle()[1] == "check_budget"


async def test_the_handler_uses_the_endpoint_when_it_answers(endpoint: str) -> None:
    _answer(content=json.dumps({"intent": "unclear"}))
    async with HttpIntentParser(endpoint, model="m1") as parser:
        d = Driver(ports={"intent": parser})
        out = await d.say("我要报上个月去深圳的差旅费")
    assert moves(out) == [(None, "S1"), ("S1", "S5")]  # the endpoint's answer wins


def test_build_ports_from_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HERMES_LLM_URL", raising=False)
    assert isinstance(build_ports()["intent"], RuleIntentParser)
    monkeypatch.setenv("HERMES_LLM_URL", "http://llm.local/v1/")
    monkeypatch.setenv("HERMES_LLM_MODEL", "qwen")
    monkeypatch.setenv("HERMES_LLM_API_KEY", "sk-env")
    parser = build_ports()["intent"]
    assert isinstance(parser, HttpIntentParser)
    assert (parser.url, parser.model) == ("http://llm.local/v1/chat/completions", "qwen")
    assert "sk-env" not in repr(ConversationSettings())
