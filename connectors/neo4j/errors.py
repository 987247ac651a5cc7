"""Errors of the Neo4j connector (re-exported from :mod:`hermesbus.errors`)."""

from hermesbus.errors import ConfigError, StoreError

__all__ = ["ConfigError", "StoreError"]
