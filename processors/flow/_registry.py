"""The registered flows: what the flow registry topic's records say, checked record by record.

Each registered version is one record on the registry topic (``hermes.flows``, one
partition, kept for ever): the spec's YAML as written, keyed ``flow:version:digest`` (the
first 16 hex digits of its SHA-256), signed by the conversation (the component whose
behaviour it is). Every processor instance reads the same records, so all see the same
versions without sharing a filesystem, as Kafka Connect keeps its configs; unlike
Connect's, the topic is never compacted: compaction acts on any record, signed or not, so a
tombstone or a replayed record could delete or swap a version. Appended only, "the first
text of a version by offset" is the same for every reader for ever: a later different one
is reported, a tombstone or a record the conversation did not sign is refused.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final

from hermesbus.errors import ConfigError, IdentityError
from hermesbus.identity import Verifier
from hermesbus.processors.flow._load import FlowSpecError, load_flow
from hermesbus.processors.flow._spec import FlowSpec

__all__ = [
    "DIGEST_CHARS",
    "FLOW_SIGNER",
    "FlowVersion",
    "Refused",
    "Registered",
    "digest_of",
    "record_key",
]

log = logging.getLogger(__name__)

FLOW_SIGNER: Final = "conversation"
"""Who signs a flow version: the component that runs it (``flows register`` holds its key,
as ``up`` does)."""
DIGEST_CHARS: Final = 16


def digest_of(text: bytes) -> str:
    """The SHA-256 of a spec's bytes, in hex."""
    return hashlib.sha256(text).hexdigest()


def record_key(flow: str, version: int, text: bytes) -> bytes:
    """``flow:version:digest`` (16 hex digits of the text's SHA-256)."""
    return f"{flow}:{version}:{digest_of(text)[:DIGEST_CHARS]}".encode()


@dataclass(frozen=True, slots=True)
class FlowVersion:
    """One registered version: its spec, the text it was read from, where it is in the log."""

    spec: FlowSpec
    text: bytes
    offset: int
    registered_at_ms: int

    @property
    def digest(self) -> str:
        return digest_of(self.text)


@dataclass(frozen=True, slots=True)
class Refused:
    """A record of the registry topic that is no flow version, and why (it is skipped)."""

    offset: int
    key: str
    reason: str


@dataclass
class Registered:
    """Every flow version the registry's records hold, checked as they are added in offset
    order: ``add`` keeps a valid, signed record whose key matches its text; the first text
    of a version wins, later different ones are ``conflicts``; the rest are ``refused``."""

    verifier: Verifier
    topic: str
    versions: dict[str, dict[int, FlowVersion]] = field(default_factory=dict)
    refused: list[Refused] = field(default_factory=list)
    conflicts: list[Refused] = field(default_factory=list)
    unverifiable: dict[tuple[str, int], list[tuple[str, int]]] = field(default_factory=dict)
    """(flow, version) -> (digest prefix, offset) of records signed with a key no longer
    live (the conversation's key was rotated twice since): they cannot be believed, yet
    their versions are not free for other text."""

    def add(
        self,
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[tuple[str, bytes]],
        *,
        offset: int,
        timestamp_ms: int,
    ) -> FlowVersion | None:
        """The version ``value`` registers (None: refused, a conflict, or one already kept)."""
        shown = (key or b"").decode("utf-8", "replace")
        try:
            spec = self._believed(key, value, headers, offset)
        except Exception as exc:  # a record of the log never stops its readers
            self._refuse(exc, shown, offset)
            return None
        version = FlowVersion(spec, value or b"", offset, timestamp_ms)
        kept = self.versions.setdefault(spec.flow, {})
        first = kept.get(spec.version)
        if first is None:
            kept[spec.version] = version
            return version
        if first.digest != version.digest:
            reason = (
                f"version {spec.version} of {spec.flow} was registered at offset "
                f"{first.offset} with other text; versions are immutable: the first is kept"
            )
            self.conflicts.append(Refused(offset, shown, reason))
            log.warning("flow registry %s offset %d: %s", self.topic, offset, reason)
        return None

    def _believed(
        self, key: bytes | None, value: bytes | None, headers: Sequence[tuple[str, bytes]], at: int
    ) -> FlowSpec:
        """The spec a record registers, if the conversation signed it and its key is its."""
        if value is None:
            raise ConfigError("a tombstone: a registered version is never deleted")
        signer = self.verifier.signer(self.topic, key, value, headers)
        if signer != FLOW_SIGNER:
            raise ConfigError(f"signed by {signer!r}: only the {FLOW_SIGNER} registers flows")
        try:
            text = value.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ConfigError(f"not UTF-8 text: {exc}") from exc
        try:
            spec, _ = load_flow(text, f"{self.topic}@{at}")
        except FlowSpecError as exc:
            raise ConfigError(str(exc)) from exc
        expected = record_key(spec.flow, spec.version, value)
        if key != expected:
            raise ConfigError(f"its key is not {expected.decode()} (flow:version:digest)")
        return spec

    def _refuse(self, exc: Exception, key: str, offset: int) -> None:
        """Keep why the record at ``offset`` is not believed, and log it; a version signed
        with a key rotated out since stays claimed."""
        if isinstance(exc, IdentityError | ConfigError):
            reason = str(exc)
        else:
            reason = f"{type(exc).__name__}: {exc}"
        if isinstance(exc, IdentityError) and exc.code == "identity.unknown_key":
            claim = _claim(key)
            if claim is not None:
                self.unverifiable.setdefault(claim[:2], []).append((claim[2], offset))
        self.refused.append(Refused(offset, key, reason))
        log.warning("flow registry %s offset %d refused: %s", self.topic, offset, reason)

    def claimed(self, flow: str, version: int) -> list[tuple[str, int]]:
        """Digest prefixes and offsets of unverifiable records naming that version."""
        return self.unverifiable.get((flow, version), [])

    def newest(self, flow: str) -> FlowVersion | None:
        kept = self.versions.get(flow)
        return kept[max(kept)] if kept else None

    def get(self, flow: str, version: int | None = None) -> FlowVersion | None:
        """Version ``version`` of ``flow`` (None: the newest)."""
        if version is None:
            return self.newest(flow)
        return self.versions.get(flow, {}).get(version)

    def flows(self) -> list[str]:
        return sorted(self.versions)


def _claim(key: str) -> tuple[str, int, str] | None:
    """``flow:version:digest`` as its parts; None for another key."""
    flow, _, rest = key.partition(":")
    number, _, digest = rest.partition(":")
    if not flow or not number.isdigit() or len(digest) != DIGEST_CHARS:
        return None
    return flow, int(number), digest
