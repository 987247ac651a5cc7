"""The abstract PreferenceStore suite: every implementation must pass it (SQLite now)."""

from __future__ import annotations

from hermesbus.processors.memory import ChoiceCount, MidTermItem, Preference, PreferenceStore


def item(key: str, importance: float = 0.5, at: int = 1_000, **fields: object) -> MidTermItem:
    values: dict[str, object] = {
        "user_id": "u1",
        "key": key,
        "value_json": '"v"',
        "importance": importance,
        "created_at_ms": at,
        "updated_at_ms": at,
    }
    return MidTermItem.model_validate({**values, **fields})


async def test_is_the_protocol(preference_store: PreferenceStore) -> None:
    assert isinstance(preference_store, PreferenceStore)


async def test_a_preference_is_stored_under_its_pref_key(preference_store: PreferenceStore) -> None:
    pref = Preference(
        user_id="u1", name="lang", value_json='"zh-Hans"', updated_at_ms=5, confirmed_by="m9"
    )
    await preference_store.put_preference(pref)
    assert pref.key == "pref:u1:lang"
    assert await preference_store.preference("u1", "lang") == pref
    assert await preference_store.preference("u2", "lang") is None
    newer = pref.model_copy(update={"value_json": '"en"', "updated_at_ms": 9})
    await preference_store.put_preference(newer)
    assert await preference_store.preference("u1", "lang") == newer


async def test_an_expired_preference_is_hidden_by_time(preference_store: PreferenceStore) -> None:
    pref = Preference(
        user_id="u1", name="x", value_json="1", updated_at_ms=0, confirmed_by="m", expires_at_ms=100
    )
    await preference_store.put_preference(pref)
    assert await preference_store.preference("u1", "x", 99) == pref
    assert await preference_store.preference("u1", "x", 100) is None
    assert await preference_store.preference("u1", "x") == pref  # no time: everything stored


async def test_choices_count_per_value_and_once_per_observation(
    preference_store: PreferenceStore,
) -> None:
    for obs, value, at in [("a", '"accept"', 1), ("b", '"accept"', 2), ("c", '"reject"', 3)]:
        await preference_store.observe_choice("u1", "blur", value, obs, at)
    await preference_store.observe_choice("u1", "blur", '"accept"', "a", 1)  # redelivered
    await preference_store.observe_choice("u2", "blur", '"reject"', "d", 4)  # another user
    assert await preference_store.choices("u1", "blur") == (
        ChoiceCount(value_json='"accept"', count=2, last_at_ms=2),
        ChoiceCount(value_json='"reject"', count=1, last_at_ms=3),
    )
    assert await preference_store.choices("u1", "other") == ()


async def test_only_the_latest_choices_are_kept(preference_store: PreferenceStore) -> None:
    """Bounded per (user, name): older observations go, other names and users stay."""
    for at in range(1, 8):
        value = '"reject"' if at <= 4 else '"accept"'  # 4 old rejects, then 3 accepts
        await preference_store.observe_choice("u1", "blur", value, f"o{at}", at, keep=3)
    await preference_store.observe_choice("u1", "other", '"x"', "p1", 1, keep=3)
    await preference_store.observe_choice("u2", "blur", '"reject"', "q1", 1, keep=3)
    assert await preference_store.choices("u1", "blur") == (
        ChoiceCount(value_json='"accept"', count=3, last_at_ms=7),
    )
    assert [c.count for c in await preference_store.choices("u1", "other")] == [1]
    assert [c.count for c in await preference_store.choices("u2", "blur")] == [1]
    # an old observation redelivered after it was pruned is older than all kept: pruned again
    await preference_store.observe_choice("u1", "blur", '"reject"', "o1", 1, keep=3)
    assert [c.value_json for c in await preference_store.choices("u1", "blur")] == ['"accept"']


async def test_choice_ties_put_the_latest_first(preference_store: PreferenceStore) -> None:
    await preference_store.observe_choice("u1", "n", '"old"', "a", 1)
    await preference_store.observe_choice("u1", "n", '"new"', "b", 2)
    counts = await preference_store.choices("u1", "n")
    assert [c.value_json for c in counts] == ['"new"', '"old"']


async def test_items_update_in_place_keeping_their_creation(
    preference_store: PreferenceStore,
) -> None:
    await preference_store.put_item(item("unfinished:s1", at=10))
    await preference_store.put_item(item("unfinished:s1", importance=0.9, at=20, value_json="2"))
    await preference_store.put_item(item("a-first", at=30))
    stored = await preference_store.item("u1", "unfinished:s1")
    assert stored is not None
    assert (stored.created_at_ms, stored.updated_at_ms) == (10, 20)
    assert (stored.value_json, stored.importance) == ("2", 0.9)
    keys = [i.key for i in await preference_store.items("u1")]
    assert keys == ["a-first", "unfinished:s1"]
    assert await preference_store.items("u2") == ()


async def test_expired_items_are_hidden_then_purged(preference_store: PreferenceStore) -> None:
    await preference_store.put_item(item("short", expires_at_ms=2_000))
    await preference_store.put_item(item("long", expires_at_ms=9_000))
    await preference_store.put_item(item("forever"))
    assert [i.key for i in await preference_store.items("u1", 2_000)] == ["forever", "long"]
    assert await preference_store.item("u1", "short", 1_999) is not None
    assert await preference_store.item("u1", "short", 2_000) is None
    assert await preference_store.purge_expired("u1", 9_000) == ("long", "short")
    assert [i.key for i in await preference_store.items("u1")] == ["forever"]


async def test_eviction_takes_the_least_important_then_the_oldest(
    preference_store: PreferenceStore,
) -> None:
    for key, importance, at in [
        ("keep-important", 0.9, 1),
        ("old-low", 0.1, 1),
        ("new-low", 0.1, 5),
        ("old-mid", 0.5, 2),
        ("new-mid", 0.5, 6),
    ]:
        await preference_store.put_item(item(key, importance, at))
    await preference_store.put_item(item("other-user", 0.0, 0, user_id="u2"))
    assert await preference_store.evict("u1", 5) == ()
    assert await preference_store.evict("u1", 2) == ("old-low", "new-low", "old-mid")
    assert [i.key for i in await preference_store.items("u1")] == ["keep-important", "new-mid"]
    assert [i.key for i in await preference_store.items("u2")] == ["other-user"]
