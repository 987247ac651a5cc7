"""Exported bundles: written, read back anywhere (both framings), refused when damaged."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path
from typing import Any

import pytest

from hermesbus import Envelope, MemoryWrite, Payload, UserTurn
from hermesbus.codec import Codec
from hermesbus.compose.flows import FlowCopy, bundled
from hermesbus.contract.payloads import MemoryTier
from hermesbus.errors import ConfigError
from hermesbus.replay.bundle import read_bundle, same_user, write_bundle
from hermesbus.trace.index import ArchivedRecord
from tests.builders import turn
from tests.cli_process import clean_env, hermesbus

MEMORY = "hermes.memory"


class Registry:
    """A schema registry in memory: what a registry-framed record was written against."""

    def __init__(self) -> None:
        self.schemas: dict[int, dict[str, Any]] = {}

    def register(self, subject: str, schema: dict[str, Any]) -> int:
        self.schemas[41] = schema
        return 41

    def schema(self, schema_id: int) -> dict[str, Any]:
        return self.schemas[schema_id]


def record(codec: Codec, envelope: Envelope, topic: str, offset: int, **kw: Any) -> ArchivedRecord:
    value = codec.encode(envelope, **kw)
    key = envelope.session_id.encode()
    return ArchivedRecord(topic, 0, offset, 1_000 + offset, key, value, (("hermes.trace", b"t"),))


def write(session: str, user: str, message_id: str) -> Envelope:
    body = MemoryWrite(tier=MemoryTier.MID_TERM, key="k", value_json="1")
    return turn(session_id=session, message_id=message_id).model_copy(
        update={
            "user_id": user,
            "target": "memory:mid_term",
            "source": "mcp:dispatcher",
            "payload": Payload(body=body),
        }
    )


def test_a_bundle_reads_back_both_framings_without_the_registry(tmp_path: Path) -> None:
    registry = Registry()
    writer = Codec(registry=registry)
    first = turn(session_id="s1", message_id="m1")
    second = turn(session_id="s1", message_id="m2")
    records = [
        record(writer, second, "hermes.conversation.in", 1, framing="confluent"),
        record(writer, first, "hermes.conversation.in", 0),
    ]
    path = tmp_path / "b.tar.gz"
    manifest = write_bundle(
        path, records, sessions=["s1"], source="test", codec=writer, documents=[{"_id": "d"}]
    )
    assert manifest["records"] == 2 and manifest["sessions"] == ["s1"]
    bundle = read_bundle(path)  # its own codec: the registry's schema came in the bundle
    assert bundle.records == tuple(sorted(records, key=lambda r: r.timestamp_ms))
    assert bundle.documents == ({"_id": "d"},)
    recording = bundle.recording()
    assert [hop.envelope.message_id for hop in recording.hops] == ["m1", "m2"]
    assert recording.source == f"bundle {path} (exported from test)"
    assert isinstance(recording.hops[1].envelope.payload.body, UserTurn)


def test_memory_records_of_other_users_or_later_are_not_exported() -> None:
    codec = Codec()
    mine = record(codec, turn(session_id="s1", message_id="m1"), "hermes.conversation.in", 0)
    earlier_same_user = record(codec, write("s0", "u1", "w0"), MEMORY, 0)
    other_user = record(codec, write("s9", "u_other", "w9"), MEMORY, 1)
    later = record(codec, write("s2", "u1", "w2"), MEMORY, 5)
    kept = same_user([mine, earlier_same_user, other_user, later], ["s1"], MEMORY, codec)
    assert kept == [mine, earlier_same_user]


def _tar(path: Path, members: dict[str, bytes]) -> None:
    with tarfile.open(path, "w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


GOOD = {"format": "hermesbus-bundle", "version": 1, "sessions": ["s1"]}


@pytest.mark.parametrize(
    ("members", "says"),
    [
        ({"manifest.json": b"{}"}, "it has no records.jsonl"),
        (
            {
                "manifest.json": b'{"format": "zip"}',
                "records.jsonl": b"",
                "schemas.json": b"{}",
                "documents.jsonl": b"",
            },
            "manifest.json is not a hermesbus-bundle manifest",
        ),
        (
            {
                "manifest.json": json.dumps({**GOOD, "version": 9}).encode(),
                "records.jsonl": b"",
                "schemas.json": b"{}",
                "documents.jsonl": b"",
            },
            "bundle version 9; this hermesbus reads versions 1, 2",
        ),
        (
            {
                "manifest.json": json.dumps(GOOD).encode(),
                "records.jsonl": b"{not json",
                "schemas.json": b"{}",
                "documents.jsonl": b"",
            },
            "a damaged bundle",
        ),
    ],
)
def test_a_damaged_bundle_is_refused_saying_why(
    tmp_path: Path, members: dict[str, bytes], says: str
) -> None:
    path = tmp_path / "b.tar.gz"
    _tar(path, members)
    with pytest.raises(ConfigError, match=says):
        read_bundle(path)


def test_a_file_that_is_no_bundle_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("hello")
    with pytest.raises(ConfigError, match="is not a hermesbus bundle"):
        read_bundle(path)
    with pytest.raises(ConfigError, match="no bundle at"):
        read_bundle(tmp_path / "missing.tar.gz")


PARCEL = """\
flow: parcel
version: 1
start: asked
states:
  - {id: asked, name: Asked, exit: closed}
  - {id: closed, name: Closed, kind: terminal}
