"""Errors of the schema registry connector (re-exported from :mod:`hermesbus.errors`)."""

from hermesbus.errors import RegistryError

__all__ = ["RegistryError"]
