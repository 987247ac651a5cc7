"""The one exception tree of hermesbus.

Third-party errors (fastavro, struct, httpx, aiokafka, ...) are translated at the
boundary with ``raise OurError(...) from exc``; nothing else escapes the public API.

    HermesError
    ├── ConfigError            a setting is missing or malformed
    │   └── SettingError       a setting's value cannot be used (a bad argument: exit 2)
    ├── SchemaError            a schema file is missing, invalid or unresolvable
    │   └── CompatibilityError a schema change breaks the required compatibility
    ├── CodecError
    │   ├── EncodeError        an envelope cannot be written with the schema
    │   └── DecodeError        bytes cannot be turned into an envelope
    │       └── ContractError  bytes decoded, but the envelope breaks the contract
    ├── RegistryError          the schema registry refused or failed a request
    ├── CatalogError           the topic catalog is invalid
    ├── BrokerError            the Kafka cluster refused or failed a request
    ├── StoreError             a state store refused or failed a request
    │   ├── StoreLost          a store came back empty (its mark is gone): paused until adopted
    │   └── TraceIndexError    the trace index (SQLite, Elasticsearch) refused or failed
    ├── IdentityError          a record is unsigned, mis-signed, or its signer may not send it
    ├── ToolError              a tool failed, or cannot be used as registered
    │   ├── AdmissionError     the registry refuses a tool (no schema, probe, verifier, fallback)
    │   └── VerificationError  a tool's result failed its signature, schema or content checks
    ├── IntentError            the configured intent endpoint (HERMES_LLM_URL) failed
    ├── TransitionError        a flow's state table has no such state, exit or transition
    ├── HookError              a flow's hook cannot be admitted, raised, or answered no JSON
    └── ReplyTimeout           no reply to a turn arrived in time (Client.ask)
"""

from __future__ import annotations

__all__ = [
    "AdmissionError",
    "BrokerError",
    "CatalogError",
    "CodecError",
    "CompatibilityError",
    "ConfigError",
    "ContractError",
    "DecodeError",
    "EncodeError",
    "HermesError",
    "HookError",
    "IdentityError",
    "IntentError",
    "RegistryError",
    "ReplyTimeout",
    "SchemaError",
    "SettingError",
    "StoreError",
    "StoreLost",
    "ToolError",
    "TraceIndexError",
    "TransitionError",
    "VerificationError",
]


class HermesError(Exception):
    """Base of every error hermesbus raises on purpose."""


class ConfigError(HermesError):
    """A setting is missing or malformed."""


class SettingError(ConfigError):
    """A setting's value cannot be used, e.g. ``HERMES_HOME`` a folder that cannot be
    written: a bad argument given by a variable (the command line exits 2)."""


class SchemaError(HermesError):
    """A schema file is missing, invalid, or references an unknown named type."""


class CompatibilityError(SchemaError):
    """A schema change breaks the compatibility level that is required."""


class CodecError(HermesError):
    """Base of encode and decode failures."""


class EncodeError(CodecError):
    """An envelope cannot be written with the writer schema."""


class DecodeError(CodecError):
    """Bytes cannot be turned into an envelope; the message names the cause."""


class ContractError(DecodeError):
    """The bytes decoded, but the envelope breaks the contract (a field out of range)."""


class RegistryError(HermesError):
    """The schema registry refused or failed a request."""

    def __init__(self, message: str, *, status_code: int | None = None) -> None:
        super().__init__(message)
        self.status_code = status_code

    @property
    def outage(self) -> bool:
        """The registry is away (no answer), failing (5xx) or busy (429): the request may
        be fine and is held in place; any other answer refuses the request itself."""
        code = self.status_code
        return code is None or code >= 500 or code == 429  # noqa: PLR2004 - HTTP classes


class CatalogError(HermesError):
    """The topic catalog is invalid."""


class BrokerError(HermesError):
    """The Kafka cluster refused or failed a request.

    ``retriable`` is False when trying again cannot help (a record larger than the broker
    accepts, an invalid or forbidden topic): the runtime dead-letters instead of retrying.
    """

    def __init__(self, message: str, *, retriable: bool = True) -> None:
        super().__init__(message)
        self.retriable = retriable


class StoreError(HermesError):
    """A state store (SQLite, Redis, ...) refused or failed a request.

    ``retriable`` is True for an outage (the server is gone, busy, full, or lost the
    connection): the runtime pauses the record in place and tries it again, however long
    it takes, and never dead-letters it. False when trying again cannot help (a query the
    store refuses, a constraint a bug broke): the handler's retry policy applies.
    """

    def __init__(self, message: str, *, retriable: bool = True) -> None:
        super().__init__(message)
        self.retriable = retriable


class StoreLost(StoreError):
    """A store's mark of identity is gone or differs (it came back empty, or is another
    store): every operation on it raises this, retried in place, until the operator runs
    ``hermesbus stores adopt`` or the store's data (and its mark) come back.

    One instance stands for one loss (each retry raises it again): ``store`` names the
    store as the mark book does, ``epoch`` is the mark it should have carried, ``said``
    the full account logged once. :meth:`claim_alert` is true once per loss, so the
    processors sharing the store raise one alert on ``hermes.alerts`` between them."""

    def __init__(self, message: str, *, store: str = "", epoch: str = "", said: str = "") -> None:
        super().__init__(message, retriable=True)
        self.store, self.epoch, self.said = store, epoch, said or message
        self._alerted = False

    def claim_alert(self) -> bool:
        """True for the first caller only: it raises the loss's alert."""
        first, self._alerted = not self._alerted, True
        return first

    def release_alert(self) -> None:
        """The claimed alert could not be sent: the next retry claims it again."""
        self._alerted = False


class TraceIndexError(StoreError):
    """The trace index refused or failed a request.

    ``retriable`` is False when trying again cannot help (a document the index refuses,
    a query it cannot run); True for an outage, which pauses the indexer in place.
    """


class IdentityError(HermesError):
    """A record is unsigned or mis-signed, or its signer may not send it (``code`` says which).

    Codes: ``identity.unsigned``, ``identity.malformed``, ``identity.unknown_key``,
    ``identity.bad_signature``, ``identity.impersonation`` (signed by one component,
    claiming another's ``source``), ``identity.forbidden`` (that component may not write
    this topic with this body).
    """

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.reason = message


class ToolError(HermesError):
    """A tool failed, or cannot be used the way it is registered."""


class AdmissionError(ToolError):
    """The registry refuses a tool: it lacks a schema, a probe, a verifier or a fallback."""


class VerificationError(ToolError):
    """A tool's result failed verification (signature, output schema, sensitive content)."""


class IntentError(HermesError):
    """The configured intent endpoint (``HERMES_LLM_URL``) failed or answered nonsense."""


class TransitionError(HermesError):
    """A trigger the conversation's state table does not allow in the current state, or a
    table that names a state, exit or timeout it does not have."""


class HookError(HermesError):
    """A flow's hook cannot be admitted (module, privacy, kind), raised, or returned what
    the session cannot keep (no JSON, too large)."""


class ReplyTimeout(HermesError):
    """No reply of the turn's trace arrived on the session within the timeout."""
