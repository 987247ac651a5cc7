"""The look at the catalog's topics that ``up`` provisions from and ``doctor`` checks:
session topics must share one partition count; the missing ones follow the existing ones."""

from __future__ import annotations

from hermesbus.compose.provision import Found
from hermesbus.connectors.kafka import ExistingTopic
from hermesbus.topics import Catalog, sized_by_existing

PREFIX = "p."


def _found(partitions: dict[str, int]) -> Found:
    listed = Catalog.load().with_overrides(prefix=PREFIX)
    existing = {
        PREFIX + name: ExistingTopic(PREFIX + name, count, 1, None)
        for name, count in partitions.items()
    }
    catalog, counts = sized_by_existing(listed, existing)
    return Found(listed, existing, catalog, counts)


def test_session_topics_that_disagree_are_named_with_their_counts() -> None:
    found = _found({"hermes.conversation.in": 4, "hermes.dispatcher": 6})
    assert found.disagreeing == "p.hermes.conversation.in=4, p.hermes.dispatcher=6"
    assert found.partitions is None


def test_missing_session_topics_take_the_existing_count() -> None:
    found = _found({"hermes.conversation.in": 4})
    assert found.disagreeing is None
    assert found.partitions == 4
    created = found.plan().create
    assert "p.hermes.dispatcher" in {spec.name for spec in created}
    assert {spec.partitions for spec in created if spec.name == "p.hermes.dispatcher"} == {4}
    assert "p.hermes.conversation.in" not in {spec.name for spec in created}


def test_with_no_topic_the_catalog_is_created_as_it_says() -> None:
    found = _found({})
    assert found.disagreeing is None and found.partitions is None
    assert len(found.plan().create) == len(found.listed.names())
