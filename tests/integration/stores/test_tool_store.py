"""The ToolStore suite against a real Redis: the very tests SQLite passes (imported from the
unit suite), then what only Redis promises: one hash slot for every key."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from hermesbus.base.storemark import MarkBook
from hermesbus.connectors.redis import RedisConfig, RedisToolStore
from hermesbus.processors.tool import ToolStore
from tests.unit.processors.tool.test_tool_store import (  # the shared suite
    stored,
    test_a_key_stored_again_is_replaced,
    test_a_result_is_found_by_its_idempotency_key_with_its_digest,
    test_a_spec_is_replaced_only_if_it_is_still_as_read,
    test_admitted_calls_are_forgotten_by_the_stores_clock_never_an_envelopes,
    test_call_stats_cover_the_latest_calls,
    test_calls_are_admitted_per_user_until_a_window_is_full,
    test_old_results_are_pruned_by_envelope_time,
    test_specs_are_kept_by_name_and_listed_in_order,
    test_the_latest_probe_per_tool,
    test_the_newest_result_for_the_arguments_is_the_cache,
)

__all__ = [
    "test_a_key_stored_again_is_replaced",
    "test_a_result_is_found_by_its_idempotency_key_with_its_digest",
    "test_a_spec_is_replaced_only_if_it_is_still_as_read",
    "test_admitted_calls_are_forgotten_by_the_stores_clock_never_an_envelopes",
    "test_call_stats_cover_the_latest_calls",
    "test_calls_are_admitted_per_user_until_a_window_is_full",
    "test_old_results_are_pruned_by_envelope_time",
    "test_specs_are_kept_by_name_and_listed_in_order",
    "test_the_latest_probe_per_tool",
    "test_the_newest_result_for_the_arguments_is_the_cache",
]


@pytest.fixture
async def tool_store(redis_config: RedisConfig, book: MarkBook) -> AsyncIterator[ToolStore]:
    async with RedisToolStore(redis_config, book=book) as store:
        yield store


async def test_redis_tool_keys_share_one_hash_slot(tool_store: RedisToolStore) -> None:
    from redis.crc import key_slot

    await tool_store.put_result("k1", "d1", stored("org_tool", 100))
    await tool_store.record_call("org_tool", 1, 2.0, ok=True)
    prefix = tool_store.config.prefix
    keys = [k async for k in tool_store.redis.scan_iter(match=f"{prefix}:*")]
    keys.remove(f"{prefix}:{{{prefix}:mark}}:tools".encode())  # the mark: in a slot of its own
    assert len(keys) >= 4 and len({key_slot(k) for k in keys}) == 1
