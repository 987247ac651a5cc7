"""Errors of the Redis connector (re-exported from :mod:`hermesbus.errors`)."""

from hermesbus.errors import ConfigError, StoreError

__all__ = ["ConfigError", "StoreError"]
