"""The README's record format for producers in other languages, held to the code.

The test vectors are read out of README.md itself (the ``# test vector`` blocks of the
section "The record format, for producers in other languages"), so the specification a
Go or .NET developer reads and the bytes hermesbus computes cannot drift apart: each
vector's value is the codec's encoding of its envelope, its signature input is exactly
what the signer feeds HMAC-SHA256, its MAC and header are the signer's, the verifier and
the guard accept it, and its partitions are the partitioner's.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
from pathlib import Path
from typing import Any

import pytest
from aiokafka.partitioner import murmur2

from hermesbus import codec
from hermesbus.codec.schemaset import canonical_form
from hermesbus.connectors.kafka import partition_of
from hermesbus.contract.envelope import Envelope
from hermesbus.contract.headers import envelope_headers
from hermesbus.errors import IdentityError
from hermesbus.identity import SIGNATURE, Guard, Key, Keyring, Signer, Verifier
from hermesbus.processors.protocol import ProtocolPolicy
from hermesbus.topics import CONVERSATION_IN

README = Path(__file__).resolve().parents[3] / "README.md"
SECTION = "## The record format, for producers in other languages"
HISTORY = Path(__file__).resolve().parents[3] / "schemas" / "history" / "hermes.mcp.Envelope"

_BLOCK = re.compile(r"```text\n(# test vector (\d+):.*?)```", re.S)
_FIELD = re.compile(r"^(\S.*?)\s{2,}(.*)$")
_PARTITION = re.compile(r"^key (.+?)\s+murmur2 ([0-9a-f]{8})\s+partition (\d+)$")
_EMPTY = "(empty)"


def section() -> str:
    text = README.read_text(encoding="utf-8")
    _, found, rest = text.partition(f"\n{SECTION}\n")
    assert found, f"the README has no section {SECTION!r}"
    return rest.split("\n## ", 1)[0]


def vectors() -> dict[int, str]:
    """Each ``# test vector N`` block of the section, by N."""
    found = {int(number): block for block, number in _BLOCK.findall(section())}
    assert sorted(found) == [1, 2, 3], f"the section's test vectors are {sorted(found)}"
    return found


def fields(block: str) -> dict[str, str]:
    """``name  value`` lines; indented lines continue the value; ``  # ...`` is a comment."""
    out: dict[str, str] = {}
    name = ""
    for line in block.splitlines()[1:]:
        text = re.sub(r"\s+#.*$", "", line)
        if not text.strip():
            continue
        if text[0].isspace():
            assert name, f"a continuation line before any field: {line!r}"
            out[name] += " " + text.strip()
            continue
        match = _FIELD.match(text)
        assert match, f"not a 'name  value' line: {line!r}"
        name = match.group(1)
        out[name] = match.group(2).strip()
    return out


def hex_bytes(text: str, value: bytes = b"") -> bytes:
    """Spaced hex; ``<value>`` stands for the vector's value bytes."""
    parts = [value.hex() if part == "<value>" else part for part in text.split()]
    return bytes.fromhex("".join(parts))


