"""The conversation's settings (``HERMES_LLM_*``, ``HERMES_CONVERSATION_TIMEZONE``) and the
one function that builds its ports."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Final, Protocol
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from hermesbus.base.lifecycle import Service
from hermesbus.errors import ConfigError
from hermesbus.processors.conversation._intent import DEFAULT_TIMEZONE, RuleIntentParser
from hermesbus.processors.conversation._llm import HttpIntentParser
from hermesbus.processors.flow import EXPENSE_SPEC

__all__ = [
    "BUDGETS_PORT",
    "INTENT_PORT",
    "Budgets",
    "ConversationSettings",
    "CycleBudgets",
    "build_ports",
    "zone_of",
]

INTENT_PORT: Final = "intent"
BUDGETS_PORT: Final = "budgets"


class CycleBudgets(Protocol):
    """``ports["budgets"]``: the ``timeout_ms`` a cycle of tool work gets in ``state``
    whose own budget is ``base_ms`` (a flow state's; None: the expense table's)."""

    def timeout_ms(self, state: str, base_ms: int | None = None) -> int: ...


@dataclass(frozen=True, slots=True)
class Budgets:
    """``ports["budgets"]``: the time each state gives a cycle of tool work, its flow's
    (for the expense report its spec's: 5 s, 30 s)
    times ``scale``. Without the port the budgets apply unscaled."""

    scale: float = 1.0

    def timeout_ms(self, state: str, base_ms: int | None = None) -> int:
        base = base_ms if base_ms is not None else EXPENSE_SPEC.budget_of(state)
        return round(base * self.scale)


class ConversationSettings(BaseSettings):
    """``HERMES_LLM_URL`` unset: the rule parser only; the API key is never printed."""

    model_config = SettingsConfigDict(env_prefix="HERMES_", frozen=True, extra="ignore")

    llm_url: str | None = None
    """API root including the version, e.g. ``http://localhost:8080/v1``."""
    llm_model: str = "gpt-4o-mini"
    llm_api_key: SecretStr | None = None
    llm_timeout_s: Annotated[float, Field(gt=0, le=120)] = 3.0
    """The bound on one whole request to the endpoint (not per read), in seconds."""
    llm_agent_timeout_s: Annotated[float, Field(gt=0, le=600)] = 30.0
    """``HERMES_LLM_AGENT_TIMEOUT_S``: the bound on one round of an agent state's model
    (which reads tool schemas and results: longer than classifying a turn)."""
    conversation_timezone: str = DEFAULT_TIMEZONE
    """``HERMES_CONVERSATION_TIMEZONE``: the IANA zone relative dates ("上个月") count in."""
    conversation_budget_scale: Annotated[float, Field(ge=0.1, le=10)] = 1.0
    """``HERMES_CONVERSATION_BUDGET_SCALE``: multiplies every state's cycle budget (the
    documents' 5 s and 30 s at 1): more for a slow machine, or a test not about timing."""

    @field_validator("conversation_timezone")
    @classmethod
    def _known_zone(cls, name: str) -> str:
        zone_of(name)
        return name

    @property
    def zone(self) -> ZoneInfo:
        return zone_of(self.conversation_timezone)


def zone_of(name: str) -> ZoneInfo:
    """The IANA zone ``name``; a ConfigError names a zone that does not exist."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise ConfigError(
            f"HERMES_CONVERSATION_TIMEZONE={name!r} is not a known IANA time zone"
        ) from exc


def build_ports(settings: ConversationSettings) -> dict[str, Service]:
    """``{"intent": parser}`` from the program's settings: start/stop each value (``async
    with``) around the processor."""
    if not settings.llm_url:
        return {INTENT_PORT: RuleIntentParser(settings.zone)}
    parser = HttpIntentParser(
        settings.llm_url,
        model=settings.llm_model,
        api_key=settings.llm_api_key,
        timeout_s=settings.llm_timeout_s,
        zone=settings.zone,
    )
    return {INTENT_PORT: parser}
