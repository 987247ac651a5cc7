"""The schema registry client and the codec's Confluent framing against a real registry."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

import hermesbus as h
from hermesbus.codec import Codec
from hermesbus.connectors.schema_registry import RegistryConfig, SchemaRegistryClient
from hermesbus.errors import DecodeError, RegistryError
from tests import strategies as s

pytestmark = pytest.mark.schema_registry


@pytest.fixture
def registry(schema_registry_url: str) -> Iterator[SchemaRegistryClient]:
    with SchemaRegistryClient(RegistryConfig(url=schema_registry_url)) as client:
        yield client


def test_register_is_idempotent_and_the_id_gives_the_schema_back(
    registry: SchemaRegistryClient, unique: str
) -> None:
    schema = Codec().schema
    schema_id = registry.register(f"hermes.test.{unique}", schema)
    assert registry.register(f"hermes.test.{unique}", schema) == schema_id
    with SchemaRegistryClient(registry.config) as fresh:  # nothing cached
        assert fresh.schema(schema_id)["name"] == "Envelope"


def test_compatibility_follows_the_subject_level(
    registry: SchemaRegistryClient, unique: str
) -> None:
    subject = f"hermes.test.{unique}"
    v1 = Codec().schema
    registry.set_compatibility(subject, "BACKWARD")
    registry.register(subject, v1)
    defaulted = json.loads(json.dumps(v1))
    defaulted["fields"].append({"name": "tenant", "type": "string", "default": ""})
    required = json.loads(json.dumps(v1))
    required["fields"].append({"name": "tenant", "type": "string"})
    assert registry.is_compatible(subject, defaulted)
    assert not registry.is_compatible(subject, required)
    with pytest.raises(RegistryError, match="HTTP 409") as raised:
        registry.register(subject, required)
    assert raised.value.status_code == 409


def test_unknown_id_is_a_registry_error(registry: SchemaRegistryClient) -> None:
    with pytest.raises(RegistryError, match="HTTP 404"):
        registry.schema(987654321)


def test_codec_round_trip_in_confluent_framing(registry: SchemaRegistryClient) -> None:
    writer = Codec(registry=registry)
    envelope = s.envelope_with(h.UserTurn(text="我要报上个月去深圳的差旅费"))
    data = writer.encode(envelope, framing="confluent")
    assert data[:1] == b"\x00"
    # a second codec, as in another process, learns the writer schema from the id alone
    with SchemaRegistryClient(registry.config) as other:
        reader = Codec(registry=other)
        assert reader.decode(data) == envelope
        with pytest.raises(DecodeError, match="unknown schema id 987654321"):
            reader.decode(b"\x00" + (987654321).to_bytes(4, "big") + data[5:])


def test_unreachable_registry_is_a_registry_error() -> None:
    config = RegistryConfig(url="http://127.0.0.1:1", timeout_s=2)
    with SchemaRegistryClient(config) as client, pytest.raises(RegistryError, match="ConnectError"):
        client.schema(1)