def secret(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


@pytest.fixture(scope="module")
def first() -> dict[str, str]:
    return fields(vectors()[1])


@pytest.fixture(scope="module")
def value(first: dict[str, str]) -> bytes:
    return hex_bytes(first["value"])


class _Recording:
    """An HMAC that keeps every byte it is fed: the signature input, as the signer made it."""

    def __init__(self, key: bytes, msg: bytes | None = None, digestmod: Any = None) -> None:
        self.fed = bytearray()
        self._mac = _REAL_HMAC_NEW(key, digestmod=digestmod)
        if msg is not None:
            self.update(msg)

    def update(self, data: bytes) -> None:
        self.fed += data
        self._mac.update(data)

    def digest(self) -> bytes:
        return self._mac.digest()


_REAL_HMAC_NEW = hmac.new


def signed_input(
    monkeypatch: pytest.MonkeyPatch, signer: Signer, topic: str, key: bytes | None, data: bytes
) -> tuple[bytes, bytes]:
    """What the signer fed HMAC-SHA256 for this record, and the header value it made."""
    made: list[_Recording] = []

    def recording(key: bytes, msg: bytes | None = None, digestmod: Any = None) -> _Recording:
        made.append(_Recording(key, msg, digestmod))
        return made[-1]

    with monkeypatch.context() as patched:
        patched.setattr(hmac, "new", recording)  # as _sign calls it: hmac.new
        name, header = signer.header(topic, key, data)
    assert name == SIGNATURE
    assert len(made) == 1
    return bytes(made[0].fed), header


def keyring_of(vector: dict[str, str]) -> Keyring:
    return Keyring({vector["identity"]: [Key(vector["kid"], secret(vector["secret"]))]})


def test_the_value_is_the_codecs_encoding_of_the_envelope(
    first: dict[str, str], value: bytes
) -> None:
    envelope = Envelope.model_validate(json.loads(first["envelope"]))
    assert codec.encode(envelope) == value
    assert codec.decode(value) == envelope
    assert envelope.session_id.encode() == first["key"].encode()


def test_the_fingerprint_is_the_crc64_of_the_newest_frozen_schema_as_the_readme_says(
    value: bytes,
) -> None:
    """Computed from the frozen file with fastavro alone, as a producer elsewhere would."""
    import fastavro.schema

    newest = max(HISTORY.glob("v*.avsc"), key=lambda path: int(path.stem[1:]))
    assert newest.name in section(), f"the README should name {newest.name} as the writer schema"
    schema = json.loads(newest.read_text(encoding="utf-8"))
    crc = fastavro.schema.fingerprint(canonical_form(schema), "CRC-64-AVRO")
    assert value[:2] == b"\xc3\x01"
    assert value[2:10] == bytes.fromhex(crc)
    spaced = " ".join(f"{byte:02x}" for byte in value[2:10])
    assert f"`{spaced}`" in section()
    assert value[2:10] == codec.default_codec().fingerprint


@pytest.mark.parametrize("number", [1, 2])
def test_the_signature_input_is_what_the_signer_feeds_hmac(
    number: int, value: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    vector = fields(vectors()[number])
    key = vector["key"].encode() if "key" in vector else None
    signer = Signer(vector["identity"], keyring_of(vector))
    fed, header = signed_input(monkeypatch, signer, vector["topic"], key, value)
    assert fed.hex() == hex_bytes(vector["signature input"], value).hex()
    mac = hmac.new(secret(vector["secret"]), fed, hashlib.sha256).digest()
    assert mac.hex() == vector["hmac"]
    assert header.decode() == vector["hermes.signature"]
    encoded = base64.urlsafe_b64encode(mac).decode().rstrip("=")
    assert header.decode() == f"v1:{vector['identity']}:{vector['kid']}:{encoded}"


@pytest.mark.parametrize("number", [1, 2])
def test_the_verifier_accepts_each_vector_and_refuses_it_on_another_topic(
    number: int, value: bytes
) -> None:
    vector = fields(vectors()[number])
    key = vector["key"].encode() if "key" in vector else None
    headers = [(SIGNATURE, vector["hermes.signature"].encode())]
    verifier = Verifier(keyring_of(vector))
    assert verifier.signer(vector["topic"], key, value, headers) == vector["identity"]
    with pytest.raises(IdentityError, match="does not match this record"):
        verifier.signer("hermes.dispatcher", key, value, headers)


def test_the_first_vector_is_a_user_turn_the_bus_admits(
    first: dict[str, str], value: bytes
) -> None:
    keys = keyring_of(first).with_missing(["conversation"])  # the receiver's own key
    guard = Guard("conversation", keys, policy=ProtocolPolicy())
    headers = [(SIGNATURE, first["hermes.signature"].encode())]
    assert first["topic"] == CONVERSATION_IN
    signer = guard.verify(first["topic"], first["key"].encode(), value, headers)
    guard.admit(first["topic"], signer, codec.decode(value), retry=False)


def test_the_trace_headers_are_the_ones_the_client_writes(
    first: dict[str, str], value: bytes
) -> None:
    written = dict(envelope_headers(codec.decode(value)))
    for name in ("trace_id", "message_id", "traceparent"):
        assert written[name].decode() == first[name], name


def test_the_partitions_are_murmur2_as_the_bus_checks_them(first: dict[str, str]) -> None:
    rows = [line for line in vectors()[3].splitlines()[1:] if line.strip()]
    assert len(rows) == 4
    for row in rows:
        match = _PARTITION.match(row)
        assert match, f"not a 'key K  murmur2 H  partition P' line: {row!r}"
        text, hashed, partition = match.groups()
        key = b"" if text == _EMPTY else text.encode()
        assert f"{murmur2(key) & 0xFFFFFFFF:08x}" == hashed, text
        assert partition_of(key, 6) == int(partition), text
    count = int(first["partition"].split(" of ")[1])
    assert partition_of(first["key"].encode(), count) == int(first["partition"].split()[0])
