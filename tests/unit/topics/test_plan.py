"""Which partition count the existing session topics agree on (``session_partitions``)."""

from __future__ import annotations

from hermesbus.topics import Catalog, ExistingTopic, session_partitions

CATALOG = Catalog.load()


def _existing(**counts: int) -> dict[str, ExistingTopic]:
    names = {name.replace("_", "."): count for name, count in counts.items()}
    return {name: ExistingTopic(name, count, 1, None) for name, count in names.items()}


def test_none_exists_none_is_said() -> None:
    assert session_partitions(CATALOG, {}) == {}


def test_topics_that_agree_give_one_count_whatever_the_catalog_says() -> None:
    existing = _existing(hermes_conversation_in=24, hermes_dispatcher=24, hermes_tool=24)
    found = session_partitions(CATALOG, existing)
    assert list(found.values()) == [24]
    assert len(found) == 1


def test_topics_that_disagree_are_all_named() -> None:
    existing = _existing(hermes_conversation_in=4, hermes_dispatcher=6, hermes_tool=6)
    assert session_partitions(CATALOG, existing) == {
        "hermes.conversation.in": 4,
        "hermes.dispatcher": 6,
        "hermes.tool": 6,
    }


def test_a_topic_keyed_by_something_else_does_not_count() -> None:
    existing = _existing(hermes_conversation_in=6, hermes_alerts=1)  # alerts: by component
    assert list(session_partitions(CATALOG, existing).values()) == [6]
