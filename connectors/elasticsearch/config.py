"""Where Elasticsearch is and how to speak to it: ``HERMES_ELASTICSEARCH_*`` settings."""

from __future__ import annotations

import re

from pydantic import SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from hermesbus.base.config import without_userinfo

__all__ = ["ElasticsearchConfig"]

_STREAM = re.compile(r"^logs-[a-z0-9_.]+-[a-z0-9_.]+$")


class ElasticsearchConfig(BaseSettings):
    """``HERMES_ELASTICSEARCH_URL`` selects Elasticsearch for the trace index; the API key,
    if any, comes only from the environment and is never printed."""

    model_config = SettingsConfigDict(
        env_prefix="HERMES_ELASTICSEARCH_", frozen=True, extra="ignore"
    )

    url: str | None = None
    api_key: SecretStr | None = None
    data_stream: str = "logs-hermes.envelopes-default"
    """``logs-<dataset>-<namespace>``: the index template matches ``logs-hermes.envelopes-*``."""
    request_timeout_s: float = 10.0
    bulk_max_retries: int = 5
    """How often a document refused with 429 (too many requests) is retried, with back-off,
    inside one bulk call before the batch counts as not stored for now."""

    @field_validator("data_stream")
    @classmethod
    def _stream_name(cls, value: str) -> str:
        if not _STREAM.match(value):
            raise ValueError(
                "a data stream name is logs-<dataset>-<namespace> in lowercase, "
                f"e.g. logs-hermes.envelopes-default; got {value!r}"
            )
        return value

    @property
    def shown_url(self) -> str:
        """The URL for messages: without a ``user:password@`` part, never printed."""
        return without_userinfo(self.url) if self.url else ""

    @property
    def template_pattern(self) -> str:
        """The data streams the index template applies to (every namespace)."""
        return self.data_stream.rsplit("-", 1)[0] + "-*"

    @property
    def rollup_stream(self) -> str:
        """Where the diagnostics rollup's closed windows go, a data stream of their own next
        to the envelopes': ``logs-hermes.diagnostics-default`` for the default stream."""
        prefix, dataset, namespace = self.data_stream.split("-", 2)
        base = dataset.removesuffix(".envelopes")
        return f"{prefix}-{base}.diagnostics-{namespace}"

    @property
    def rollup_pattern(self) -> str:
        """The rollup streams the rollup template applies to (every namespace)."""
        return self.rollup_stream.rsplit("-", 1)[0] + "-*"

    @property
    def dataset(self) -> str:
        """The stream's dataset: ``hermes.envelopes`` in ``logs-hermes.envelopes-default``."""
        return self.data_stream.split("-", 2)[1]
