"""The conversation's settings (``HERMES_LLM_*``) and the one function that builds its ports."""

from __future__ import annotations

from typing import Final

from pydantic import SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from hermesbus.lifecycle import Service

from ._intent import RuleIntentParser
from ._llm import HttpIntentParser

__all__ = ["INTENT_PORT", "ConversationSettings", "build_ports"]

INTENT_PORT: Final = "intent"


class ConversationSettings(BaseSettings):
    """``HERMES_LLM_URL`` unset: the rule parser only; the API key is never printed."""

    model_config = SettingsConfigDict(env_prefix="HERMES_", frozen=True, extra="ignore")

    llm_url: str | None = None
    """API root including the version, e.g. ``http://localhost:8080/v1``."""
    llm_model: str = "gpt-4o-mini"
    llm_api_key: SecretStr | None = None
    llm_timeout_s: float = 3.0


def build_ports(settings: ConversationSettings | None = None) -> dict[str, Service]:
    """``{"intent": parser}``: start/stop each value (``async with``) around the processor."""
    settings = settings or ConversationSettings()
    if not settings.llm_url:
        return {INTENT_PORT: RuleIntentParser()}
    parser = HttpIntentParser(
        settings.llm_url,
        model=settings.llm_model,
        api_key=settings.llm_api_key,
        timeout_s=settings.llm_timeout_s,
    )
    return {INTENT_PORT: parser}
