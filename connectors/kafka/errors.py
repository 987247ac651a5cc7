"""Errors of the Kafka connector (re-exported from :mod:`hermesbus.errors`)."""

from hermesbus.errors import BrokerError, ConfigError

__all__ = ["BrokerError", "ConfigError"]
