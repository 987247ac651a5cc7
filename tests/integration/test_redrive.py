"""``replay --redrive`` and ``--fork`` on each real broker: the demo run again in sandbox
topics, and the bus's own topics, consumer groups and stores left exactly as they were."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition

from hermesbus import Envelope
from hermesbus.compose.redrive import FORK_OF, REPLAY_ID, REPLAY_ORIGIN
from hermesbus.connectors.kafka import KafkaAdmin, KafkaConfig
from hermesbus.demo.expense import Said, run
from hermesbus.identity import KEYS_FILE_ENV
from hermesbus.trace.tail import Filters, Position, catalog_topics, tail
from tests.cli_process import clean_env, hermesbus
from tests.integration.commits import commits_under, group_names
from tests.integration.stacks import demo_stack

pytestmark = [pytest.mark.kafka, pytest.mark.slow, pytest.mark.timeout(600)]

BUS_GROUPS = ("conversation", "dispatcher", "memory", "tool", "indexer")
"""Groups of the bus that have committed on its topics once the demo ran (each demo
tool's group, tool-*, too)."""


def _quiet(kind: str, item: object) -> None:
    """The demo's printer, silenced."""


async def _demo(
    broker: str, prefix: str, home: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[Said, Said]:
    """The demo's two conversations, run and stopped: the bus is at rest afterwards."""
    async with demo_stack(broker, prefix, home, monkeypatch) as running:
        return await run(running.bootstrap, running.prefix, _quiet)


async def _snapshot(kafka: KafkaConfig, prefix: str, home: Path) -> dict[str, Any]:
    """What the bus owns: its topics' ends, every group's commits there (whoever made
    them), its state files; and the broker's groups, by name."""
    topics = catalog_topics(prefix)
    async with KafkaAdmin(kafka) as admin:  # a plain consumer's metadata may lack them
        counts = {name: t.partitions for name, t in (await admin.describe(topics)).items()}
    parts = [TopicPartition(t, p) for t, n in counts.items() for p in range(n)]
    consumer = AIOKafkaConsumer(**kafka.client_kwargs(), group_id=None)
    await consumer.start()
    try:
        consumer.assign(parts)  # as tail reads: a plain consumer with its partitions
        offsets = await consumer.end_offsets(parts)
        ends = {f"{tp.topic}/{tp.partition}": end for tp, end in offsets.items()}
    finally:
        await consumer.stop()
    commits = await commits_under(kafka, [prefix])
    groups = await group_names(kafka)
    return {"ends": ends, "commits": commits, "files": _files(home), "groups": groups}


def _files(home: Path) -> dict[str, str]:
    """The bus's state files (SQLite and their journals), by digest."""
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(home.glob("*.sqlite3*"))
    }


async def test_a_redrive_replays_the_demo_in_sandbox_topics_and_touches_nothing_of_the_bus(
    broker: str, unique: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    prefix, home = f"prod-{unique}.", tmp_path / "home"
    said = await _demo(broker, prefix, home, monkeypatch)
    kafka = KafkaConfig(bootstrap=broker)
    before = await _snapshot(kafka, prefix, home)
    bus_groups = {prefix + name for name in BUS_GROUPS}  # the bus's groups take its prefix
    assert bus_groups <= set(before["commits"]), before["commits"]  # what is compared
    stopped = said[1].conversation.session_id
    sandbox = f"sandbox-{unique}."
    env = clean_env(home, **{KEYS_FILE_ENV: os.environ[KEYS_FILE_ENV]})
    args = ["--session", stopped, "--bootstrap", broker, "--prefix", prefix, "--into", sandbox]
    ran = hermesbus("replay", *args, "--redrive", env=env, cwd=tmp_path, timeout=240)
    assert ran.code == 0, ran.output
    # the sandbox answered every turn as the bus did (tools as recorded)
    original = [_text(r) for _, r in said[1].replies if r.source.startswith("conversation:")]
    answered = [
        line.removeprefix("hermes  ")
        for line in ran.out.splitlines()
        if line.startswith("hermes  ")
    ]
    assert answered == original  # the dispatcher's notices are labelled notice, as up does
    assert f"sandbox {sandbox}: topics {sandbox}* and groups {sandbox}* on {broker}" in ran.out
    # the copies say what they are copies of
    copies = [
        t
        async for t in tail(
            kafka,
            [sandbox + "hermes.conversation.in"],
            start=Position("beginning"),
            filters=Filters(session=stopped),
        )
    ]
    turns = [t for t in copies if t.envelope is not None and t.envelope.source.startswith("app:")]
    assert len(turns) == len(said[1].conversation.turns)
    for copy in turns:
        headers = dict(copy.headers)
        assert headers[REPLAY_ID] == sandbox.encode()
        origin_topic, _, _, _ = headers[REPLAY_ORIGIN].decode().split("/")
        assert origin_topic == prefix + "hermes.conversation.in"
    # the bus: the same topic ends, the same commits, the same files; the sandbox's groups
    after = await _snapshot(kafka, prefix, home)
    assert {k: after[k] for k in ("ends", "commits", "files")} == {
        k: before[k] for k in ("ends", "commits", "files")
    }
    # the groups made meanwhile that are this test's (named with its id, or committed on
    # its topics; other tests share the broker) are the sandbox's
    new_groups = set(after["groups"]) - set(before["groups"])
    ours = {g for g in new_groups if unique in g or g in after["commits"]}
    assert ours and all(g.startswith(sandbox) for g in ours), ours
    assert (home / "replays" / sandbox.rstrip(".") / "state.sqlite3").exists()


async def test_a_fork_changes_one_turn_and_trace_shows_both_branches(
    broker: str, unique: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    prefix, home = f"prod-{unique}.", tmp_path / "home"
    said = await _demo(broker, prefix, home, monkeypatch)
    session = said[1].conversation.session_id
    kafka = KafkaConfig(bootstrap=broker)
    turns = await _turns(kafka, prefix, session)
    third = turns[2]  # "不用，就这三张" after the question of the blurred invoice
    assert third.payload.body.text == "不用，就这三张"  # type: ignore[union-attr]
    sandbox = f"fork-{unique}."
    env = clean_env(home, **{KEYS_FILE_ENV: os.environ[KEYS_FILE_ENV]})
    args = ["--session", session, "--bootstrap", broker, "--prefix", prefix]
    ran = hermesbus(
        "replay",
        *args,
        "--fork",
        third.message_id,
        "--set",
        "payload.body.text=重新上传",
        "--into",
        sandbox,
        env=env,
        cwd=tmp_path,
        timeout=240,
    )
    assert ran.code == 0, ran.output
    assert "hermes  好的，请重新上传发票照片和行程单。" in ran.out
    lineage = json.loads((home / "replays" / sandbox.rstrip(".") / "lineage.json").read_text())
    (fork,) = lineage["forks"]
    assert fork["original"] == third.message_id and fork["set"] == {"payload.body.text": "重新上传"}
    copies = [
        t
        async for t in tail(
            kafka, [sandbox + "hermes.conversation.in"], start=Position("beginning")
        )
    ]
    forked = [t for t in copies if t.envelope is not None and t.envelope.message_id == fork["fork"]]
    assert len(forked) == 1 and dict(forked[0].headers)[FORK_OF] == third.message_id.encode()
    drawn = hermesbus("trace", fork["trace"], "--sandbox", sandbox, "--json", env=env, cwd=tmp_path)
    assert drawn.code == 0, drawn.output
    both = json.loads(drawn.out)
    assert both["sandbox"]["forks"] == [fork]
    assert both["original"]["spans"] and both["sandbox"]["spans"]
    states = {side: [sp["state"] for sp in both[side]["spans"]] for side in ("original", "sandbox")}
    assert "S3.1→S4" in states["original"] and "S3.1→S4" not in states["sandbox"]
    assert "S3.1→S2" in states["sandbox"]  # the fork went back for the invoices


async def _turns(kafka: KafkaConfig, prefix: str, session: str) -> list[Envelope]:
    """The user turns of the session, as the bus consumed them."""
    found = tail(
        kafka,
        [prefix + "hermes.conversation.in"],
        start=Position("beginning"),
        filters=Filters(session=session),
    )
    return [
        t.envelope
        async for t in found
        if t.envelope is not None and t.envelope.source.startswith("app:")
    ]


def _text(envelope: Any) -> str:
    return str(envelope.payload.body.text)
