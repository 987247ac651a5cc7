"""The production trace index: one document per envelope in an Elasticsearch data stream.

Writes are ``create`` operations with the record's place in the log (and time) as ``_id``
(``async_streaming_bulk``; 429s retried with back-off), so a record indexed twice is
stored once. Reads page with ``search_after`` in log order.

The templates go in before the first write, again after any failed write (Elasticsearch
may come back empty) and whenever a check every TEMPLATE_CHECK_S finds them gone: a
write into a stream without them would make it with the built-in ``logs`` mappings.
A stream whose write index was made so anyway is rolled over once they are back.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import TYPE_CHECKING, Any

import orjson

from hermesbus.base.lifecycle import Service
from hermesbus.connectors.elasticsearch import templates
from hermesbus.connectors.elasticsearch.client import connect, status_of, translated
from hermesbus.connectors.elasticsearch.config import ElasticsearchConfig
from hermesbus.errors import TraceIndexError
from hermesbus.trace.index import ROLLUP_DATASET, Document, Search, WriteResult

if TYPE_CHECKING:
    from elasticsearch import AsyncElasticsearch

__all__ = [
    "TEMPLATE_CHECK_S",
    "ElasticsearchTraceIndex",
    "ServerState",
    "WrongIndex",
    "bulk_actions",
]

log = logging.getLogger(__name__)

_PAGE = 1_000
_BULK_ANSWER = ["items.*._id", "items.*.status", "items.*.error"]
"""What a bulk answer needs to say per document: a fifth of its full size to write and read."""
_CONFLICT, _TOO_MANY, _SERVER = 409, 429, 500
_ORDER = [
    {"@timestamp": "asc"},
    {"messaging.destination.name": "asc"},
    {"messaging.kafka.destination.partition": "asc"},
    {"messaging.kafka.message.offset": "asc"},
]
_UNSUPPORTED = (400, 404, 405, 410)
"""How a server without a feature (lifecycle management) answers its API."""
_MISSING = 404
TEMPLATE_CHECK_S = 10.0
"""How often, at most, a write first checks that the index template is still there."""


@dataclass(frozen=True, slots=True)
class WrongIndex:
    """A backing index of the stream whose mappings are not the template's."""

    name: str
    differences: tuple[str, ...]
    """What differs, e.g. ``trace.id is text, not keyword`` (a few)."""
    write_index: bool
    """The stream's write index (new documents go there until it is rolled over)."""
    data_stream: bool = True
    """False: a plain index has the stream's name (written before any template of ours
    existed on a server without a data stream template of its own)."""


@dataclass(frozen=True, slots=True)
class ServerState:
    """What ``hermesbus doctor`` reports of the index's server (read, never changed)."""

    health: str
    """The cluster's status: green, yellow (replicas unassigned, as on one node) or red."""
    documents: int
    templates: tuple[tuple[str, int], ...]
    """The index templates whose patterns match the data stream, with their priorities,
    highest first: the first is the one a new backing index gets."""
    lifecycle: bool
    """Whether the server has index lifecycle management."""
    wrong: tuple[WrongIndex, ...] = ()
    """The stream's backing indices mapped otherwise than the template says."""


