"""How the registry client speaks HTTP and translates failures (the server itself is
exercised in tests/integration/test_schema_registry.py)."""

from __future__ import annotations

import json

import httpx
import pytest

from hermesbus.connectors.schema_registry import RegistryConfig, SchemaRegistryClient
from hermesbus.errors import RegistryError

CONFIG = RegistryConfig(
    url="http://registry.invalid/apis/ccompat/v7",
    username="u",
    password="p",  # noqa: S106
)


def client(handler: httpx.MockTransport) -> SchemaRegistryClient:
    return SchemaRegistryClient(CONFIG, transport=handler)


def test_register_posts_the_schema_text_with_basic_auth_and_caches_the_id() -> None:
    seen: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"id": 12})

    with client(httpx.MockTransport(answer)) as registry:
        schema = {"type": "record", "name": "A", "fields": []}
        assert registry.register("hermes.mcp.Envelope", schema) == 12
        assert registry.register("hermes.mcp.Envelope", schema) == 12
        assert registry.schema(12) == schema  # known from the registration
    assert len(seen) == 1
    request = seen[0]
    assert request.url.path == "/apis/ccompat/v7/subjects/hermes.mcp.Envelope/versions"
    assert request.headers["authorization"].startswith("Basic ")
    body = json.loads(request.content)
    assert body["schemaType"] == "AVRO"
    assert json.loads(body["schema"]) == schema


@pytest.mark.parametrize(
    ("response", "message"),
    [
        (
            httpx.Response(404, json={"error_code": 40403, "message": "Schema not found"}),
            "HTTP 404: 40403 Schema not found",
        ),
        (httpx.Response(503, text="<html>down</html>"), "HTTP 503: <html>down</html>"),
        (httpx.Response(200, text="not json"), "the answer is not JSON"),
        (httpx.Response(200, json={"schema": 5}), "the answer has no schema text"),
    ],
)
def test_failures_become_registry_errors(response: httpx.Response, message: str) -> None:
    with client(httpx.MockTransport(lambda request: response)) as registry:
        with pytest.raises(RegistryError, match=message) as raised:
            registry.schema(3)
    if response.status_code >= 400:
        assert raised.value.status_code == response.status_code


def test_a_boolean_id_is_refused() -> None:
    answer = httpx.Response(200, json={"id": True})
    with client(httpx.MockTransport(lambda request: answer)) as registry:
        with pytest.raises(RegistryError, match="no integer 'id'"):
            registry.register("s", {"type": "string"})


def test_the_password_is_not_in_the_config_repr() -> None:
    assert "p'" not in repr(CONFIG)
    assert "password" not in repr(CONFIG)
