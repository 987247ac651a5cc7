"""Whether the index believes a record: its signature, checked as a processor checks it.

The indexer holds the bus's keyring, so it checks every record's HMAC signature
(``hermes.signature``) as the bus's processors do: over the record's own topic, or for a
dead letter over its origin topic (a dead letter keeps the original's bytes and headers).
A record is believed when the signature verifies and its signer is the identity its
``source`` names; a processor's own timers (``<processor>:timer``) and retries
(``attempt`` > 1), which it signs itself, are believed on a valid signature alone.

A record not believed is still indexed (the index is also the archive), marked:
``hermes.signature.verified: false`` with the reason, ``service.name: unverified`` (its
``source`` claims a component; nothing proves it), ``event.outcome: unknown`` where it
claimed success, and its message starts with ``unverified``. A believed one gets
``hermes.signature.verified: true`` and the signer.
"""

from __future__ import annotations

from dataclasses import dataclass

from hermesbus.contract.envelope import Envelope
from hermesbus.contract.headers import DLQ_ORIGIN_TOPIC, header
from hermesbus.errors import HermesError, IdentityError
from hermesbus.identity import Verifier
from hermesbus.topics import identity_of

from ._ecs import ALERT_SIGNER, ENVELOPES_DATASET, ROLLUP_DATASET
from ._model import ArchivedRecord, Document

__all__ = ["UNVERIFIED", "Checked", "check", "mark"]

ROLLUP_SIGNER = "diagnostics"
"""The identity whose closed windows are charted (``processors.protocol.DIAGNOSTICS``)."""
UNVERIFIED = "unverified"
"""``service.name`` of a record whose signature does not prove its source."""


@dataclass(frozen=True, slots=True)
class Checked:
    """Who proved to have signed a record (None: nobody), and why it is not believed."""

    signer: str | None
    error: str | None = None

    @property
    def verified(self) -> bool:
        return self.error is None


def check(
    record: ArchivedRecord, decoded: Envelope | HermesError, verifier: Verifier, dlq_topic: str
) -> Checked:
    """Check ``record``'s signature and that its signer is the one its source names."""
    topic = record.topic
    if topic == dlq_topic:
        topic = header(list(record.headers), DLQ_ORIGIN_TOPIC) or topic
    try:
        signer = verifier.signer(topic, record.key, record.value, record.headers)
    except IdentityError as exc:
        return Checked(None, str(exc))
    if not isinstance(decoded, Envelope):
        return Checked(signer)
    claimed = identity_of(decoded.source)
    own = decoded.source.endswith(":timer") or decoded.metadata.attempt > 1
    if signer != claimed and not own:
        reason = f"signed by {signer!r}, but source {decoded.source!r} speaks for {claimed!r}"
        return Checked(signer, f"identity.impersonation: {reason}")
    return Checked(signer)


def mark(doc: Document, checked: Checked) -> Document:
    """Put the check into ``doc``; a record not believed loses what it claimed."""
    signature: dict[str, object] = {"verified": checked.verified, "signer": checked.signer}
    doc["hermes"]["signature"] = signature
    if doc["event"].get("dataset") == ROLLUP_DATASET and (
        not checked.verified or checked.signer != ROLLUP_SIGNER
    ):  # charted figures only from the rollup itself: anything else stays an envelope
        doc["event"]["dataset"] = ENVELOPES_DATASET
        doc["hermes"].pop("rollup", None)
    if not checked.verified or checked.signer != ALERT_SIGNER:
        doc["hermes"].pop("alert", None)  # charted alerts only from the diagnostics' rules
    if checked.verified:
        return doc
    signature["error"] = checked.error
    service = doc.setdefault("service", {})
    service["name"] = UNVERIFIED
    event = doc["event"]
    if event.get("outcome") == "success":
        event["outcome"] = "unknown"
    doc["message"] = f"{UNVERIFIED} ({checked.error}): {doc.get('message', '')}"
    return doc
