"""``hermesbus tail`` on a real broker: a session's records in log order, slices by offset
and time, filters, undecodable records listed, and no consumer group touched."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer

from hermesbus.codec import default_codec
from hermesbus.connectors.kafka import KafkaAdmin, KafkaConfig
from hermesbus.contract.envelope import Envelope
from hermesbus.contract.headers import envelope_headers
from hermesbus.identity import KEYS_FILE_ENV
from hermesbus.trace.tail import Filters, Position, tail
from tests.builders import reply_to, turn
from tests.cli_process import Ran, clean_env, hermesbus
from tests.integration.stacks import catalog_topics

pytestmark = pytest.mark.kafka

IN, OUT, TOOL = "hermes.conversation.in", "hermes.conversation.out", "hermes.tool"


def _history() -> list[tuple[str, Envelope | bytes, str]]:
    """(topic, envelope or raw bytes, session), in the order they are appended."""
    history: list[tuple[str, Envelope | bytes, str]] = []
    for n in range(3):
        for session in ("s1", "s2"):
            asked = turn(
                message_id=f"{session}-m{n}", session_id=session, trace_id=f"{session}-t{n}"
            )
            history.append((IN, asked, session))
            if n == 1 and session == "s1":
                history.append((TOOL, b"not an envelope", session))
            history.append((OUT, reply_to(asked, f"answer {n}"), session))
    return history


async def _produce(
    bootstrap: str, prefix: str, history: list[tuple[str, Envelope | bytes, str]]
) -> None:
    """Append the history one record at a time (so log order is append order)."""
    codec = default_codec()
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    try:
        for topic, item, session in history:
            if isinstance(item, Envelope):
                value, headers = codec.encode(item), envelope_headers(item)
            else:
                value, headers = item, [("trace_id", b"s1-t1")]
            await producer.send_and_wait(
                prefix + topic, value, key=session.encode(), headers=headers
            )
            await asyncio.sleep(0.005)  # distinct append times
    finally:
        await producer.stop()


async def _logged(broker: str, unique: str) -> tuple[str, list[tuple[str, Envelope | bytes, str]]]:
    """The catalog's topics under a fresh prefix, with ``_history`` appended: the prefix
    and the history."""
    prefix = f"tail-{unique}."
    await catalog_topics(broker, prefix)
    history = _history()
    await _produce(broker, prefix, history)
    return prefix, history


def _tail(*args: str, tmp_path: Path) -> Ran:
    env = clean_env(tmp_path / "home", **{KEYS_FILE_ENV: os.environ[KEYS_FILE_ENV]})
    return hermesbus("tail", *args, env=env, cwd=tmp_path, timeout=120)


def _ids(ran: Ran) -> list[str]:
    assert ran.code == 0, ran.output
    lines = [json.loads(line) for line in ran.out.splitlines()]
    return [
        (line["envelope"] or {}).get("message_id", f"undecodable@{line['offset']}")
        for line in lines
    ]


async def test_tail_lists_a_session_in_log_order_with_every_field(
    broker: str, unique: str, tmp_path: Path
) -> None:
    prefix, history = await _logged(broker, unique)
    options = ("--bootstrap", broker, "--prefix", prefix)
    ran = await asyncio.to_thread(_tail, "--session", "s1", "--json", *options, tmp_path=tmp_path)
    expected = [item.message_id if isinstance(item, Envelope) else None
                for _, item, session in history if session == "s1"]  # fmt: skip
    got = _ids(ran)
    assert [g if not g.startswith("undecodable@") else None for g in got] == expected
    lines = [json.loads(line) for line in ran.out.splitlines()]
    broken = next(line for line in lines if line["envelope"] is None)
    assert broken["topic"] == prefix + TOOL
    assert "not an envelope" not in broken["error"]  # the reason, not the bytes
    assert broken["error"]
    first = lines[0]
    assert first["topic"] == prefix + IN
    assert first["key"] == "s1"
    assert {"key": "trace_id", "value": "s1-t0"} in first["headers"]
    assert first["envelope"]["payload"]["body"]["hermes.mcp.UserTurn"]["text"] == "s1-m0"
    assert isinstance(first["timestamp"], int)
    assert isinstance(first["partition"], int)
    assert isinstance(first["offset"], int)
    assert [line["timestamp"] for line in lines] == sorted(line["timestamp"] for line in lines)

    readable = await asyncio.to_thread(_tail, "--trace", "s2-t2", *options, tmp_path=tmp_path)
    assert readable.code == 0, readable.output
    shown = readable.out.splitlines()
    assert len(shown) == 2, readable.out
    assert "app:web → conversation:in  UserTurn" in shown[0]
    assert "id s2-m2" in shown[0]
    assert "conversation:S1 → app:web" in shown[1]

    replies = await asyncio.to_thread(
        _tail, "--component", "conversation", "--session", "s2", "--json", *options,
        tmp_path=tmp_path,
    )  # fmt: skip
    assert _ids(replies) == [f"reply-s2-m{n}-answer {n}" for n in range(3)]


async def test_tail_reads_slices_by_offset_and_time_and_joins_no_group(
    broker: str, unique: str, tmp_path: Path
) -> None:
    prefix, _ = await _logged(broker, unique)
    kafka = KafkaConfig(bootstrap=broker)
    topics = [prefix + IN]

    async def ids(start: Position, end: Position | None = None, **filters: str) -> list[str]:
        found = tail(kafka, topics, start=start, end=end, filters=Filters(**filters))
        return [t.envelope.message_id async for t in found if t.envelope is not None]

    async with KafkaAdmin(kafka) as admin:
        groups_before = sorted(map(str, await admin.client.list_consumer_groups()))
    everything = await ids(Position("beginning"))
    assert everything == ["s1-m0", "s2-m0", "s1-m1", "s2-m1", "s1-m2", "s2-m2"]
    assert await ids(Position("end")) == []
    # offsets count within a partition: the session's (s1 and s2 may share it)
    s2 = tail(kafka, topics, start=Position("beginning"), filters=Filters(session="s2"))
    offsets = [t.offset async for t in s2]
    assert len(offsets) == 3
    assert await ids(Position("offset", offsets[1]), session="s2") == ["s2-m1", "s2-m2"]
    between = await ids(
        Position("offset", offsets[1]), Position("offset", offsets[2]), session="s2"
    )
    assert between == ["s2-m1"]
    assert await ids(Position("offset", 99)) == []
    # by append time: from the third turn's time, to (excluded) the fifth's
    listed = tail(kafka, topics, start=Position("beginning"))
    in_times = [t.timestamp_ms async for t in listed]  # the times the log has
    from_third = await ids(Position("time", in_times[2]), Position("time", in_times[4]))
    assert from_third == ["s1-m1", "s2-m1"]
    assert await ids(Position("time", in_times[-1] + 1)) == []
    assert await ids(Position("time", in_times[-1] + 60_000)) == []
    assert await ids(Position("time", in_times[3]), Position("time", in_times[-1] + 60_000)) == [
        "s2-m1", "s1-m2", "s2-m2"
    ]  # fmt: skip

    async with KafkaAdmin(kafka) as admin:  # nine reads later: no group joined, none made
        groups_after = sorted(map(str, await admin.client.list_consumer_groups()))
    # (earlier tests' empty groups may have expired meanwhile: only a new one would say)
    assert set(groups_after) - set(groups_before) == set()


async def test_tail_of_a_missing_topic_is_one_clear_error(
    broker: str, unique: str, tmp_path: Path
) -> None:
    ran = await asyncio.to_thread(
        _tail, "--topic", f"nothing-{unique}", "--bootstrap", broker, tmp_path=tmp_path
    )
    assert ran.code == 1
    assert f"no topic nothing-{unique} on {broker}" in ran.err
    assert "Traceback" not in ran.output
    bad = await asyncio.to_thread(
        _tail, "--from", "yesterday", "--bootstrap", broker, tmp_path=tmp_path
    )
    assert bad.code == 2
    assert "'yesterday' is not a position" in bad.err


async def test_tail_follows_new_records_until_stopped(broker: str, unique: str) -> None:
    prefix = f"tail-{unique}."
    await catalog_topics(broker, prefix)
    kafka = KafkaConfig(bootstrap=broker)
    first: list[tuple[str, Envelope | bytes, str]] = [(IN, turn(message_id="before"), "s1")]
    await _produce(broker, prefix, first)
    seen: list[str] = []
    got = [asyncio.Event(), asyncio.Event()]

    async def follow() -> None:
        async for tailed in tail(kafka, [prefix + IN], start=Position("beginning"), follow=True):
            assert tailed.envelope is not None
            seen.append(tailed.envelope.message_id)
            got[len(seen) - 1].set()

    following = asyncio.create_task(follow())
    try:
        async with asyncio.timeout(30):
            await got[0].wait()
        await asyncio.sleep(1.0)  # past the end of the log: still reading, nothing new
        assert seen == ["before"]
        assert not following.done()
        then: list[tuple[str, Envelope | bytes, str]] = [(IN, turn(message_id="after"), "s1")]
        await _produce(broker, prefix, then)
        async with asyncio.timeout(30):
            await got[1].wait()
        assert seen == ["before", "after"]
    finally:
        following.cancel()
        await asyncio.gather(following, return_exceptions=True)


async def _produce_one_batch(bootstrap: str, topic: str, ids: list[str]) -> None:
    """Append turns of session s1 as one batch (tansu's reported end is short of a
    batch's last records: one short of this one's)."""
    codec = default_codec()
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=500)
    await producer.start()
    try:
        sent = []
        for message_id in ids:
            envelope = turn(message_id=message_id, session_id="s1")
            sent.append(
                await producer.send(
                    topic, codec.encode(envelope), key=b"s1", headers=envelope_headers(envelope)
                )
            )
        await producer.flush()
        await asyncio.gather(*sent)
    finally:
        await producer.stop()


async def test_tail_from_the_end_lists_none_of_the_records_before(
    broker: str, unique: str, tmp_path: Path
) -> None:
    prefix = f"tail-{unique}."
    await catalog_topics(broker, prefix)
    old = [f"old-{n}" for n in range(7)]
    await _produce_one_batch(broker, prefix + IN, old)
    options = ("--topic", IN, "--bootstrap", broker, "--prefix", prefix)

    everything = await asyncio.to_thread(_tail, "--json", *options, tmp_path=tmp_path)
    assert _ids(everything) == old  # the batch is there, whole
    from_end = await asyncio.to_thread(
        _tail, "--from", "end", "--json", *options, tmp_path=tmp_path
    )
    assert _ids(from_end) == []
    shown = await asyncio.to_thread(_tail, "--from", "end", *options, tmp_path=tmp_path)
    assert shown.code == 0, shown.output
    assert (
        shown.out.strip() == "nothing in that slice (check --from/--to, the filters and --prefix)"
    )
    kafka = KafkaConfig(bootstrap=broker)
    assert [t async for t in tail(kafka, [prefix + IN], start=Position("end"))] == []


async def test_tail_follow_from_the_end_lists_only_records_appended_after(
    broker: str, unique: str, tmp_path: Path
) -> None:
    prefix = f"tail-{unique}."
    await catalog_topics(broker, prefix)
    await _produce_one_batch(broker, prefix + IN, [f"old-{n}" for n in range(7)])
    env = clean_env(tmp_path / "home", **{KEYS_FILE_ENV: os.environ[KEYS_FILE_ENV]})
    args = ("--from", "end", "--follow", "--json", "--topic", IN)
    following = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "hermesbus.cli", "tail", *args, "--bootstrap", broker,
        "--prefix", prefix, env=env, cwd=tmp_path,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    stdout = following.stdout
    assert stdout is not None

    async def listed() -> str:
        line = await stdout.readline()
        assert line, (await following.communicate())[1].decode()
        return str(json.loads(line)["envelope"]["message_id"])

    seen: list[str] = []
    batches: list[list[str]] = []
    try:
        async with asyncio.timeout(90):
            # the follower takes the end some time after it starts: a batch of three a
            # second until one is listed. The end falls between two batches: one appended
            # before is not listed at all, one after is listed whole
            while not seen:
                batches.append([f"new-{len(batches)}-{n}" for n in range(3)])
                await _produce_one_batch(broker, prefix + IN, batches[-1])
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(1.0):
                        seen.append(await listed())
            while seen[-1] != batches[-1][-1]:
                seen.append(await listed())
    finally:
        following.kill()  # the subprocess this test started
        await following.wait()
    assert seen[0].startswith("new-"), seen  # none of the seven before
    first = next(k for k, batch in enumerate(batches) if seen[0] in batch)
    assert seen == [message_id for batch in batches[first:] for message_id in batch]