class ElasticsearchTraceIndex(Service):
    """The :class:`~hermesbus.trace.index.TraceIndex` on Elasticsearch
    (``HERMES_ELASTICSEARCH_URL``).

    ``install``: put the templates (and the lifecycle policy where the server has index
    lifecycle management) at start; the read-only commands pass False.
    """

    def __init__(self, config: ElasticsearchConfig, *, install: bool = True) -> None:
        self.config = config
        self.stream = self.config.data_stream
        self.where = f"{self.config.shown_url} ({self.stream})"
        self.template = templates.template_name(self.config.dataset)
        self._install = install
        self._client: AsyncElasticsearch | None = None
        self.lifecycle: bool | None = None
        """Whether the server has index lifecycle management (known once installed)."""
        self._installed = not install
        self._checked = 0.0  # time.monotonic() of the last look at the template

    async def start(self) -> None:
        if self._client is not None:
            return
        self._client = connect(self.config)
        if self._install:
            try:
                await self.install()
            except TraceIndexError as exc:
                if not exc.retriable:  # a refusal (a bad key, say) is a setting to fix
                    await self.stop()
                    raise
                log.warning("%s; the templates go in before the first write", exc)
            except BaseException:
                await self.stop()
                raise

    async def stop(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            await client.close()

    @property
    def client(self) -> AsyncElasticsearch:
        if self._client is None:
            raise TraceIndexError("the Elasticsearch trace index is not started", retriable=False)
        return self._client

    async def install(self) -> None:
        """The lifecycle policy (where supported), component templates, index template;
        then a stream whose write index lacks their mappings is rolled over."""
        client = self.client
        with translated("the index templates", self.config.shown_url):
            self.lifecycle = await self._put_policy()
            components = templates.component_templates(lifecycle=self.lifecycle, name=self.template)
            for name, body in components.items():
                await client.cluster.put_component_template(name=name, **body)
            template = templates.index_template(self.config.template_pattern, self.template)
            await client.indices.put_index_template(name=self.template, **template)
            rollups = templates.index_template(
                self.config.rollup_pattern, self.template, "one document per closed window"
            )
            name = templates.rollup_template_name(self.template)
            await client.indices.put_index_template(name=name, **rollups)
            await self._roll_over_if_wrong()
        self._installed, self._checked = True, time.monotonic()

    async def _roll_over_if_wrong(self) -> None:
        """Roll the stream over when its write index was made without the template (a
        write came first): new documents then go into one made from it. A plain index
        in the stream's place (a server with no data stream template then) cannot be:
        it is logged, for the operator (``hermesbus doctor`` says how)."""
        for wrong in await self._wrong():
            if not wrong.write_index:
                continue
            log.error(
                "trace index: %s was made without the template %s (%s); %s. `hermesbus "
                "doctor` says how to repair it",
                wrong.name,
                self.template,
                "; ".join(wrong.differences),
                f"rolling {self.stream} over so new documents are mapped right"
                if wrong.data_stream
                else "documents go on into it until it is deleted",
            )
            if wrong.data_stream:
                await self.client.indices.rollover(alias=self.stream)

    async def _wrong(self) -> list[WrongIndex]:
        """The stream's backing indices (or the plain index in its place) whose mappings
        are not the template's; the last backing index is the write index."""
        reply = await self.client.indices.get_mapping(
            index=self.stream, ignore_unavailable=True, allow_no_indices=True
        )
        found: dict[str, Any] = dict(reply.body)
        if self.stream in found:  # an index, not a data stream, has the name
            mapped = found[self.stream].get("mappings", {})
            differences = ("a plain index, not a data stream", *templates.wrongly_mapped(mapped))
            return [WrongIndex(self.stream, differences, write_index=True, data_stream=False)]
        backing = sorted(found, key=_generation)
        wrong = []
        for name in backing:
            differs = tuple(templates.wrongly_mapped(found[name].get("mappings", {})))
            if differs:
                wrong.append(WrongIndex(name, differs, name == backing[-1]))
        return wrong

    async def _ensure_templates(self) -> None:
        """Install them unless they are known to be there (looked at within
        TEMPLATE_CHECK_S); Elasticsearch back empty has none."""
        if self._installed and time.monotonic() - self._checked < TEMPLATE_CHECK_S:
            return
        if self._installed:
            with translated("a template check", self.config.shown_url):
                there = await self.client.indices.exists_index_template(name=self.template)
            self._checked = time.monotonic()
            if there:
                return
            log.warning(
                "trace index: the index template %s is gone from %s (did Elasticsearch "
                "come back empty?); putting the templates back before writing",
                self.template,
                self.config.shown_url,
            )
        await self.install()

    async def _put_policy(self) -> bool:
        from elasticsearch import ApiError  # noqa: PLC0415 - an optional extra

        try:
            await self.client.ilm.put_lifecycle(
                name=templates.LIFECYCLE_POLICY, policy=templates.lifecycle_policy()
            )
        except ApiError as exc:
            if status_of(exc) in _UNSUPPORTED:
                return False  # no lifecycle module on this server: the stream just grows
            raise
        return True

    async def write(self, docs: Sequence[Document]) -> WriteResult:
        await self._ensure_templates()  # no stream without them, even after an outage
        result = WriteResult()
        try:
            await self._bulk(docs, result)
        except TraceIndexError as exc:
            if exc.retriable:  # away: it may come back empty, so they go in again first
                self._installed = False
            raise
        return result

    async def _bulk(self, docs: Sequence[Document], result: WriteResult) -> None:
        from elasticsearch.helpers import async_streaming_bulk  # noqa: PLC0415

        later = 0
        aliases = {  # a rollup part's document id -> its record's, for the indexer
            _ROLLUP_ID + str(doc["event"]["id"]): doc["_id"] for doc in docs if _is_rollup(doc)
        }
        with translated("a bulk write", self.config.shown_url):
            async for _ok, item in async_streaming_bulk(
                self.client,
                docs,
                expand_action_callback=self._create,
                filter_path=_BULK_ANSWER,
                chunk_size=500,
                max_retries=self.config.bulk_max_retries,
                initial_backoff=0.2,
                max_backoff=5.0,
                raise_on_error=False,
            ):
                answer = item["create"]
                answer["_id"] = aliases.get(str(answer.get("_id")), answer.get("_id"))
                later += _sort(answer, result)
        if later:
            raise TraceIndexError(
                f"Elasticsearch at {self.config.shown_url} did not store {later} of {len(docs)} "
                "documents for now (429 or 5xx after retries)"
            )

    def _create(
        self, doc: bytes | str | Document
    ) -> tuple[dict[str, Any], bytes | Document | None]:
        """One document's bulk lines: ``create`` by its id, its body serialized once here
        (the helper passes bytes through; ``_id`` is metadata, not a field)."""
        if not isinstance(doc, dict):  # the helper's type allows raw lines; write gives none
            raise TypeError(f"a document is a dict, not {type(doc).__name__}")
        source = orjson.dumps({k: v for k, v in doc.items() if k != "_id"})
        if _is_rollup(doc):
            # a closed window's part by its message id: a part sent again (after a crash,
            # by another worker) is the same document, so charts never count it twice
            rollup_id = _ROLLUP_ID + str(doc["event"]["id"])
            return {"create": {"_index": self.config.rollup_stream, "_id": rollup_id}}, source
        return {"create": {"_index": self.stream, "_id": doc["_id"]}}, source

    async def refresh(self) -> None:
        """Make what was written searchable now (the indexer does it when it stops)."""
        with translated("a refresh", self.config.shown_url):
            await self.client.indices.refresh(index=self.stream, ignore_unavailable=True)

    async def by_trace(self, trace_id: str) -> list[Document]:
        return await self._all({"term": {"trace.id": trace_id}})

    async def by_session(self, session_id: str) -> list[Document]:
        return await self._all({"term": {"gen_ai.conversation.id": session_id}})

    async def search(self, query: Search) -> list[Document]:
        return await self._all(_query(query), limit=query.limit)

    async def appended(self, message_ids: Sequence[str]) -> dict[str, int]:
        found: dict[str, int] = {}
        for start in range(0, len(message_ids), 500):
            chunk = list(message_ids[start : start + 500])
            async for doc in self._pages({"terms": {"event.id": chunk}}, limit=None):
                at = doc["hermes"]["kafka"]["timestamp_ms"]
                found[doc["event"]["id"]] = min(at, found.get(doc["event"]["id"], at))
        return found

    async def count(self) -> int:
        with translated("a count", self.config.shown_url):
            reply = await self.client.count(index=self.stream, ignore_unavailable=True)
        return int(reply["count"])

    async def state(self) -> ServerState:
        """The cluster's health, the stream's documents, the index template that applies to
        the stream, whether lifecycle management exists and the backing indices mapped
        otherwise than the template says; read-only."""
        from elasticsearch import ApiError  # noqa: PLC0415 - an optional extra

        client = self.client
        with translated("a health check", self.config.shown_url):
            health = await client.cluster.health()
            documents = await self.count()
            listed = await client.indices.get_index_template()
            try:
                await client.ilm.get_lifecycle()
                lifecycle = True
            except ApiError as exc:
                if status_of(exc) not in _UNSUPPORTED:
                    raise
                lifecycle = False
            wrong = tuple(await self._wrong())
        matching = _matching(listed.get("index_templates", []), self.stream)
        return ServerState(str(health["status"]), documents, matching, lifecycle, wrong)

    async def _all(self, query: dict[str, Any], limit: int | None = None) -> list[Document]:
        return [doc async for doc in self._pages(query, limit=limit)]

    async def _pages(self, query: dict[str, Any], *, limit: int | None) -> AsyncIterator[Document]:
        after: list[Any] | None = None
        left = limit
        while left is None or left > 0:
            size = _PAGE if left is None else min(_PAGE, left)
            with translated("a search", self.config.shown_url):
                reply = await self.client.search(
                    index=self.stream,
                    query=query,
                    sort=_ORDER,
                    size=size,
                    ignore_unavailable=True,
                    allow_no_indices=True,
                    search_after=after,
                )
            hits = reply["hits"]["hits"]
            for hit in hits:
                yield {"_id": hit["_id"], **hit["_source"]}
            if len(hits) < size:
                return
            after = hits[-1]["sort"]
            left = None if left is None else left - len(hits)


def bulk_actions(stream: str, docs: Sequence[Document]) -> list[dict[str, Any]]:
    """``create`` actions in the helper's own form, for ``async_streaming_bulk`` as it is
    plainly used (the baseline of ``bench/index.py``; the index writes with ``_create``).
    ``_source`` is explicit: the helper would otherwise take the ECS top-level field
    ``parent`` for bulk metadata."""
    return [
        {
            "_op_type": "create",
            "_index": stream,
            "_id": doc["_id"],
            "_source": {k: v for k, v in doc.items() if k != "_id"},
        }
        for doc in docs
    ]


def _generation(backing: str) -> int:
    """A backing index's generation: ``.ds-<stream>-<date>-000002`` is 2."""
    tail = backing.rsplit("-", 1)[-1]
    return int(tail) if tail.isdigit() else 0


def _matching(templates: Sequence[dict[str, Any]], stream: str) -> tuple[tuple[str, int], ...]:
    """The composable templates whose patterns match ``stream``, highest priority first (a new
    backing index gets the first; Elasticsearch refuses two of one priority that overlap)."""
    matching = [
        (str(found["name"]), int(found["index_template"].get("priority") or 0))
        for found in templates
        if any(fnmatchcase(stream, p) for p in found["index_template"]["index_patterns"])
    ]
    return tuple(sorted(matching, key=lambda item: -item[1]))


_ROLLUP_ID = "rollup:"
"""A closed window's part is stored under ``rollup:<message id>`` (its record's id is
said back to the indexer)."""


def _is_rollup(doc: Document) -> bool:
    """A closed window's part (the trace index marked it so): its own stream and id."""
    return bool(doc.get("event", {}).get("dataset") == ROLLUP_DATASET)


def _sort(item: dict[str, Any], result: WriteResult) -> int:
    """File one bulk item's answer; 1 when it must be tried again later."""
    status = int(item.get("status", 0))
    doc = str(item.get("_id"))
    if status < _CONFLICT and "error" not in item:
        result.stored.append(doc)
    elif status == _CONFLICT:
        result.existing.append(doc)  # created before: the id is the record's place in the log
    elif status == _TOO_MANY or status >= _SERVER or status == 0:
        return 1
    else:
        error = item.get("error") or {}
        reason = error.get("reason") if isinstance(error, dict) else str(error)
        kind = error.get("type") if isinstance(error, dict) else "error"
        result.refused[doc] = f"{status} {kind}: {reason}"
    return 0


def _query(query: Search) -> dict[str, Any]:
    terms = {
        "service.name": query.component,
        "event.outcome": query.outcome,
        "gen_ai.conversation.id": query.session_id,
        "trace.id": query.trace_id,
        "messaging.destination.name": query.topic,
        "event.action": query.action,
    }
    filters: list[dict[str, Any]] = [
        {"term": {field: value}} for field, value in terms.items() if value is not None
    ]
    span = {"gte": query.since_ms, "lt": query.until_ms}
    span = {k: v for k, v in span.items() if v is not None}
    if span:
        filters.append({"range": {"@timestamp": {**span, "format": "epoch_millis"}}})
    must: list[dict[str, Any]] = []
    if query.text:
        fields = ["message", "hermes.payload_text", "error.message"]
        must.append({"multi_match": {"query": query.text, "type": "phrase", "fields": fields}})
    return {"bool": {"filter": filters, "must": must}}
