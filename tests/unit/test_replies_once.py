"""The client's memory of delivered replies stays bounded (hermesbus/client/_once.py)."""

from __future__ import annotations

from hermesbus.client._once import Delivered, Seen


def test_seen_keeps_the_last_ids_and_the_first_time_of_each() -> None:
    seen = Seen(3)
    for tick, message_id in enumerate(("a", "b", "a", "c", "d"), start=1):
        seen.add(message_id, tick)
    assert len(seen) == 3 and "a" not in seen  # the oldest went first
    assert [seen.get(m) for m in ("b", "c", "d")] == [2, 4, 5]


def test_delivered_counts_deliveries_and_forgets_the_least_recent_session() -> None:
    delivered = Delivered(per_session=2, sessions=2)
    delivered.add("s1", "a")
    delivered.add("s2", "b")
    delivered.add("s1", "c")  # s1 is the most recent now
    delivered.add("s3", "d")  # s2 goes
    assert delivered.tick == 4 and len(delivered) == 2
    assert delivered.at("s1", "a") == 1 and delivered.at("s1", "c") == 3
    assert delivered.at("s2", "b") is None
    assert delivered.at("s3", "d") == 4
    delivered.add("s1", "e")  # s1 keeps two ids: a goes
    assert delivered.at("s1", "a") is None and delivered.at("s1", "e") == 5
