"""``/metrics`` of a running bus moves with its traffic: the demo's conversations through the
stack ``hermesbus up --demo`` runs, scraped before and after over HTTP."""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from hermesbus.compose.stack import Stack
from hermesbus.demo.expense import missing, run
from tests.integration.stacks import demo_stack

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

Samples = dict[str, dict[tuple[tuple[str, str], ...], float]]


async def _scrape(running: Stack) -> Samples:
    assert running.metrics is not None
    async with httpx.AsyncClient() as http:
        answer = await http.get(running.metrics.url, timeout=30)
    assert answer.status_code == 200
    found: Samples = defaultdict(dict)
    for family in text_string_to_metric_families(answer.text):
        for s in family.samples:
            found[s.name][tuple(sorted(s.labels.items()))] = s.value
    return found


def _by(samples: Samples, name: str, label: str) -> dict[str, float]:
    """``name``'s values summed per value of ``label``."""
    summed: dict[str, float] = defaultdict(float)
    for labels, value in samples.get(name, {}).items():
        summed[dict(labels)[label]] += value
    return summed


def _quiet(kind: str, item: object) -> None:
    """The demo's printer, silenced."""


async def test_the_figures_move_with_the_demos_traffic(
    embedded_bootstrap: str, unique: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    prefix = f"metrics-{unique}."
    async with demo_stack(embedded_bootstrap, prefix, tmp_path, monkeypatch) as running:
        before = await _scrape(running)
        assert _by(before, "hermesbus_records_processed_total", "component") == {}
        submitted, held = await run(running.bootstrap, running.prefix, _quiet)
        assert missing(submitted, "已提交") == [] == missing(held, "未完成报销流程")
        after = await _scrape(running)
        deadline = time.monotonic() + 120  # not about timing: the index catches up
        while _by(after, "hermesbus_indexer_documents_total", "outcome").get("indexed", 0) == 0:
            assert time.monotonic() < deadline, "the indexer indexed nothing"
            await asyncio.sleep(0.5)
            after = await _scrape(running)

    processed = _by(after, "hermesbus_records_processed_total", "component")
    for component in ("conversation", "dispatcher", "memory"):
        assert processed[component] > 0, processed
    assert sum(n for c, n in processed.items() if c.startswith("tool")) > 0, processed
    in_topic = _by(after, "hermesbus_records_processed_total", "topic")
    assert in_topic[f"{prefix}hermes.conversation.in"] >= 8  # 4 user turns each
    handled = _by(after, "hermesbus_handler_duration_seconds_count", "component")
    assert handled["conversation"] >= processed["conversation"]
    assert _by(after, "hermesbus_handler_duration_seconds_sum", "component")["dispatcher"] > 0
    lag = after["hermesbus_commit_lag_records"]
    owned = {dict(labels)["topic"] for labels in lag}
    assert f"{prefix}hermes.dispatcher" in owned  # one gauge per partition fetched
    assert all(value >= 0 for value in lag.values())
    assert _by(after, "hermesbus_dead_letters_total", "component")["conversation"] == 0
    assert after["hermesbus_indexer_lag_records"]  # partitions the indexer stored from
