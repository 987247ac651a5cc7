"""A session id with control characters, or longer than SESSION_ID_MAX, breaks the contract:
the runtime dead-letters it (ContractError) and the partition moves on; the longest
allowed id is processed. Signed records, as an app holding a key would write them."""

from __future__ import annotations

import io

import fastavro
import pytest

from hermesbus.codec import Codec
from hermesbus.codec._convert import to_record
from hermesbus.connectors.kafka import KafkaConfig
from hermesbus.connectors.sqlite import SqliteStateStore
from hermesbus.contract import headers as h
from hermesbus.contract.envelope import SESSION_ID_MAX

from .support import (
    DLQ,
    IN,
    OUT,
    ConversationProcessor,
    counting,
    produce,
    produce_raw,
    read,
    replies,
    turn,
    wait_for,
)

pytestmark = pytest.mark.kafka

BAD = ["s\x1b[2J", "s\x1b]0;owned\x07", "s\u202etxt", "x" * (SESSION_ID_MAX + 1)]


def _with_session(session_id: str, seq: int) -> bytes:
    """Valid Avro for the envelope schema carrying ``session_id`` (no model refuses it here)."""
    codec = Codec()
    record = to_record(turn("s1", seq))
    record["session_id"] = session_id
    buffer = io.BytesIO()
    buffer.write(b"\xc3\x01" + codec.fingerprint)
    fastavro.schemaless_writer(buffer, fastavro.parse_schema(codec.schema), record)
    return buffer.getvalue()


async def test_bad_session_ids_are_dead_lettered_and_the_longest_good_one_runs(
    broker: str, prefix: str, store: SqliteStateStore
) -> None:
    longest = "y" * SESSION_ID_MAX
    for seq, session_id in enumerate(BAD):
        await produce_raw(broker, prefix + IN, session_id.encode(), _with_session(session_id, seq))
    await produce(broker, prefix + IN, [turn(longest, 0)])
    kafka = KafkaConfig(bootstrap=broker)
    processor = ConversationProcessor(
        "ids", counting, [IN], store=store, kafka=kafka, topic_prefix=prefix
    )
    async with processor:
        await wait_for(
            lambda: processor.stats.processed == 1 and processor.stats.dead_letters == len(BAD)
        )
    assert (processor.stats.processed, processor.stats.dead_letters) == (1, len(BAD))

    letters = await read(broker, prefix + DLQ, until=len(BAD))
    assert sorted(r.value for r in letters) == sorted(
        _with_session(s, n) for n, s in enumerate(BAD)
    )
    for letter in letters:
        found = list(letter.headers)
        assert h.header(found, h.DLQ_ERROR_CLASS) == "hermesbus.errors.ContractError"
        assert "session_id" in (h.header(found, h.DLQ_ERROR_MESSAGE) or "")
    (answer,) = replies(await read(broker, prefix + OUT, until=1))
    assert answer.session_id == longest
