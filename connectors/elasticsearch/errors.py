"""Errors of the Elasticsearch connector (re-exported from :mod:`hermesbus.errors`)."""

from hermesbus.errors import ConfigError, TraceIndexError

__all__ = ["ConfigError", "TraceIndexError"]
