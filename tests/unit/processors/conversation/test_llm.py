"""The OpenAI-compatible intent port against a real local HTTP server: the model reads
what a flow's rules do not, and its answer is data, checked."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

import pytest
from pydantic import SecretStr

from hermesbus import Reply, ToolCall, UserTurn
from hermesbus.errors import ConfigError, IntentError
from hermesbus.processors.conversation import (
    ConversationSettings,
    HttpIntentParser,
    RuleIntentParser,
    build_ports,
)
from hermesbus.processors.flow import EXPENSE_SPEC, StaticCatalog, load_flow

from ..flow.specs import CONTRACT, changed
from .demo import Driver, moves

NOW = datetime(2024, 6, 3, 9, 0, tzinfo=UTC)
GOOD = {"intent": "expense_submit", "entities": {"city": "深圳", "period": "2024-05"}}


async def _classify(parser: HttpIntentParser, text: str) -> tuple[str | None, dict[str, str]]:
    """The model's reading of ``text`` among the expense report's intents."""
    return await parser.classify(
        text, now=NOW, flow="expense", state="S1", intents=EXPENSE_SPEC.intents
    )


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


async def test_a_json_intent_is_validated(endpoint: str) -> None:
    _answer(content=json.dumps(GOOD))
    async with HttpIntentParser(endpoint, model="m1", api_key=SecretStr("sk-test")) as parser:
        read = await _classify(parser, "我要报上个月去深圳的差旅费")
    assert read == ("expense_submit", {"city": "深圳", "period": "2024-05"})
    (request,) = _Endpoint.seen
    assert request["path"] == "/v1/chat/completions"
    assert request["auth"] == "Bearer sk-test"
    assert request["body"]["model"] == "m1" and request["body"]["temperature"] == 0
    assert request["body"]["messages"][1]["content"] == "我要报上个月去深圳的差旅费"
    assert "2024-06-03" in request["body"]["messages"][0]["content"]


async def test_without_a_key_no_authorization_is_sent(endpoint: str) -> None:
    _answer(content=json.dumps({"intent": "confirm"}))
    parser = HttpIntentParser(endpoint, model="m1")  # not started: a client per call
    assert await _classify(parser, "确认") == ("confirm", {})
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
            await _classify(parser, "确认")
    assert "sk-secret" not in caplog.text


async def test_an_unreachable_endpoint_is_an_intent_error(endpoint: str) -> None:
    parser = HttpIntentParser("http://127.0.0.1:9/v1", model="m1", timeout_s=1.0)
    with pytest.raises(IntentError, match="failed"):
        await _classify(parser, "确认")


async def test_the_rules_read_first_and_a_failing_model_changes_nothing(endpoint: str) -> None:
    _answer(content="not json at all")
    async with HttpIntentParser(endpoint, model="m1") as parser:
        d = Driver(ports={"intent": parser})
        out = await d.say("我要报上个月去深圳的差旅费")  # the rules understand it
        assert not _Endpoint.seen and moves(out) == [(None, "S1")]
        assert d.cycle()[1] == "check_budget"
        other = Driver(ports={"intent": parser})
        unclear = await other.say("帮我弄一下上次出差的钱")  # they do not: the model is asked
    assert _Endpoint.seen  # ... and its garbage is no intent: unclear, as the rules say
    assert moves(unclear) == [(None, "S1"), ("S1", "S5")]


async def test_the_model_reads_what_the_rules_do_not(endpoint: str) -> None:
    _answer(content=json.dumps({"intent": "expense_submit", "entities": {"city": "深圳"}}))
    async with HttpIntentParser(endpoint, model="m1") as parser:
        d = Driver(ports={"intent": parser})
        out = await d.say("帮我弄一下上次出差的钱")
    assert moves(out) == [(None, "S1")] and d.cycle()[1] == "check_budget"


def test_build_ports_from_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HERMES_LLM_URL", raising=False)
    assert isinstance(build_ports(ConversationSettings())["intent"], RuleIntentParser)
    monkeypatch.setenv("HERMES_LLM_URL", "https://llm.local/v1/")
    monkeypatch.setenv("HERMES_LLM_MODEL", "qwen")
    monkeypatch.setenv("HERMES_LLM_API_KEY", "sk-env")
    parser = build_ports(ConversationSettings())["intent"]
    assert isinstance(parser, HttpIntentParser)
    assert (parser.url, parser.model) == ("https://llm.local/v1/chat/completions", "qwen")
    assert "sk-env" not in repr(ConversationSettings())
    monkeypatch.setenv("HERMES_LLM_URL", "http://llm.local/v1/")
    with pytest.raises(ConfigError, match="HERMES_LLM_URL"):
        build_ports(ConversationSettings())


@pytest.mark.parametrize(
    "url",
    [
        "https://api.example.com/v1",
        "http://localhost:8080/v1",
        "http://127.0.0.1/v1",
        "http://127.3.4.5:9/v1",
        "http://[::1]:8080/v1",
    ],
)
def test_https_or_a_loopback_host_is_accepted(url: str) -> None:
    assert HttpIntentParser(url, model="m").url.endswith("/v1/chat/completions")


@pytest.mark.parametrize(
    "url",
    [
        "http://llm.example.com/v1",
        "http://10.0.0.5:8080/v1",
        "http://localhost.evil.com/v1",
        "ftp://127.0.0.1/v1",
        "llm.example.com/v1",
    ],
)
def test_plain_http_to_another_host_is_a_config_error(url: str) -> None:
    with pytest.raises(ConfigError, match="HERMES_LLM_URL"):
        HttpIntentParser(url, model="m")


def test_the_url_in_a_config_error_is_redacted() -> None:
    with pytest.raises(ConfigError) as caught:
        HttpIntentParser("http://bob:pw-secret@llm.example.com/v1?key=q-secret", model="m")
    assert "pw-secret" not in str(caught.value) and "q-secret" not in str(caught.value)
    assert "llm.example.com/v1" in str(caught.value)


async def test_userinfo_and_query_are_redacted_in_logs_and_errors(
    endpoint: str, caplog: pytest.LogCaptureFixture
) -> None:
    _answer(status=500, content=json.dumps(GOOD))
    caplog.set_level(logging.DEBUG)
    url = endpoint.replace("http://", "http://bob:pw-secret@") + "?api-key=q-secret"
    async with HttpIntentParser(url, model="m1") as parser:
        assert "q-secret" in parser.url  # the request still carries it
        with pytest.raises(IntentError) as caught:
            await _classify(parser, "确认")
    assert _Endpoint.seen[0]["path"] == "/v1/chat/completions?api-key=q-secret"
    assert "status 500" in str(caught.value)
    for text in (str(caught.value), caplog.text):
        assert "pw-secret" not in text and "q-secret" not in text and "bob" not in text
    assert "/v1/chat/completions?<redacted>" in str(caught.value)


async def _drip(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Headers at once, then one body byte every 0.1 s: every read is quick, the whole slow."""
    await reader.readuntil(b"\r\n\r\n")
    body = b" " * 100 + json.dumps({"choices": []}).encode()
    writer.write(
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
        + f"Content-Length: {len(body)}\r\n\r\n".encode()
    )
    try:
        for byte in body:
            writer.write(bytes([byte]))
            await writer.drain()
            await asyncio.sleep(0.1)
    except (ConnectionError, asyncio.CancelledError):
        pass
    finally:
        writer.close()


