"""Relative dates on the users' calendar (``HERMES_CONVERSATION_TIMEZONE``), not UTC."""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest

from hermesbus.errors import ConfigError
from hermesbus.processors.conversation import (
    ConversationSettings,
    HttpIntentParser,
    RuleIntentParser,
    build_ports,
)

from .demo import Driver, read

# 2024-06-01 00:30 in Shenzhen (+08:00) is still 2024-05-31 in UTC
JUST_AFTER = datetime(2024, 5, 31, 16, 30, tzinfo=UTC)
# 2024-05-31 23:59 in Shenzhen
JUST_BEFORE = datetime(2024, 5, 31, 15, 59, tzinfo=UTC)


@pytest.mark.parametrize(("now", "month"), [(JUST_AFTER, "2024-05"), (JUST_BEFORE, "2024-04")])
def test_last_month_is_counted_in_shanghai_by_default(now: datetime, month: str) -> None:
    assert read("上个月的差旅费", now)[1]["period"] == month


def test_another_zone_counts_on_its_own_calendar() -> None:
    assert read("上个月的差旅费", JUST_AFTER, zone="UTC")[1]["period"] == "2024-04"
    first = datetime(2024, 6, 1, 3, 0, tzinfo=UTC)  # still 2024-05-31 in New York
    assert read("last month expenses", first, zone="America/New_York")[1]["period"] == "2024-04"


@pytest.mark.parametrize(("zone", "month"), [(None, "2024-05"), ("UTC", "2024-04")])
async def test_the_handler_uses_the_zone_of_its_ports(zone: str | None, month: str) -> None:
    ports = {} if zone is None else build_ports(ConversationSettings(conversation_timezone=zone))
    d = Driver(ports=dict(ports), now=JUST_AFTER)
    await d.say("我要报上个月去深圳的差旅费")
    assert d.state.data["facts"]["period"] == month


def test_the_setting_is_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HERMES_CONVERSATION_TIMEZONE", "Europe/Berlin")
    settings = ConversationSettings()
    assert settings.zone == ZoneInfo("Europe/Berlin")
    (parser,) = build_ports(settings).values()
    assert isinstance(parser, RuleIntentParser) and parser.zone == ZoneInfo("Europe/Berlin")
    assert ConversationSettings.model_fields["conversation_timezone"].default == "Asia/Shanghai"


@pytest.mark.parametrize("name", ["Mars/Olympus_Mons", "../etc/passwd", ""])
def test_an_unknown_zone_is_a_config_error(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    monkeypatch.setenv("HERMES_CONVERSATION_TIMEZONE", name)
    with pytest.raises(ConfigError, match="HERMES_CONVERSATION_TIMEZONE"):
        ConversationSettings()


def test_the_http_parser_gets_the_zone_too() -> None:
    settings = ConversationSettings(llm_url="http://127.0.0.1:9/v1")
    (parser,) = build_ports(settings).values()
    assert isinstance(parser, HttpIntentParser) and parser.zone == ZoneInfo("Asia/Shanghai")
