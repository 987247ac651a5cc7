"""Errors of the SQLite connector (re-exported from :mod:`hermesbus.errors`)."""

from hermesbus.errors import StoreError

__all__ = ["StoreError"]