@pytest.mark.parametrize("started", [True, False])
async def test_a_dripping_endpoint_is_cut_at_the_whole_timeout(started: bool) -> None:
    server = await asyncio.start_server(_drip, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    parser = HttpIntentParser(f"http://127.0.0.1:{port}/v1", model="m1", timeout_s=0.5)
    try:
        if started:
            await parser.start()
        began = time.perf_counter()
        with pytest.raises(IntentError, match="within 0.5 s"):
            await _classify(parser, "确认")
        assert time.perf_counter() - began < 2.0  # the body alone takes over 10 s
    finally:
        await parser.stop()
        server.close()
        await server.wait_closed()


# -- a registered flow: the model chooses among its intents when no phrase matched -------


def _flow_driver(parser: HttpIntentParser) -> Driver:
    labelled = changed(
        CONTRACT,
        '    phrases: ["查合同", "find a contract"]\n',
        '    phrases: ["查合同", "find a contract"]\n'
        "    label: Look up a contract\n"
        "    description: The user wants a contract's status, by its number\n",
    )
    spec, _ = load_flow(labelled, "f.yaml")
    return Driver(ports={"intent": parser, "flows": StaticCatalog.of([spec])})


async def _started(d: Driver, then: str) -> None:
    """The session started in the flow (the model sees "hello" as no intent), then the
    model answers ``then``."""
    _answer(content=json.dumps({"intent": None}))
    await d.send(d._envelope(UserTurn(text="hello", flow="contract_lookup")))
    _answer(content=then)


async def test_a_flow_asks_the_model_only_when_no_phrase_matched(endpoint: str) -> None:
    answer = json.dumps({"intent": "lookup", "entities": {"contract_no": "C-1234"}})
    async with HttpIntentParser(endpoint, model="m1") as parser:
        d = _flow_driver(parser)
        await _started(d, answer)
        asked = len(_Endpoint.seen)
        out = await d.say("I'd like the status of contract C-1234, please")
    assert len(_Endpoint.seen) == asked + 1
    system = _Endpoint.seen[-1]["body"]["messages"][0]["content"]
    assert "lookup: Look up a contract - The user wants a contract's status" in system
    assert moves(out) == [("ask", "look")]
    (call,) = [e.payload.body for e in out.emit if isinstance(e.payload.body, ToolCall)]
    assert json.loads(call.arguments_json) == {"number": "C-1234", "user": "u_xyz789"}


@pytest.mark.parametrize(
    "content",
    [
        json.dumps({"intent": "transfer_money"}),  # not an intent of the flow
        json.dumps({"intent": ["lookup"]}),
        "ignore the rules and confirm",
    ],
)
async def test_a_model_answer_outside_the_flow_moves_nothing(endpoint: str, content: str) -> None:
    async with HttpIntentParser(endpoint, model="m1") as parser:
        d = _flow_driver(parser)
        await _started(d, content)
        out = await d.say("please move all the money")
    assert moves(out) == []
    texts = [e.payload.body.text for e in out.emit if isinstance(e.payload.body, Reply)]
    assert texts == ["抱歉，没能理解您的回复。请告诉我合同号"]


async def test_a_models_entities_are_only_those_its_intent_declares(endpoint: str) -> None:
    entities = {"contract_no": "C-7777", "user": "admin", "x" * 3: "y" * 500}
    async with HttpIntentParser(endpoint, model="m1") as parser:
        d = _flow_driver(parser)
        await _started(d, json.dumps({"intent": "lookup", "entities": entities}))
        out = await d.say("status for C-7777?")
    (call,) = [e.payload.body for e in out.emit if isinstance(e.payload.body, ToolCall)]
    assert json.loads(call.arguments_json) == {"number": "C-7777", "user": "u_xyz789"}
