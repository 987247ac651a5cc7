"""Apps see each reply once: a reply re-sent under the same message id (a processor's
outbox after a crash) is dropped by the client's reply iterators, on both brokers.

The re-sends are the bus's own signed records, written twice as an outbox writes them
after a kill -9; what is checked is what the app's iterators hand it.
"""

from __future__ import annotations

import asyncio

import pytest

from hermesbus.client import Client, Replies
from hermesbus.codec import Codec
from hermesbus.contract.envelope import Envelope
from tests.builders import reply_to
from tests.integration.stacks import conversation_topics

pytestmark = pytest.mark.kafka

CODEC = Codec()
WAIT_S = 20.0


@pytest.fixture
async def prefix(broker: str, unique: str) -> str:
    return await conversation_topics(broker, f"once{unique}.")


def _text(envelope: Envelope) -> str:
    return envelope.payload.body.text  # type: ignore[union-attr]


async def _next(replies: Replies) -> str:
    async with asyncio.timeout(WAIT_S):
        return _text(await anext(replies))


async def test_a_reply_sent_twice_is_handed_over_once(broker: str, prefix: str) -> None:
    async with (
        Client(bootstrap=broker, topic_prefix=prefix, codec=CODEC) as app,
        Client(bootstrap=broker, topic_prefix=prefix, codec=CODEC, identity="conversation") as bus,
    ):
        turn = app.turn("s-once", "u", "你好")
        first, second = reply_to(turn, "one"), reply_to(turn, "two")
        async with app.replies(turn.session_id) as replies:
            for envelope in (first, first, second, first, second):
                await bus.send(envelope)
            assert await _next(replies) == "one"
            assert await _next(replies) == "two"
            third = reply_to(turn, "three")
            await bus.send(third)
            assert await _next(replies) == "three"  # the copies in between were dropped
    assert app.repeated == 3


async def test_listening_anew_does_not_hand_over_a_reply_again(broker: str, prefix: str) -> None:
    async with (
        Client(bootstrap=broker, topic_prefix=prefix, codec=CODEC) as app,
        Client(bootstrap=broker, topic_prefix=prefix, codec=CODEC, identity="conversation") as bus,
    ):
        turn = app.turn("s-anew", "u", "你好")
        answer = reply_to(turn, "answer")
        async with app.replies(turn.session_id) as replies:
            await bus.send(answer)
            assert await _next(replies) == "answer"
        async with app.replies(turn.session_id) as replies:  # the app's next turn
            await bus.send(answer)  # re-sent after the app stopped listening
            await bus.send(reply_to(turn, "next"))
            assert await _next(replies) == "next"
    assert app.repeated == 1


async def test_two_listeners_at_once_each_get_every_reply_once(broker: str, prefix: str) -> None:
    async with (
        Client(bootstrap=broker, topic_prefix=prefix, codec=CODEC) as app,
        Client(bootstrap=broker, topic_prefix=prefix, codec=CODEC, identity="conversation") as bus,
    ):
        turn = app.turn("s-both", "u", "你好")
        answer, after = reply_to(turn, "answer"), reply_to(turn, "after")
        async with app.replies(turn.session_id) as one, app.replies(turn.session_id) as two:
            await one.start()
            await two.start()
            for envelope in (answer, answer, after):
                await bus.send(envelope)
            assert [await _next(one), await _next(one)] == ["answer", "after"]
            assert [await _next(two), await _next(two)] == ["answer", "after"]
    assert app.repeated == 2  # each listener dropped the copy once
