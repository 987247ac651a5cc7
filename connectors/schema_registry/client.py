"""A client for the Confluent Schema Registry REST API (the subset hermesbus needs).

Register a subject version, fetch a schema by id, test compatibility and set a
subject's compatibility level. Ids and schemas are cached: a schema id never
changes meaning, so each is fetched at most once per client.
"""

from __future__ import annotations

import json
from types import TracebackType
from typing import Any, Self
from urllib.parse import quote

import httpx

from hermesbus.connectors.schema_registry.config import RegistryConfig
from hermesbus.errors import RegistryError

__all__ = ["SchemaRegistryClient"]

_CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"


class SchemaRegistryClient:
    """Synchronous client (the codec is synchronous); safe to share between threads."""

    def __init__(self, config: RegistryConfig, transport: httpx.BaseTransport | None = None):
        self.config = config
        auth = (config.username, config.password or "") if config.username else None
        self._http = httpx.Client(
            base_url=config.url,
            auth=auth,
            timeout=config.timeout_s,
            headers={"Accept": _CONTENT_TYPE, "Content-Type": _CONTENT_TYPE},
            transport=transport,
        )
        self._ids: dict[tuple[str, str], int] = {}
        self._schemas: dict[int, dict[str, Any]] = {}

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def register(self, subject: str, schema: dict[str, Any]) -> int:
        """Register ``schema`` under ``subject`` (idempotent) and return its global id."""
        text = json.dumps(schema, separators=(",", ":"), sort_keys=True)
        key = (subject, text)
        if key not in self._ids:
            body = {"schema": text, "schemaType": "AVRO"}
            answer = self._call("POST", f"/subjects/{_quote(subject)}/versions", body)
            self._ids[key] = _int_field(answer, "id")
            self._schemas.setdefault(self._ids[key], schema)
        return self._ids[key]

    def schema(self, schema_id: int) -> dict[str, Any]:
        """The schema registered under the global ``schema_id``."""
        if schema_id not in self._schemas:
            answer = self._call("GET", f"/schemas/ids/{schema_id}")
            text = answer.get("schema")
            if not isinstance(text, str):
                raise RegistryError(f"schema id {schema_id}: the answer has no schema text")
            try:
                self._schemas[schema_id] = json.loads(text)
            except json.JSONDecodeError as exc:
                raise RegistryError(f"schema id {schema_id}: schema text is not JSON") from exc
        return self._schemas[schema_id]

    def is_compatible(self, subject: str, schema: dict[str, Any], version: str = "latest") -> bool:
        """Whether ``schema`` is compatible with ``version`` of ``subject`` under its level."""
        body = {"schema": json.dumps(schema), "schemaType": "AVRO"}
        path = f"/compatibility/subjects/{_quote(subject)}/versions/{_quote(version)}"
        answer = self._call("POST", path, body)
        value = answer.get("is_compatible")
        if not isinstance(value, bool):
            raise RegistryError(f"{path}: the answer has no is_compatible flag")
        return value

    def set_compatibility(self, subject: str, level: str) -> None:
        """Set the compatibility level (BACKWARD, FORWARD, FULL, NONE, ...) of ``subject``."""
        self._call("PUT", f"/config/{_quote(subject)}", {"compatibility": level})

    def subjects(self) -> list[str]:
        """Every subject registered (read only: whether the registry answers, and how)."""
        answer = self._answer("GET", "/subjects")
        if not isinstance(answer, list):
            raise RegistryError("GET /subjects: the answer is not a JSON list")
        return [str(subject) for subject in answer]

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        answer = self._answer(method, path, body)
        if not isinstance(answer, dict):
            raise RegistryError(f"{method} {path}: the answer is not a JSON object")
        return answer

    def _answer(self, method: str, path: str, body: dict[str, Any] | None = None) -> object:
        """The JSON the registry answers; a RegistryError from the transport's error, the
        HTTP status (``status_code``) or a body that is not JSON (from its ValueError)."""
        try:
            response = self._http.request(method, path, json=body)
        except httpx.HTTPError as exc:
            raise RegistryError(f"{method} {path}: {type(exc).__name__}: {exc}") from exc
        if response.status_code >= 400:  # noqa: PLR2004
            raise RegistryError(
                f"{method} {path}: HTTP {response.status_code}: {_error_text(response)}",
                status_code=response.status_code,
            )
        try:
            answer: object = response.json()
        except ValueError as exc:
            raise RegistryError(f"{method} {path}: the answer is not JSON") from exc
        return answer


def _int_field(answer: dict[str, Any], name: str) -> int:
    value = answer.get(name)
    if not isinstance(value, int) or isinstance(value, bool):
        raise RegistryError(f"the registry's answer has no integer {name!r}")
    return value


def _error_text(response: httpx.Response) -> str:
    try:
        answer = response.json()
    except ValueError:
        return response.text[:200]
    if isinstance(answer, dict) and "message" in answer:
        return f"{answer.get('error_code', '')} {answer['message']}".strip()
    return response.text[:200]


def _quote(segment: str) -> str:
    return quote(segment, safe="")
