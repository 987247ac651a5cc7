"""The guard every processor's runtime applies: a proven signer, speaking for itself,
writing what the protocol's table lets it write on that topic."""

from __future__ import annotations

import pytest

from hermesbus import Envelope, Payload
from hermesbus.contract.envelope import Metadata
from hermesbus.contract.payloads import (
    MemoryTier,
    MemoryWrite,
    Reply,
    TimerFired,
    ToolCall,
    ToolResult,
    ToolResults,
    UserTurn,
)
from hermesbus.errors import IdentityError
from hermesbus.identity import Guard, Keyring, new_key
from hermesbus.processors.protocol import IDENTITIES, WRITERS, ProtocolPolicy
from tests import builders

KEYS = Keyring({identity: [new_key()] for identity in IDENTITIES})


def guard(identity: str, processor: str | None = None, prefix: str = "") -> Guard:
    return Guard(identity, KEYS, processor=processor, policy=ProtocolPolicy(), prefix=prefix)


def envelope(source: str, target: str, body: object, attempt: int = 1) -> Envelope:
    return builders.turn(
        source=source,
        target=target,
        payload=Payload(body=body),
        metadata=Metadata(attempt=attempt),
    )


SUBMIT = ToolCall(tool="finance_tool", arguments_json='{"amount": 999999}', idempotency_key="k1")
EDGE = MemoryWrite(
    tier=MemoryTier.LONG_TERM, key="expense:x|approved_by|person:CEO", value_json="{}"
)


@pytest.mark.parametrize(
    ("topic", "signer", "forged", "code"),
    [
        # an app claiming conversation:S4 asks the dispatcher to submit an expense
        (
            "hermes.dispatcher",
            "app",
            envelope("conversation:S4", "mcp:dispatcher", SUBMIT),
            "identity.impersonation",
        ),
        # an app speaking as itself may not address the dispatcher at all
        (
            "hermes.dispatcher",
            "app",
            envelope("app:web", "mcp:dispatcher", SUBMIT),
            "identity.forbidden",
        ),
        # a MemoryWrite claiming mcp:dispatcher, signed by an app
        (
            "hermes.memory",
            "app",
            envelope("mcp:dispatcher", "memory:long_term", EDGE),
            "identity.impersonation",
        ),
        # a ToolCall claiming mcp:dispatcher straight to the tool topic
        (
            "hermes.tool",
            "app",
            envelope("mcp:dispatcher", "tool:finance_tool", SUBMIT),
            "identity.impersonation",
        ),
        # even a real component may not write another's topic or another's bodies
        (
            "hermes.tool",
            "conversation",
            envelope("conversation:S4", "tool:finance_tool", SUBMIT),
            "identity.forbidden",
        ),
        (
            "hermes.memory",
            "tool",
            envelope("tool:finance_tool", "memory:long_term", EDGE),
            "identity.forbidden",
        ),
        (
            "hermes.dispatcher",
            "memory",
            envelope("memory:long_term", "mcp:dispatcher", SUBMIT),
            "identity.forbidden",
        ),
        (
            "hermes.conversation.in",
            "tool",
            envelope("tool:org_tool", "conversation:S2", ToolResults()),
            "identity.forbidden",
        ),
        (
            "hermes.conversation.in",
            "app",
            envelope("app:web", "conversation:in", Reply(text="x")),
            "identity.forbidden",
        ),
        (
            "hermes.unknown",
            "dispatcher",
            envelope("mcp:dispatcher", "tool:x", SUBMIT),
            "identity.forbidden",
        ),
    ],
)
def test_forged_and_out_of_place_envelopes_are_refused(
    topic: str, signer: str, forged: Envelope, code: str
) -> None:
    receiver = guard("dispatcher")
    with pytest.raises(IdentityError) as caught:
        receiver.admit(topic, signer, forged, retry=False)
    assert caught.value.code == code


@pytest.mark.parametrize(
    ("topic", "signer", "legit"),
    [
        (
            "hermes.conversation.in",
            "app",
            envelope("app:web", "conversation:in", UserTurn(text="hi")),
        ),
        (
            "hermes.dispatcher",
            "conversation",
            envelope("conversation:S4", "mcp:dispatcher", SUBMIT),
        ),
        ("hermes.tool", "dispatcher", envelope("mcp:dispatcher", "tool:finance_tool", SUBMIT)),
        ("hermes.memory", "dispatcher", envelope("mcp:dispatcher", "memory:long_term", EDGE)),
        (
            "hermes.dispatcher",
            "tool",
            envelope(
                "tool:finance_tool",
                "mcp:dispatcher",
                ToolResult(tool="finance_tool", status_code=200),
            ),
        ),
        (
            "hermes.conversation.out",
            "dispatcher",
            envelope("mcp:dispatcher", "user:app", Reply(text="x")),
        ),
    ],
)
def test_the_protocol_flows_are_admitted(topic: str, signer: str, legit: Envelope) -> None:
    guard("dispatcher", prefix="p.").admit("p." + topic, signer, legit, retry=False)


def test_a_processor_admits_its_own_timers_and_retries_only() -> None:
    tool = guard("tool", "tool-finance_tool")
    timer = TimerFired(timer_id="t", due_at=builders.T0, purpose="p")
    tool_timer = envelope("tool-finance_tool:timer", "tool:finance_tool", timer)
    with pytest.raises(IdentityError, match="identity.forbidden"):  # tools set no timers
        tool.admit("hermes.tool", "tool", tool_timer, retry=False)
    dispatcher = guard("dispatcher")
    own = envelope("dispatcher:timer", "mcp:dispatcher", timer)
    dispatcher.admit("hermes.dispatcher", "dispatcher", own, retry=False)
    with pytest.raises(IdentityError, match="identity.impersonation"):
        dispatcher.admit("hermes.dispatcher", "memory", own, retry=False)
    # the dispatcher re-sends a conversation's call it failed on, as attempt 2
    again = envelope("conversation:S2", "mcp:dispatcher", SUBMIT, attempt=2)
    dispatcher.admit("hermes.dispatcher", "dispatcher", again, retry=True)
    with pytest.raises(IdentityError, match="identity.impersonation"):  # only its own
        dispatcher.admit("hermes.dispatcher", "tool", again, retry=True)
    with pytest.raises(IdentityError, match="identity.impersonation"):  # a first delivery
        dispatcher.admit("hermes.dispatcher", "dispatcher", again, retry=False)


def test_the_dispatcher_rules_read_their_row_of_the_table() -> None:
    from hermesbus.processors.dispatcher._rules import ALLOWED_BODIES

    assert ALLOWED_BODIES == dict(WRITERS["hermes.dispatcher"])
