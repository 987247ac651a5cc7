"""The flow registry on each real broker: ``hermesbus flows register|list|show`` as a user
runs them, and what a reader of the registry topic believes.

A flow written here from scratch (spec only: three states, one tool, one wait) registers
with the command; a version is immutable (the same text again changes nothing, other text
is refused, a lower version is refused); every reader keeps the first text of a version
even when another was written behind the command's back, and refuses records that the
conversation did not sign.
"""

from __future__ import annotations

import asyncio
import os
from importlib import resources
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer

from hermesbus.compose.flows import read_flows, register_flow
from hermesbus.connectors.kafka import KafkaConfig
from hermesbus.errors import ConfigError
from hermesbus.identity import KEYS_FILE_ENV, Keyring, Signer
from hermesbus.processors.flow import EXPENSE_FILE, record_key
from hermesbus.topics import FLOWS
from tests import signing
from tests.cli_process import Ran, clean_env, hermesbus
from tests.integration.stacks import catalog_topics

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(600)]  # a dozen CLI runs, each a Python start

THIRD = """\
flow: parcel_status
version: 1
title: Where is my parcel
start: asked
intents:
  - name: track
    phrases: ["where is my parcel", "查快递"]
    entities:
      - {name: parcel, pattern: "(P[0-9]{6})"}
states:
  - id: asked
    name: Asked for the parcel number
    exit: closed
    on_enter:
      - reply: {text: "Which parcel? (P and six digits)"}
    waits:
      - {id: parcel_wait, after: 10m, trigger: silent, text: "Still there? Closing soon."}
  - id: looked_up
    name: Looked it up
    timeout_ms: 5000
    exit: closed
    on_enter:
      - call: {tool: org_tool, args: {user_id: "{user.id}"}}
      - reply: {text: "Parcel {entities.parcel}: asked for {results.org_tool.user_id}"}
  - id: closed
    name: Closed
    kind: terminal
    summary: "parcel {entities.parcel}"
transitions:
  - {from: asked, on: track, to: looked_up}
  - {from: asked, on: silent, to: closed}
  - {from: looked_up, on: done, to: closed}
"""


def _cli(tmp_path: Path, *args: str) -> Ran:
    env = clean_env(tmp_path / "home", **{KEYS_FILE_ENV: os.environ[KEYS_FILE_ENV]})
    return hermesbus("flows", *args, env=env, cwd=tmp_path)


