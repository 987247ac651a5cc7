"""Intent reading is a port (``ports["intent"]``): the zone turns are read in, and, when a
model is configured, which of a flow's intents a message no rule matched expresses.

Relative dates ("上个月" / "last month" = the calendar month before the turn's date) are
counted on the calendar of the port's zone, from the envelope's time, so a reading is
deterministic. Without a model the port is :class:`RuleIntentParser`: the flows' own rules
(their phrases, patterns and answers, or their parser hooks) read every turn.
"""

from __future__ import annotations

from datetime import tzinfo
from typing import Final, Protocol
from zoneinfo import ZoneInfo

from hermesbus.base.lifecycle import Service

__all__ = ["DEFAULT_TIMEZONE", "IntentParser", "RuleIntentParser"]

DEFAULT_TIMEZONE: Final = "Asia/Shanghai"
"""The demo company's zone: relative dates ("上个月") are counted on their calendar."""


class IntentParser(Protocol):
    """``ports["intent"]``: the zone whose calendar relative dates are resolved in (a model
    parser adds ``classify``, see ``HttpIntentParser``)."""

    @property
    def zone(self) -> tzinfo:
        """The zone whose calendar relative dates are resolved in."""
        ...


class RuleIntentParser(Service):
    """The default port: the flows' rules alone, no I/O; start/stop do nothing. Relative
    dates are counted on the calendar of ``zone`` (default :data:`DEFAULT_TIMEZONE`)."""

    def __init__(self, zone: tzinfo | None = None) -> None:
        self.zone: tzinfo = zone if zone is not None else ZoneInfo(DEFAULT_TIMEZONE)

    async def start(self) -> None:
        return None

    async def stop(self) -> None:
        return None
