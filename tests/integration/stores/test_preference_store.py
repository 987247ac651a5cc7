"""The PreferenceStore suite against a real Redis: the very tests SQLite passes (imported
from the unit suite), then what only Redis promises: the keys' names and hash slots."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from hermesbus.base.storemark import MarkBook
from hermesbus.connectors.redis import RedisConfig
from hermesbus.connectors.redis.memory import RedisPreferenceStore
from hermesbus.processors.memory import Preference, PreferenceStore
from tests.unit.processors.memory.test_preference_store import (  # the shared suite
    item,
    test_a_preference_is_stored_under_its_pref_key,
    test_an_expired_preference_is_hidden_by_time,
    test_choice_ties_put_the_latest_first,
    test_choices_count_per_value_and_once_per_observation,
    test_eviction_takes_the_least_important_then_the_oldest,
    test_expired_items_are_hidden_then_purged,
    test_is_the_protocol,
    test_items_update_in_place_keeping_their_creation,
    test_only_the_latest_choices_are_kept,
)

__all__ = [
    "test_a_preference_is_stored_under_its_pref_key",
    "test_an_expired_preference_is_hidden_by_time",
    "test_choice_ties_put_the_latest_first",
    "test_choices_count_per_value_and_once_per_observation",
    "test_eviction_takes_the_least_important_then_the_oldest",
    "test_expired_items_are_hidden_then_purged",
    "test_is_the_protocol",
    "test_items_update_in_place_keeping_their_creation",
    "test_only_the_latest_choices_are_kept",
]


@pytest.fixture
async def preference_store(
    redis_config: RedisConfig, book: MarkBook
) -> AsyncIterator[PreferenceStore]:
    async with RedisPreferenceStore(redis_config, book=book) as store:
        yield store


async def test_redis_keeps_a_preference_as_pref_user_name_in_the_users_slot(
    preference_store: RedisPreferenceStore,
) -> None:
    from redis.crc import key_slot

    pref = Preference(
        user_id="u1", name="lang", value_json='"zh"', updated_at_ms=5, confirmed_by="m9"
    )
    await preference_store.put_preference(pref)
    await preference_store.put_item(item("unfinished:s1", importance=0.123456789012345678))
    await preference_store.observe_choice("u1", "blur", '"accept"', "o1", 1)
    prefix = preference_store.config.prefix
    keys = {k.decode() async for k in preference_store.redis.scan_iter(match=f"{prefix}:*")}
    keys.remove(f"{prefix}:{{{prefix}:mark}}:memory")  # the store's mark, in a slot of its own
    assert f"{prefix}:pref:{{u1}}:lang" in keys  # pref:{user_id}:{name}
    assert len({key_slot(k.encode()) for k in keys}) == 1  # one user: one slot
    (kept,) = await preference_store.items("u1")
    assert kept.importance == 0.123456789012345678  # stored as given, not re-encoded