def _spec(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


async def test_a_flow_written_as_a_spec_registers_and_every_reader_sees_it(
    broker: str, unique: str, tmp_path: Path
) -> None:
    prefix = f"flows-{unique}."
    await catalog_topics(broker, prefix)
    on = ("--bootstrap", broker, "--prefix", prefix)
    env = clean_env(tmp_path / "home", **{KEYS_FILE_ENV: os.environ[KEYS_FILE_ENV]})
    tools = await asyncio.to_thread(hermesbus, "tools", "register", "--demo", env=env, cwd=tmp_path)
    assert tools.code == 0, tools.output
    first = _spec(tmp_path, "v1.yaml", THIRD)

    ran = await asyncio.to_thread(_cli, tmp_path, "register", first, *on)
    assert ran.code == 0, ran.output
    assert ran.out.startswith("registered flow parcel_status version 1 (digest ")
    again = await asyncio.to_thread(_cli, tmp_path, "register", first, *on)
    assert (again.code, again.out) == (
        0,
        "flow parcel_status version 1 is registered already, with this text (unchanged)\n",
    )

    other = _spec(tmp_path, "v1b.yaml", THIRD.replace("Where is my parcel", "Parcels"))
    refused = await asyncio.to_thread(_cli, tmp_path, "register", other, *on)
    assert refused.code == 1
    assert "version 1 of flow parcel_status is registered already, with other text" in refused.err
    assert "register it as version 2" in refused.err

    second = _spec(tmp_path, "v2.yaml", THIRD.replace("version: 1", "version: 2"))
    assert (await asyncio.to_thread(_cli, tmp_path, "register", second, *on)).code == 0
    lower = await asyncio.to_thread(_cli, tmp_path, "register", other, *on)
    assert lower.code == 1 and "register it as version 3" in lower.err

    listed = await asyncio.to_thread(_cli, tmp_path, "list", *on)
    assert listed.code == 0 and "parcel_status" in listed.out and "1, 2" in listed.out
    assert "built in" in listed.out  # the expense report, which no registered flow replaces
    shown = await asyncio.to_thread(_cli, tmp_path, "show", "parcel_status", "--version", "1", *on)
    assert shown.code == 0, shown.output
    assert "parcel_status version 1: Where is my parcel" in shown.out
    assert "  ├─ track -> looked_up\n" in shown.out
    assert "  └─ failed -> closed (exception exit)\n" in shown.out
    source = await asyncio.to_thread(_cli, tmp_path, "show", "parcel_status", "--source", *on)
    assert source.out == THIRD.replace("version: 1", "version: 2")
    expense = await asyncio.to_thread(_cli, tmp_path, "show", "expense", *on)
    assert expense.code == 0, expense.output
    assert "expense version 1: 差旅报销" in expense.out and "not registered" in expense.out
    assert "  ├─ wait_expired -> S4 (set, arm)\n" in expense.out
    shipped = resources.files("hermesbus.processors.flow").joinpath(EXPENSE_FILE)
    expense_source = await asyncio.to_thread(_cli, tmp_path, "show", "expense", "--source", *on)
    assert expense_source.out == shipped.read_text(encoding="utf-8")

    registry = await read_flows(KafkaConfig(bootstrap=broker), prefix, signing.keys())
    assert sorted(registry.versions["parcel_status"]) == [1, 2]
    assert registry.newest("parcel_status").spec.version == 2  # type: ignore[union-attr]
    assert registry.refused == [] and registry.conflicts == []


async def test_a_flow_whose_tools_are_not_registered_is_not_registered(
    broker: str, unique: str, tmp_path: Path
) -> None:
    prefix = f"flowt-{unique}."
    await catalog_topics(broker, prefix)
    ran = await asyncio.to_thread(
        _cli, tmp_path, "register", _spec(tmp_path, "f.yaml", THIRD), "--bootstrap", broker,
        "--prefix", prefix,
    )  # fmt: skip
    assert ran.code == 1
    assert "tool 'org_tool' is not registered" in ran.err
    assert "not registered: fix the errors above first" in ran.err
    registry = await read_flows(KafkaConfig(bootstrap=broker), prefix, signing.keys())
    assert registry.flows() == []


async def test_readers_keep_the_first_text_of_a_version_and_only_what_the_conversation_signed(
    broker: str, unique: str, tmp_path: Path
) -> None:
    prefix = f"flowr-{unique}."
    kafka = await catalog_topics(broker, prefix)
    keys, topic = signing.keys(), prefix + FLOWS
    text = THIRD.encode()
    done = await register_flow(kafka, prefix, keys, text, "third.yaml")
    assert done.outcome == "registered"

    other = THIRD.replace("Where is my parcel", "Parcels").encode()
    key = record_key("parcel_status", 1, other)
    producer = AIOKafkaProducer(bootstrap_servers=broker)
    await producer.start()
    try:  # behind the command's back: other text for version 1, properly signed ...
        signed = Signer("conversation", keys).sign(topic, key, other, ())
        await producer.send_and_wait(topic, other, key=key, headers=list(signed))
        # ... version 2 signed by an app, and version 3 unsigned
        for version, signer in ((2, "app"), (3, None)):
            body = THIRD.replace("version: 1", f"version: {version}").encode()
            at = record_key("parcel_status", version, body)
            headers = Signer(signer, keys).sign(topic, at, body, ()) if signer else ()
            await producer.send_and_wait(topic, body, key=at, headers=list(headers))
    finally:
        await producer.stop()

    registry = await read_flows(kafka, prefix, keys)
    assert sorted(registry.versions["parcel_status"]) == [1]
    assert registry.get("parcel_status", 1).text == text  # type: ignore[union-attr]
    (conflict,) = registry.conflicts
    assert "registered at offset 0 with other text; versions are immutable" in conflict.reason
    app, unsigned = registry.refused
    assert app.reason == "signed by 'app': only the conversation registers flows"
    assert "unsigned" in unsigned.reason

    doctor = await asyncio.to_thread(
        hermesbus, "doctor", "--bootstrap", broker, "--prefix", prefix,
        env=clean_env(tmp_path / "home", **{KEYS_FILE_ENV: os.environ[KEYS_FILE_ENV]}),
        cwd=tmp_path,
    )  # fmt: skip
    (line,) = [x for x in doctor.out.splitlines() if x.split()[1:2] == ["flows"]]
    assert line.startswith("warn")
    assert f"1 registered on {topic}: parcel_status v1; 3 not believed: offset 1" in line


async def test_a_version_signed_with_a_key_rotated_out_is_signed_anew_never_replaced(
    broker: str, unique: str, tmp_path: Path
) -> None:
    """After two rotations of the conversation's key its old records cannot be verified:
    their versions stay taken, and registering the same text again signs it anew."""
    prefix = f"flowk-{unique}."
    kafka = await catalog_topics(broker, prefix)
    topic, text = prefix + FLOWS, THIRD.encode()
    old = Keyring.ensure(["conversation"], tmp_path / "rotated-out.json")
    key = record_key("parcel_status", 1, text)
    producer = AIOKafkaProducer(bootstrap_servers=broker)
    await producer.start()
    try:
        headers = Signer("conversation", old).sign(topic, key, text, ())
        await producer.send_and_wait(topic, text, key=key, headers=list(headers))
    finally:
        await producer.stop()

    keys = signing.keys()
    other = THIRD.replace("Where is my parcel", "Parcels").encode()
    with pytest.raises(ConfigError, match="signed with a conversation key since rotated out"):
        await register_flow(kafka, prefix, keys, other, "other.yaml")
    again = await register_flow(kafka, prefix, keys, text, "third.yaml")
    assert again.outcome == "registered" and again.version.offset == 1
    registry = await read_flows(kafka, prefix, keys)
    assert registry.get("parcel_status", 1).text == text  # type: ignore[union-attr]
