"""Send the first envelope of the expense report through Kafka and read it back decoded.

Used by deploy/local/run.sh until the runtime (`hermesbus up`) exists.
"""

from __future__ import annotations

import asyncio
import sys
import uuid
from datetime import UTC, datetime

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

import hermesbus as h
from hermesbus import codec

TOPIC = "hermes.conversation.in"


async def main(bootstrap: str) -> None:
    session = f"sess_{uuid.uuid4().hex[:8]}"
    envelope = h.Envelope(
        message_id=f"msg_{uuid.uuid4().hex}",
        timestamp=datetime.now(UTC),
        source="app:demo",
        target="conversation:S1",
        session_id=session,
        user_id="u_demo",
        trace_id=f"trace_{uuid.uuid4().hex[:12]}",
        payload=h.Payload(task="user_turn", body=h.UserTurn(text="我要报上个月去深圳的差旅费")),
    )
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=False)
    await producer.start()
    try:
        sent = await producer.send_and_wait(TOPIC, codec.encode(envelope), key=session.encode())
    finally:
        await producer.stop()
    print(f"sent {len(codec.encode(envelope))} bytes to {TOPIC}[{sent.partition}]@{sent.offset}")

    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        partition = TopicPartition(TOPIC, sent.partition)
        consumer.assign([partition])
        consumer.seek(partition, sent.offset)
        record = await asyncio.wait_for(consumer.getone(), timeout=30)
    finally:
        await consumer.stop()
    back = codec.decode(record.value)
    print(f"read back {back.message_id} from {back.source} for {back.session_id}:")
    print(f"  {back.payload.body!r}")
    print("  identical to what was sent:", back == envelope)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
