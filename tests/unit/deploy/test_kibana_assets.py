"""The Kibana saved objects against the index template's mapping (no Kibana runs here).

Every field a saved object filters, sorts, shows or aggregates on must be in the
mapping, with a type the use needs: terms on keywords or numbers, averages and
percentiles on numbers, date histograms on dates.
"""

from __future__ import annotations

import json
import re
from typing import Any

import httpx
import pytest

from hermesbus.cli._kibana import ASSETS, import_objects
from hermesbus.connectors.elasticsearch.config import ElasticsearchConfig
from hermesbus.connectors.elasticsearch.templates import index_template, mappings

NUMERIC = {"long", "integer", "double", "float"}
USES = {
    "terms": NUMERIC | {"keyword"},
    "avg": NUMERIC,
    "max": NUMERIC,
    "sum": NUMERIC,
    "percentiles": NUMERIC,
    "date_histogram": {"date"},
}
_KUERY_FIELD = re.compile(r"([A-Za-z@_][\w.@]*):")


def _types(properties: dict[str, Any], prefix: str = "") -> dict[str, str]:
    found: dict[str, str] = {}
    for name, spec in properties.items():
        path = prefix + name
        if "properties" in spec:
            found |= _types(spec["properties"], path + ".")
        else:
            found[path] = spec["type"]
    return found


TYPES = _types(mappings()["properties"])
OBJECTS = [json.loads(line) for line in ASSETS.read_text().splitlines() if line.strip()]


def _source(obj: dict[str, Any]) -> dict[str, Any]:
    meta = obj["attributes"].get("kibanaSavedObjectMeta", {})
    parsed: dict[str, Any] = json.loads(meta.get("searchSourceJSON", "{}"))
    return parsed


def _query_fields(obj: dict[str, Any]) -> list[str]:
    query = _source(obj).get("query", {}).get("query", "")
    return _KUERY_FIELD.findall(query)


@pytest.mark.parametrize("obj", OBJECTS, ids=lambda o: o["id"])
def test_every_field_used_is_mapped_with_a_usable_type(obj: dict[str, Any]) -> None:
    attributes = obj["attributes"]
    used = _query_fields(obj) + list(attributes.get("columns", []))
    used += [field for field, _order in attributes.get("sort", [])]
    assert all(field in TYPES for field in used), [f for f in used if f not in TYPES]
    if obj["type"] == "visualization":
        for agg in json.loads(attributes["visState"])["aggs"]:
            field = agg["params"].get("field")
            if field is not None:
                assert TYPES.get(field) in USES[agg["type"]], (field, agg["type"])


def test_the_data_views_cover_the_streams_templates_and_their_time_field() -> None:
    """One view over the envelopes' streams, one over the rollup's (closed windows), each
    with the pattern of the index template hermesbus installs for them."""
    config = ElasticsearchConfig(data_stream="logs-hermes.envelopes-default")
    views = {o["id"]: o["attributes"] for o in OBJECTS if o["type"] == "index-pattern"}
    assert (
        {view["title"] for view in views.values()}
        == {
            index_template(config.template_pattern)["index_patterns"][0],
            index_template(config.rollup_pattern)["index_patterns"][0],
        }
        == {"logs-hermes.envelopes-*", "logs-hermes.diagnostics-*"}
    )
    assert all(TYPES[view["timeFieldName"]] == "date" for view in views.values())
    for obj in OBJECTS:  # the rollup's fields are charted from its view, alerts from the other
        fields = json.dumps(obj["attributes"])
        (view,) = [r["id"] for r in obj["references"] if r["type"] == "index-pattern"] or [None]
        if "hermes.rollup." in fields:
            assert view == "hermes-diagnostics", obj["id"]
        elif view is not None:
            assert view == "hermes-envelopes", obj["id"]


def test_the_alerts_panels_use_the_fields_the_indexer_writes() -> None:
    """What an alert's document holds (``hermes.alert``), as the indexer makes it."""
    used = set()
    for obj in OBJECTS:
        text = json.dumps(obj["attributes"])
        used |= set(re.findall(r"hermes\.alert\.[a-z_]+", text))
    assert used and used <= {f for f in TYPES if f.startswith("hermes.alert.")}


def test_every_reference_points_at_a_shipped_object() -> None:
    shipped = {(o["type"], o["id"]) for o in OBJECTS}
    for obj in OBJECTS:
        for ref in obj["references"]:
            assert (ref["type"], ref["id"]) in shipped, (obj["id"], ref)
    boards = [o for o in OBJECTS if o["type"] == "dashboard"]
    assert {b["id"] for b in boards} == {"hermes-overview", "hermes-diagnostics-board"}
    for board in boards:
        names = {ref["name"] for ref in board["references"]}
        panels = json.loads(board["attributes"]["panelsJSON"])
        assert {p["panelRefName"] for p in panels} == names
    searches = {o["id"] for o in OBJECTS if o["type"] == "search"}
    expected = {"hermes-by-trace", "hermes-by-session", "hermes-failures", "hermes-dead-letters"}
    assert searches == expected | {"hermes-alerts"}


def test_the_import_request_is_what_the_saved_objects_api_takes() -> None:
    """The request's shape only: no Kibana can be installed on these machines."""
    seen: list[httpx.Request] = []

    def kibana(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"success": True, "successCount": len(OBJECTS)})

    with httpx.Client(transport=httpx.MockTransport(kibana)) as client:
        answer = import_objects(client, "http://kb:5601/", ASSETS, space="ops", api_key="k")
    assert answer == {"success": True, "successCount": len(OBJECTS)}
    (request,) = seen
    assert str(request.url) == "http://kb:5601/s/ops/api/saved_objects/_import?overwrite=true"
    assert request.headers["kbn-xsrf"] == "true"
    assert request.headers["authorization"] == "ApiKey k"
    body = request.read()
    assert b'filename="hermes-envelopes.ndjson"' in body and ASSETS.read_bytes() in body