transitions:
  - {from: asked, on: any, to: closed}
"""


def test_a_bundle_carries_the_flow_versions_its_session_ran(tmp_path: Path) -> None:
    """Written with them, read back as specs, each registered when it was there; a bundle
    of version 1 (none) still reads."""
    codec = Codec()
    records = [record(codec, turn(session_id="s1", message_id="m1"), "hermes.conversation.in", 0)]
    copies = [
        FlowCopy.of({"flow": "parcel", "version": 1, "registered_at_ms": 5, "text": PARCEL}, "t")
    ]
    path = tmp_path / "b.tar.gz"
    manifest = write_bundle(
        path, records, sessions=["s1"], source="t", flows=[c.entry() for c in copies]
    )
    assert manifest["flows"] == ["parcel v1"] and manifest["version"] == 2
    carried = bundled(read_bundle(path).flows, str(path))
    assert carried == copies and carried[0].registered_at_ms == 5

    older = tmp_path / "v1.tar.gz"
    _tar(
        older,
        {
            "manifest.json": json.dumps(GOOD).encode(),
            "records.jsonl": b"",
            "schemas.json": json.dumps({"single_object": {}, "confluent": {}}).encode(),
            "documents.jsonl": b"",
        },
    )
    assert read_bundle(older).flows == ()


def _entry(**changes: Any) -> dict[str, Any]:
    return {"flow": "parcel", "version": 1, "registered_at_ms": 1, "text": PARCEL, **changes}


@pytest.mark.parametrize(
    ("entries", "says"),
    [
        ([_entry(registered_at_ms=None)], "registered_at_ms None is not a time in epoch ms"),
        ([_entry(registered_at_ms=True)], "registered_at_ms True is not a time"),
        ([_entry(registered_at_ms=-5)], "registered_at_ms -5 is not a time"),
        ([_entry(registered_at_ms=10**30)], "is not a time in epoch ms"),
        ([_entry(text=7)], "its text is not a string"),
        ([_entry(version=2)], "its text is parcel v1, not its name"),
        ([_entry(text="flow: [")], r"flows.json\[0\] is not a valid flow spec"),
        ([_entry(), _entry(registered_at_ms=2)], "flows.json holds parcel v1 twice"),
        ([_entry()] * 1_025, "flows.json holds 1025 versions, at most 1024"),
    ],
)
def test_a_carried_flow_that_is_not_what_it_says_is_refused(
    entries: list[dict[str, Any]], says: str
) -> None:
    with pytest.raises(ConfigError, match=says):
        bundled(entries, "b.tar.gz")


def test_a_bundle_without_flows_is_written_as_version_1_for_older_readers(
    tmp_path: Path,
) -> None:
    codec = Codec()
    records = [record(codec, turn(session_id="s1", message_id="m1"), "hermes.conversation.in", 0)]
    path = tmp_path / "b.tar.gz"
    assert write_bundle(path, records, sessions=["s1"], source="t")["version"] == 1
    with tarfile.open(path) as tar:
        assert "flows.json" not in tar.getnames()
    assert read_bundle(path).flows == ()


def test_a_bundle_whose_flows_are_damaged_is_a_bad_argument(tmp_path: Path) -> None:
    """`replay --bundle` names the entry and exits 2, as for any damaged bundle."""
    codec = Codec()
    records = [record(codec, turn(session_id="s1", message_id="m1"), "hermes.conversation.in", 0)]
    path = tmp_path / "b.tar.gz"
    write_bundle(path, records, sessions=["s1"], source="t", flows=[_entry(registered_at_ms="x")])
    ran = hermesbus(
        "replay", "--bundle", str(path), "--shadow", env=clean_env(tmp_path / "home"), cwd=tmp_path
    )
    assert ran.code == 2, ran.output
    assert ran.err == (
        f"error: {path}: flows.json[0]: registered_at_ms 'x' is not a time in epoch ms\n"
    )
