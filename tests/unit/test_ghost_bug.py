"""The ghost bug: a stale approver rendered from a cached value, found from the log.

The design's scenario: the org changed the user's approver, the rule engine says so, yet
the confirmation still names the old one. Here a conversation processor with the bug
(it caches the approver it rendered per user, and renders the cache from then on) runs
two expense reports of the same user on the whole bus in memory; between them the rule
engine's answer changes from 张主管 to 李经理. What the bus did is written as the topics
would hold it, exported as a bundle, and:

* ``hermesbus replay --bundle --shadow``, with today's (fixed) conversation code, exits 1
  and names ``payload.body.text`` of the second report's confirmation: recorded 张主管,
  replayed 李经理;
* ``hermesbus trace`` of that envelope's trace shows the offending span (the
  conversation's S3.1→S4 turn), and the session's previous trace (the upload's
  validation) holds the rule engine's result naming 李经理: the stale value is followed
  across the layers.
"""

from __future__ import annotations

import json
from pathlib import Path

from hermesbus import Envelope, Reply, ToolResult
from hermesbus.codec import default_codec
from hermesbus.compose.stack import in_memory
from hermesbus.connectors.sqlite.index import SqliteTraceIndex
from hermesbus.processors import conversation, protocol
from hermesbus.replay.bundle import write_bundle
from hermesbus.runtime import Handler, HandlerInput, Outcome
from hermesbus.trace.index import DocumentSettings, document
from tests.cli_process import clean_env, hermesbus

from .processors.conversation.demo import (
    RULES,
    demo_tools,
    user_turn,
)

SAID = ("我要报上个月去深圳的差旅费", "[上传两张图片]", "不用，就这三张")
APPROVER = "审批人："


def with_cached_approver(handle: Handler) -> Handler:
    """The bug: the first approver rendered for a user is cached and rendered ever after."""
    cache: dict[str, str] = {}

    async def buggy(inp: HandlerInput) -> Outcome:
        outcome = await handle(inp)
        return Outcome(
            emit=tuple(_stale(e, cache) for e in outcome.emit),
            state=outcome.state,
            timers=outcome.timers,
            cancel=outcome.cancel,
        )

    return buggy


def _stale(envelope: Envelope, cache: dict[str, str]) -> Envelope:
    body = envelope.payload.body
    if not isinstance(body, Reply) or APPROVER not in body.text:
        return envelope
    head, _, rest = body.text.partition(APPROVER)
    name, dot, tail = rest.partition("。")
    cached = cache.setdefault(envelope.user_id, name)
    text = f"{head}{APPROVER}{cached}{dot}{tail}"
    payload = envelope.payload.model_copy(update={"body": body.model_copy(update={"text": text})})
    return envelope.model_copy(update={"payload": payload})


async def test_the_stale_approver_is_named_by_replay_and_found_in_its_trace(
    tmp_path: Path,
) -> None:
    approver = {"now": "张主管"}
    rules = lambda call: {**RULES, "approver": approver["now"]}  # noqa: E731 - the org's answer
    tools, healthy = demo_tools(rule_engine_tool=rules)
    buggy = with_cached_approver(conversation.handle)
    policy = protocol.ProtocolPolicy()
    async with in_memory(
        tmp_path / "bus", tools=tools, health=healthy, conversation_handler=buggy, policy=policy
    ) as bus:
        for session, start in (("sess_first", 0), ("sess_second", 3600)):
            for n, text in enumerate(SAID):
                await bus.send(user_turn(session, n, text, start + 30 * n))
            approver["now"] = "李经理"  # the org changed the approver after the first report
    assert bus.refused == []
    said = [s.envelope for s in bus.sent if isinstance(s.envelope.payload.body, Reply)]
    confirmations = [e for e in said if APPROVER in e.payload.body.text]  # type: ignore[union-attr]
    assert [e.session_id for e in confirmations] == ["sess_first", "sess_second"]
    assert all("审批人：张主管" in e.payload.body.text for e in confirmations)  # type: ignore[union-attr]  # the bug

    # what the topics hold, as a bundle, replayed with today's code
    bundle = tmp_path / "ghost.tar.gz"
    records = bus.records()
    write_bundle(
        bundle, records, sessions=["sess_first", "sess_second"], source="the ghost-bug run"
    )
    env = clean_env(tmp_path / "home")
    replayed = hermesbus(
        "replay", "--bundle", str(bundle), "--shadow", "--json", env=env, cwd=tmp_path
    )
    assert replayed.code == 1, replayed.output
    (found,) = json.loads(replayed.out)["divergences"]
    assert found["processor"] == "conversation" and found["path"] == "payload.body.text"
    assert "审批人：张主管" in found["recorded"] and "审批人：李经理" in found["replayed"]
    assert found["input"]["message_id"] == "sess_second-turn-2"  # "不用，就这三张"
    offending = next(e for e in confirmations if e.session_id == "sess_second")
    assert found["output"]["message_id"] == offending.message_id

    # the trace of that turn, from the trace index, shows the span and the rule engine's answer
    codec, settings = default_codec(), DocumentSettings()
    async with SqliteTraceIndex(tmp_path / "home" / "index.sqlite3") as index:
        await index.write([document(r, codec.decode(r.value), settings) for r in records])
    trace_id = offending.trace_id
    drawn = hermesbus("trace", trace_id, env=env, cwd=tmp_path)
    assert drawn.code == 0, drawn.output
    span = next(
        line
        for line in drawn.out.splitlines()
        if line.startswith("conversation") and "S3.1→S4" in line
    )
    assert "UserTurn" in span
    # the session's earlier trace (the upload's validation) holds the rule engine's answer
    second = [codec.decode(r.value) for r in records if r.key == b"sess_second"]
    answers = [
        (e.trace_id, e.payload.body.result_json)
        for e in second
        if isinstance(e.payload.body, ToolResult) and e.payload.body.tool == "rule_engine_tool"
    ]
    assert [t for t, _ in answers] == ["sess_second-trace-1"]
    assert json.loads(answers[0][1])["approver"] == "李经理"
